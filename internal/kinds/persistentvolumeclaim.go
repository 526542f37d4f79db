package kinds

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/diff"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// persistentVolumeClaimStrategy: a new PersistentVolumeClaim reads back Pending (upstream stores
// an empty status and its defaults fill in the phase), with upstream's default volume mode.
type persistentVolumeClaimStrategy struct{ base }

func init() {
	register(persistentVolumeClaimStrategy{newBase(resource{corev1.SchemeGroupVersion, "persistentvolumeclaims",
		"PersistentVolumeClaim", true, []string{"pvc"}, nil, []string{"status"}})})
}

// Default is upstream's SetDefaults_PersistentVolumeClaim and SetDefaults_PersistentVolumeClaimSpec.
func (persistentVolumeClaimStrategy) Default(obj runtime.Object) {
	pvc := obj.(*corev1.PersistentVolumeClaim)
	if pvc.Status.Phase == "" {
		pvc.Status.Phase = corev1.ClaimPending
	}
	if pvc.Spec.VolumeMode == nil {
		mode := corev1.PersistentVolumeFilesystem
		pvc.Spec.VolumeMode = &mode
	}
}

func (s persistentVolumeClaimStrategy) PrepareForCreate(ctx context.Context, obj runtime.Object) {
	s.base.PrepareForCreate(ctx, obj)
	obj.(*corev1.PersistentVolumeClaim).Status.Phase = corev1.ClaimPending
}

// ValidateUpdate is the spec part of upstream's ValidatePersistentVolumeClaimUpdate (1.36; the
// metadata is validated for every kind): the spec is immutable but for volumeName, set once (by
// the PersistentVolume controller), storageClassName, set once from nil (a default class applied
// retroactively) or from the beta annotation, and, of a bound claim, resources.requests and
// volumeAttributesClassName. The storage request may go down (RecoverVolumeExpansionFailure, on
// since 1.34) but not to status.capacity or below. Whether a claim may grow at all is the
// resize admission's to say (the API server's PersistentVolumeClaimResize plugin).
func (persistentVolumeClaimStrategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	pvc, oldPVC := obj.(*corev1.PersistentVolumeClaim), old.(*corev1.PersistentVolumeClaim)
	spec, oldSpec := pvc.Spec.DeepCopy(), oldPVC.Spec.DeepCopy()
	var errs field.ErrorList
	if oldSpec.VolumeName == "" {
		oldSpec.VolumeName = spec.VolumeName
	}
	oldClass, oldAnnotated := oldPVC.Annotations[corev1.BetaStorageClassAnnotation]
	newClass, newAnnotated := pvc.Annotations[corev1.BetaStorageClassAnnotation]
	fromAnnotation := oldAnnotated && oldSpec.StorageClassName == nil && spec.StorageClassName != nil &&
		*spec.StorageClassName == oldClass && (!newAnnotated || newClass == oldClass)
	if fromAnnotation {
		spec.StorageClassName = nil
	} else {
		if newClass != oldClass {
			errs = append(errs, field.Invalid(field.NewPath("metadata").Child("annotations", corev1.BetaStorageClassAnnotation), newClass, "field is immutable"))
		}
		if spec.StorageClassName != nil && oldSpec.StorageClassName == nil && (!oldAnnotated || *spec.StorageClassName == oldClass) {
			oldSpec.StorageClassName = spec.StorageClassName
		}
	}
	bound := pvc.Status.Phase == corev1.ClaimBound
	if bound && spec.Resources.Requests != nil {
		if q, ok := oldPVC.Spec.Resources.Requests[corev1.ResourceStorage]; ok {
			spec.Resources.Requests[corev1.ResourceStorage] = q
		} else {
			delete(spec.Resources.Requests, corev1.ResourceStorage)
		}
	}
	if bound {
		spec.VolumeAttributesClassName = oldSpec.VolumeAttributesClassName
	}
	if !apiequality.Semantic.DeepEqual(spec, oldSpec) {
		errs = append(errs, field.Forbidden(field.NewPath("spec"), fmt.Sprintf(
			"spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims\n%v", diff.Diff(oldSpec, spec))))
	}
	newSize, oldSize := pvc.Spec.Resources.Requests[corev1.ResourceStorage], oldPVC.Spec.Resources.Requests[corev1.ResourceStorage]
	if capacity := oldPVC.Status.Capacity[corev1.ResourceStorage]; newSize.Cmp(oldSize) < 0 && newSize.Cmp(capacity) <= 0 {
		errs = append(errs, field.Forbidden(field.NewPath("spec", "resources", "requests", "storage"), "field can not be less than status.capacity"))
	}
	return append(errs, apimachineryvalidation.ValidateImmutableField(pvc.Spec.VolumeMode, oldPVC.Spec.VolumeMode, field.NewPath("volumeMode"))...)
}

func (persistentVolumeClaimStrategy) Printer() Printer { return persistentVolumeClaimPrinter }

var persistentVolumeClaimPrinter = Printer{
	Columns: []metav1.TableColumnDefinition{colName, col("Status", "string", 0), col("Volume", "string", 0),
		col("Capacity", "string", 0), col("Access Modes", "string", 0), col("StorageClass", "string", 0),
		col("VolumeAttributesClass", "string", 0), colAge, col("VolumeMode", "string", 1)},
	Cells: func(o runtime.Object) []any {
		pvc := o.(*corev1.PersistentVolumeClaim)
		phase := string(pvc.Status.Phase)
		if pvc.DeletionTimestamp != nil {
			phase = "Terminating"
		}
		capacity, modes := "", ""
		if pvc.Spec.VolumeName != "" {
			q := pvc.Status.Capacity[corev1.ResourceStorage]
			capacity, modes = q.String(), accessModes(pvc.Status.AccessModes)
		}
		class := ""
		if c, ok := pvc.Annotations[corev1.BetaStorageClassAnnotation]; ok {
			class = c
		} else if pvc.Spec.StorageClassName != nil {
			class = *pvc.Spec.StorageClassName
		}
		return []any{pvc.Name, phase, pvc.Spec.VolumeName, capacity, modes, class,
			orUnset(pvc.Spec.VolumeAttributesClassName), age(pvc.CreationTimestamp), volumeModeCell(pvc.Spec.VolumeMode)}
	},
}
