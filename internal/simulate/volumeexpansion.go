package simulate

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// annStorageResizer names the resizer of a claim's volume, as kube-controller-manager's expand
// controller sets it for a CSI volume (its driver); the CSI external resizer serves the claims
// that name its driver.
const annStorageResizer = "volume.kubernetes.io/storage-resizer"

const fsResizePendingMessage = "Waiting for user to (re-)start a pod to finish file system resize of volume on node."

// volumeExpansion grows a bound claim's CSI volume when its storage request exceeds its
// capacity (the API server lets that happen only when its StorageClass allows expansion), as the
// expand controller, the CSI external resizer and the kubelets do together, with the status
// each of them writes (pkg/volume/util's resize helpers, RecoverVolumeExpansionFailure on):
//  1. the expand controller annotates the claim with its resizer;
//  2. the resizer marks it Resizing, status.allocatedResources the new size and
//     allocatedResourceStatuses ControllerResizeInProgress, grows the PersistentVolume's
//     capacity, then hands the claim to the node: FileSystemResizePending, NodeResizePending;
//  3. the kubelet of a node where a Running pod mounts the claim expands the file system
//     (NodeResizeInProgress), then reports status.capacity the new size and clears the resize
//     status and conditions. Without such a pod the claim waits, as upstream, until one starts.
type volumeExpansion struct {
	c   *cluster
	idx int
}

func newVolumeExpansion(c *cluster, idx int) *volumeExpansion {
	return &volumeExpansion{c: c, idx: idx}
}

func (v *volumeExpansion) resources() []schema.GroupResource {
	return []schema.GroupResource{pvcsGR, pvsGR, podsGR}
}

func (v *volumeExpansion) observe(ch store.Change) {
	switch ch.Resource {
	case pvcsGR:
		if claim, _ := ch.New.(*corev1.PersistentVolumeClaim); claim != nil && claim.Status.Phase == corev1.ClaimBound {
			v.c.enqueue(v.idx, keyOf(claim))
		}
	case pvsGR:
		if pv, _ := ch.New.(*corev1.PersistentVolume); pv != nil && pv.Spec.ClaimRef != nil {
			v.c.enqueue(v.idx, pv.Spec.ClaimRef.Namespace+"/"+pv.Spec.ClaimRef.Name)
		}
	case podsGR:
		// A pod that starts running mounts its claims: the kubelet finishes their expansion.
		if pod, _ := ch.New.(*corev1.Pod); pod != nil && pod.Status.Phase == corev1.PodRunning {
			if old, _ := ch.Old.(*corev1.Pod); old == nil || old.Status.Phase != corev1.PodRunning {
				for vc := range podClaimNames(pod) {
					v.c.enqueue(v.idx, pod.Namespace+"/"+vc.name)
				}
			}
		}
	}
}

func (v *volumeExpansion) sync(ctx context.Context, key string) error {
	claim, _ := v.c.cache.get(pvcsGR, key).(*corev1.PersistentVolumeClaim)
	if claim == nil || claim.DeletionTimestamp != nil || claim.Status.Phase != corev1.ClaimBound || claim.Spec.VolumeName == "" {
		return nil
	}
	pv, _ := v.c.cache.get(pvsGR, claim.Spec.VolumeName).(*corev1.PersistentVolume)
	if pv == nil || pv.Spec.CSI == nil {
		return nil // only CSI volumes have a resizer here
	}
	requested := claim.Spec.Resources.Requests[corev1.ResourceStorage]
	capacity := claim.Status.Capacity[corev1.ResourceStorage]
	state := claim.Status.AllocatedResourceStatuses[corev1.ResourceStorage]
	switch {
	case state == corev1.PersistentVolumeClaimNodeResizePending || state == corev1.PersistentVolumeClaimNodeResizeInProgress:
		return v.expandOnNode(ctx, claim)
	case requested.Cmp(capacity) <= 0:
		return nil
	case claim.Annotations[annStorageResizer] != pv.Spec.CSI.Driver:
		next := claim.DeepCopy()
		metav1.SetMetaDataAnnotation(&next.ObjectMeta, annStorageResizer, pv.Spec.CSI.Driver)
		return v.c.client.Update(ctx, next)
	}
	next := claim.DeepCopy()
	now := metav1.Now()
	if allocated := next.Status.AllocatedResources[corev1.ResourceStorage]; state != corev1.PersistentVolumeClaimControllerResizeInProgress || allocated.Cmp(requested) != 0 {
		setResizeConditions(next, []corev1.PersistentVolumeClaimCondition{{Type: corev1.PersistentVolumeClaimResizing, Status: corev1.ConditionTrue, LastTransitionTime: now}}, false)
		setStorageResizeStatus(next, corev1.PersistentVolumeClaimControllerResizeInProgress)
		if next.Status.AllocatedResources == nil {
			next.Status.AllocatedResources = corev1.ResourceList{}
		}
		next.Status.AllocatedResources[corev1.ResourceStorage] = requested
		if err := v.c.client.Status().Update(ctx, next); err != nil {
			return err
		}
	}
	if q := pv.Spec.Capacity[corev1.ResourceStorage]; q.Cmp(requested) < 0 {
		grown := pv.DeepCopy()
		grown.Spec.Capacity[corev1.ResourceStorage] = requested
		if err := v.c.client.Update(ctx, grown); err != nil {
			return err
		}
	}
	// The controller's part is done; the file system grows on the node.
	setResizeConditions(next, []corev1.PersistentVolumeClaimCondition{{Type: corev1.PersistentVolumeClaimFileSystemResizePending,
		Status: corev1.ConditionTrue, LastTransitionTime: now, Message: fsResizePendingMessage}}, false)
	setStorageResizeStatus(next, corev1.PersistentVolumeClaimNodeResizePending)
	if err := v.c.client.Status().Update(ctx, next); err != nil {
		return err
	}
	return v.expandOnNode(ctx, next)
}

// expandOnNode is the kubelet's online expansion: once a Running pod on a node whose kubelet
// posts its status mounts the claim.
func (v *volumeExpansion) expandOnNode(ctx context.Context, claim *corev1.PersistentVolumeClaim) error {
	if !v.mounted(claim) {
		return nil
	}
	next := claim.DeepCopy()
	if next.Status.AllocatedResourceStatuses[corev1.ResourceStorage] != corev1.PersistentVolumeClaimNodeResizeInProgress {
		setStorageResizeStatus(next, corev1.PersistentVolumeClaimNodeResizeInProgress)
		if err := v.c.client.Status().Update(ctx, next); err != nil {
			return err
		}
	}
	size, ok := next.Status.AllocatedResources[corev1.ResourceStorage]
	if !ok {
		size = next.Spec.Resources.Requests[corev1.ResourceStorage]
	}
	if next.Status.Capacity == nil {
		next.Status.Capacity = corev1.ResourceList{}
	}
	next.Status.Capacity[corev1.ResourceStorage] = size
	delete(next.Status.AllocatedResourceStatuses, corev1.ResourceStorage)
	if len(next.Status.AllocatedResourceStatuses) == 0 {
		next.Status.AllocatedResourceStatuses = nil
	}
	setResizeConditions(next, nil, false)
	return v.c.client.Status().Update(ctx, next)
}

// mounted: a Running pod, not being deleted, mounts the claim on a node whose kubelet posts.
func (v *volumeExpansion) mounted(claim *corev1.PersistentVolumeClaim) bool {
	for _, pod := range v.c.cache.podsIn(claim.Namespace) {
		if pod.DeletionTimestamp != nil || pod.Status.Phase != corev1.PodRunning || pod.Spec.NodeName == "" {
			continue
		}
		if vc, ok := podClaim(pod, claim.Name); !ok || v.c.usableClaim(pod, vc) == nil {
			continue
		}
		if node, _ := v.c.cache.get(nodesGR, pod.Spec.NodeName).(*corev1.Node); node != nil && kubeletPosting(node) {
			return true
		}
	}
	return false
}

func podClaim(pod *corev1.Pod, name string) (volumeClaim, bool) {
	for vc := range podClaimNames(pod) {
		if vc.name == name {
			return vc, true
		}
	}
	return volumeClaim{}, false
}

// resizeConditionTypes are the claim conditions the resize helpers own.
var resizeConditionTypes = map[corev1.PersistentVolumeClaimConditionType]bool{
	corev1.PersistentVolumeClaimFileSystemResizePending: true,
	corev1.PersistentVolumeClaimResizing:                true,
	corev1.PersistentVolumeClaimControllerResizeError:   true,
	corev1.PersistentVolumeClaimNodeResizeError:         true,
}

// setResizeConditions is upstream's MergeResizeConditionOnPVC: conditions of other types stay;
// of the resize conditions, those given replace theirs (keeping an unchanged one's time), the
// others stay only with keepOld.
func setResizeConditions(claim *corev1.PersistentVolumeClaim, conditions []corev1.PersistentVolumeClaimCondition, keepOld bool) {
	given := map[corev1.PersistentVolumeClaimConditionType]int{}
	for i, c := range conditions {
		given[c.Type] = i
	}
	done := map[corev1.PersistentVolumeClaimConditionType]bool{}
	var out []corev1.PersistentVolumeClaimCondition
	for _, c := range claim.Status.Conditions {
		i, ok := given[c.Type]
		switch {
		case !resizeConditionTypes[c.Type]:
			out = append(out, c)
		case ok && conditions[i].Status != c.Status:
			out, done[c.Type] = append(out, conditions[i]), true
		case ok:
			out, done[c.Type] = append(out, c), true
		case keepOld:
			out = append(out, c)
		}
	}
	for _, c := range conditions {
		if !done[c.Type] {
			out = append(out, c)
		}
	}
	claim.Status.Conditions = out
}

func setStorageResizeStatus(claim *corev1.PersistentVolumeClaim, status corev1.ClaimResourceStatus) {
	if claim.Status.AllocatedResourceStatuses == nil {
		claim.Status.AllocatedResourceStatuses = map[corev1.ResourceName]corev1.ClaimResourceStatus{}
	}
	claim.Status.AllocatedResourceStatuses[corev1.ResourceStorage] = status
}
