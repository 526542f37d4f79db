package simulate

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/component-helpers/storage/ephemeral"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// ephemeralVolumeController is kube-controller-manager's ephemeral volume controller: a pod's
// generic ephemeral volume (spec.volumes[].ephemeral) gets its PersistentVolumeClaim,
// <pod>-<volume> from the volume's claim template, with the pod as its controller, so the
// PersistentVolume controller provisions and binds it like any claim and the garbage collector
// deletes it with the pod. A claim of that name the pod does not own is not the pod's: the pod
// cannot use it (the scheduler and the kubelet check it too, with upstream's
// ephemeral.VolumeIsForPod), and the controller tries again until it is gone.
type ephemeralVolumeController struct {
	c   *cluster
	idx int
}

func newEphemeralVolumeController(c *cluster, idx int) *ephemeralVolumeController {
	return &ephemeralVolumeController{c: c, idx: idx}
}

func (e *ephemeralVolumeController) resources() []schema.GroupResource {
	return []schema.GroupResource{podsGR, pvcsGR}
}

func (e *ephemeralVolumeController) observe(ch store.Change) {
	switch ch.Resource {
	case podsGR:
		if pod, _ := ch.New.(*corev1.Pod); pod != nil && pod.DeletionTimestamp == nil && hasEphemeralVolume(pod) {
			e.c.enqueue(e.idx, keyOf(pod))
		}
	case pvcsGR:
		// A claim gone: a pod that needs one of its name creates it again.
		if old, _ := ch.Old.(*corev1.PersistentVolumeClaim); ch.New == nil && old != nil {
			for _, pod := range e.c.cache.podsIn(old.Namespace) {
				if pod.DeletionTimestamp == nil && usesClaim(pod, old.Name) {
					e.c.enqueue(e.idx, keyOf(pod))
				}
			}
		}
	}
}

func hasEphemeralVolume(pod *corev1.Pod) bool {
	for i := range pod.Spec.Volumes {
		if pod.Spec.Volumes[i].Ephemeral != nil {
			return true
		}
	}
	return false
}

func (e *ephemeralVolumeController) sync(ctx context.Context, key string) error {
	pod, _ := e.c.cache.get(podsGR, key).(*corev1.Pod)
	if pod == nil || pod.DeletionTimestamp != nil {
		return nil
	}
	for i := range pod.Spec.Volumes {
		vol := &pod.Spec.Volumes[i]
		if vol.Ephemeral == nil || vol.Ephemeral.VolumeClaimTemplate == nil {
			continue
		}
		name := ephemeral.VolumeClaimName(pod, vol)
		if claim, _ := e.c.cache.get(pvcsGR, pod.Namespace+"/"+name).(*corev1.PersistentVolumeClaim); claim != nil {
			if err := ephemeral.VolumeIsForPod(pod, claim); err != nil {
				return fmt.Errorf("pod %s, ephemeral volume %s: %w", key, vol.Name, err)
			}
			continue
		}
		tmpl := vol.Ephemeral.VolumeClaimTemplate
		claim := &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: name,
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(pod, podKind)},
				Labels:          tmpl.Labels, Annotations: tmpl.Annotations},
			Spec: *tmpl.Spec.DeepCopy(),
		}
		if err := e.c.client.Create(ctx, claim); err != nil {
			return fmt.Errorf("pod %s, ephemeral volume %s: create PVC %s: %w", key, vol.Name, name, err)
		}
	}
	return nil
}
