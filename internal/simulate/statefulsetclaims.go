package simulate

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
)

// The StatefulSet controller's part in the life of an ordinal's PersistentVolumeClaims under the
// set's persistentVolumeClaimRetentionPolicy (GA in 1.32): it makes the set or the pod their
// controller, and the garbage collector does the deleting. whenDeleted: Delete makes the set own
// the claims of the ordinals in range, so they go with the set; whenScaled: Delete makes a pod
// that a scale-down condemns own its claims, so they go with the pod. Retain on both, the
// default, leaves them unowned and used again. The rules are upstream's (isClaimOwnerUpToDate and
// updateClaimOwnerRefForSetAndPod in pkg/controller/statefulset); claims that name an earlier
// set or pod of the same name, or that another controller owns, are left alone.

var podKind = corev1.SchemeGroupVersion.WithKind("Pod")

// retentionPolicy is the set's policy, Retain for what it does not say.
func retentionPolicy(set *appsv1.StatefulSet) (whenScaled, whenDeleted appsv1.PersistentVolumeClaimRetentionPolicyType) {
	whenScaled, whenDeleted = appsv1.RetainPersistentVolumeClaimRetentionPolicyType, appsv1.RetainPersistentVolumeClaimRetentionPolicyType
	if p := set.Spec.PersistentVolumeClaimRetentionPolicy; p != nil {
		if p.WhenScaled != "" {
			whenScaled = p.WhenScaled
		}
		if p.WhenDeleted != "" {
			whenDeleted = p.WhenDeleted
		}
	}
	return whenScaled, whenDeleted
}

// names reports whether ref is a reference to an object of obj's kind and name (any UID).
func names(ref metav1.OwnerReference, obj metav1.Object, gvk schema.GroupVersionKind) bool {
	return ref.APIVersion == gvk.GroupVersion().String() && ref.Kind == gvk.Kind && ref.Name == obj.GetName()
}

// claimOwners returns the owner references the claim should have for the set and the pod of its
// ordinal (inRange: the ordinal is within the set's replicas), and whether they differ from the
// claim's own.
func claimOwners(claim *corev1.PersistentVolumeClaim, set *appsv1.StatefulSet, pod *corev1.Pod, inRange bool) ([]metav1.OwnerReference, bool) {
	refs := claim.OwnerReferences
	hasSet, hasPod, nonController, otherController := false, false, false, false
	for _, ref := range refs {
		switch {
		case names(ref, set, statefulSetKind):
			if ref.UID != set.UID {
				return nil, false // an earlier set's: the garbage collector's business
			}
			hasSet = true
		case names(ref, pod, podKind):
			if ref.UID != pod.UID {
				return nil, false // an earlier pod's
			}
			hasPod = true
		case ptr.Deref(ref.Controller, false):
			otherController = true
			continue
		default:
			continue
		}
		nonController = nonController || !ptr.Deref(ref.Controller, false)
	}
	whenScaled, whenDeleted := retentionPolicy(set)
	const del = appsv1.DeletePersistentVolumeClaimRetentionPolicyType
	wantSet := whenDeleted == del && inRange
	wantPod := whenScaled == del && !inRange
	if otherController && (whenScaled == del || whenDeleted == del) {
		// Another controller manages the claim: ours step back, and add nothing.
		wantSet, wantPod = false, false
		if !hasSet && !hasPod {
			return nil, false
		}
	}
	if !nonController && hasSet == wantSet && hasPod == wantPod {
		return nil, false
	}
	out := make([]metav1.OwnerReference, 0, len(refs)+1)
	for _, ref := range refs {
		if !names(ref, set, statefulSetKind) && !names(ref, pod, podKind) {
			out = append(out, ref)
		}
	}
	if wantSet {
		out = append(out, *metav1.NewControllerRef(set, statefulSetKind))
	}
	if wantPod {
		out = append(out, *metav1.NewControllerRef(pod, podKind))
	}
	return out, true
}

// syncClaimOwners gives the pod's claims the owners the set's policy asks for.
func (s *statefulSetController) syncClaimOwners(ctx context.Context, set *appsv1.StatefulSet, pod *corev1.Pod, ord int, inRange bool) error {
	for _, tmpl := range set.Spec.VolumeClaimTemplates {
		claim, _ := s.c.cache.get(pvcsGR, set.Namespace+"/"+claimName(tmpl.Name, set.Name, ord)).(*corev1.PersistentVolumeClaim)
		if claim == nil {
			continue // created on the pod's next start, or not yet seen
		}
		refs, change := claimOwners(claim, set, pod, inRange)
		if !change {
			continue
		}
		next := claim.DeepCopy()
		next.OwnerReferences = refs
		if err := s.c.client.Update(ctx, next); err != nil && !isGone(err) {
			return fmt.Errorf("updating the owners of claim %s for its retention policy: %w", claim.Name, err)
		}
	}
	return nil
}

// claimsAreStale reports whether an ordinal whose pod does not exist still has a claim that an
// earlier pod of its name owns (whenScaled: Delete): the garbage collector is deleting it, and the
// pod waits for it to go rather than mount it, as upstream's PodClaimIsStale.
func (s *statefulSetController) claimsAreStale(set *appsv1.StatefulSet, ord int) bool {
	if whenScaled, _ := retentionPolicy(set); whenScaled == appsv1.RetainPersistentVolumeClaimRetentionPolicyType {
		return false
	}
	pod := fmt.Sprintf("%s-%d", set.Name, ord)
	for _, tmpl := range set.Spec.VolumeClaimTemplates {
		claim := s.c.cache.get(pvcsGR, set.Namespace+"/"+claimName(tmpl.Name, set.Name, ord))
		if claim == nil {
			continue
		}
		for _, ref := range claim.GetOwnerReferences() {
			if ref.APIVersion == "v1" && ref.Kind == "Pod" && ref.Name == pod {
				return true
			}
		}
	}
	return false
}
