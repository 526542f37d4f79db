package simulate

import (
	"context"
	"slices"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// kubeletVolumes is every node's kubelet volume manager, as far as the API shows it: a Node's
// status.volumesInUse lists (sorted) the attachable volumes its pods mount, the CSI volumes of
// the bound claims of its pods that have not finished, from the moment a pod is bound to it
// until the pod is gone or finished (upstream's kubelet unmounts a pod's volumes before it
// confirms the pod's deletion). The attach/detach controller detaches a volume only once it left
// this list. A kubelet that stopped posting its status (the Node's Ready condition Unknown)
// reports nothing, so its volumes stay in use; one that reports NotReady still reports them. The kubelet starts a pod's containers only once its claims are bound and their
// volumes in use and attached (kubelet.go).
type kubeletVolumes struct {
	c   *cluster
	idx int
}

func newKubeletVolumes(c *cluster, idx int) *kubeletVolumes { return &kubeletVolumes{c: c, idx: idx} }

func (k *kubeletVolumes) resources() []schema.GroupResource {
	return []schema.GroupResource{podsGR, pvcsGR, pvsGR, nodesGR}
}

func (k *kubeletVolumes) observe(ch store.Change) {
	switch ch.Resource {
	case podsGR, pvcsGR:
		k.c.enqueueVolumeNodes(k.idx, ch)
	case nodesGR:
		old, _ := ch.Old.(*corev1.Node)
		if node, _ := ch.New.(*corev1.Node); node != nil && (old == nil || kubeletPosting(old) != kubeletPosting(node)) {
			k.c.enqueue(k.idx, node.Name)
		}
	}
}

func (k *kubeletVolumes) sync(ctx context.Context, name string) error {
	node, _ := k.c.cache.get(nodesGR, name).(*corev1.Node)
	if node == nil || !kubeletPosting(node) {
		return nil
	}
	var inUse []corev1.UniqueVolumeName
	for un := range k.c.nodeVolumes(name) {
		inUse = append(inUse, un)
	}
	sort.Slice(inUse, func(i, j int) bool { return inUse[i] < inUse[j] })
	if slices.Equal(inUse, node.Status.VolumesInUse) {
		return nil
	}
	next := node.DeepCopy()
	next.Status.VolumesInUse = inUse
	return client.IgnoreNotFound(k.c.client.Status().Update(ctx, next))
}

// kubeletPosting: the node's kubelet reports its status (the Ready condition is not Unknown, as
// the node lifecycle controller sets it when the kubelet stops posting).
func kubeletPosting(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status != corev1.ConditionUnknown
		}
	}
	return true
}

// volumesMounted reports whether the kubelet has mounted a pod's claims: each bound (and not
// being deleted) and, for a CSI volume on a node the attach/detach controller manages, reported
// in use and attached.
func (c *cluster) volumesMounted(pod *corev1.Pod, node *corev1.Node) bool {
	for vc := range podClaimNames(pod) {
		claim := c.usableClaim(pod, vc)
		if claim == nil || claim.DeletionTimestamp != nil || claim.Spec.VolumeName == "" || claim.Status.Phase != corev1.ClaimBound {
			return false
		}
		pv, _ := c.cache.get(pvsGR, claim.Spec.VolumeName).(*corev1.PersistentVolume)
		if pv == nil {
			return false
		}
		if pv.Spec.CSI == nil || node.Annotations[annControllerManagedAttach] != "true" {
			continue
		}
		un := csiVolumeName(pv.Spec.CSI)
		attached := false
		for _, v := range node.Status.VolumesAttached {
			attached = attached || v.Name == un
		}
		inUse := false
		for _, v := range node.Status.VolumesInUse {
			inUse = inUse || v == un
		}
		if !attached || !inUse {
			return false
		}
	}
	return true
}
