package apiserver

import (
	"errors"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	storagehelpers "k8s.io/component-helpers/storage/volume"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

var (
	claimsGVR         = corev1.SchemeGroupVersion.WithResource("persistentvolumeclaims")
	storageClassesGVR = storagev1.SchemeGroupVersion.WithResource("storageclasses")
)

// resizeAdmission is kube-apiserver's PersistentVolumeClaimResize admission plugin, as the
// store's ValidateObject (judged inside the optimistic write, on the object about to be stored):
// a claim's storage request may grow only once it is bound, and only when its StorageClass, the
// same before and after, has allowVolumeExpansion. Nil for other writes.
func (h *handler) resizeAdmission(rq *reqScope) store.ValidateObjectFunc {
	if rq.gvr.GroupResource() != claimsGVR.GroupResource() || rq.sub != "" {
		return nil
	}
	return func(obj, old client.Object) error {
		claim, _ := obj.(*corev1.PersistentVolumeClaim)
		oldClaim, _ := old.(*corev1.PersistentVolumeClaim)
		if claim == nil || oldClaim == nil {
			return nil
		}
		size, oldSize := claim.Spec.Resources.Requests[corev1.ResourceStorage], oldClaim.Spec.Resources.Requests[corev1.ResourceStorage]
		if size.Cmp(oldSize) <= 0 {
			return nil
		}
		if oldClaim.Status.Phase != corev1.ClaimBound {
			//lint:ignore ST1005 upstream's message, word for word
			return apierrors.NewForbidden(claimsGVR.GroupResource(), claim.Name, errors.New("Only bound persistent volume claims can be expanded"))
		}
		if !h.classAllowsExpansion(claim, oldClaim) {
			return apierrors.NewForbidden(claimsGVR.GroupResource(), claim.Name,
				errors.New("only dynamically provisioned pvc can be resized and the storageclass that provisions the pvc must support resize"))
		}
		return nil
	}
}

func (h *handler) classAllowsExpansion(claim, oldClaim *corev1.PersistentVolumeClaim) bool {
	class := storagehelpers.GetPersistentVolumeClaimClass(claim)
	if class == "" || class != storagehelpers.GetPersistentVolumeClaimClass(oldClaim) {
		return false
	}
	obj, err := h.c.Get(storageClassesGVR, "", class)
	sc, _ := obj.(*storagev1.StorageClass)
	return err == nil && sc != nil && sc.AllowVolumeExpansion != nil && *sc.AllowVolumeExpansion
}

// writeValidators is what judges an update or patch inside the store's write: RBAC's escalation
// check and the resize admission.
func (h *handler) writeValidators(rq *reqScope) store.ValidateObjectFunc {
	var checks []store.ValidateObjectFunc
	for _, f := range []store.ValidateObjectFunc{h.grantValidator(rq), h.resizeAdmission(rq)} {
		if f != nil {
			checks = append(checks, f)
		}
	}
	switch len(checks) {
	case 0:
		return nil
	case 1:
		return checks[0]
	}
	return func(obj, old client.Object) error {
		for _, f := range checks {
			if err := f(obj, old); err != nil {
				return err
			}
		}
		return nil
	}
}
