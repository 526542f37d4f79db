package store

import (
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/storage"
)

// The kubelet's node lease: every Node has a Lease of its name in kube-node-lease, owned by the
// Node (so it goes with it), held by the node and renewed every quarter of its 40 s duration,
// as kubelet does. A real kubelet writes each renewal; at 1,000 clusters of 6 nodes that would be
// 600 writes a second nobody reads. The simulated kubelet renews when somebody looks instead: a
// read of leases in kube-node-lease first renews the stale leases of Ready nodes (a NotReady
// node's kubelet is down, so its lease goes stale, as upstream), at most once per interval.

const (
	nodeLeaseNamespace       = "kube-node-lease"
	nodeLeaseDurationSeconds = 40
	nodeLeaseRenewInterval   = nodeLeaseDurationSeconds * time.Second / 4
)

var (
	leasesGVR = coordinationv1.SchemeGroupVersion.WithResource("leases")
	leasesGR  = leasesGVR.GroupResource()
)

// nodeLeases is a cluster's state of its node leases.
type nodeLeases struct {
	renewedAt atomic.Int64 // unix nanoseconds of the last renewal pass
}

// ensureNodeLeaseLocked creates node's Lease if it has none, as kubelet does when it registers.
// Callers hold c.mu.
func (c *Cluster) ensureNodeLeaseLocked(node client.Object) {
	if c.getLocked(leasesGR, storage.Key(nodeLeaseNamespace, node.GetName())) != nil {
		return
	}
	b, ok := behaviorFor(leasesGVR)
	if !ok {
		return
	}
	t := metav1.NewMicroTime(time.Now())
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name: node.GetName(), Namespace: nodeLeaseNamespace,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.GetName(), UID: node.GetUID()}},
		},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(node.GetName()),
			LeaseDurationSeconds: ptr.To[int32](nodeLeaseDurationSeconds),
			RenewTime:            &t,
		},
	}
	_, _ = c.createLocked(b, lease, false, "kubelet", true)
}

// ensureNodeLeasesLocked gives every Node its Lease (a cluster restored from a version that had
// none). Callers hold c.mu.
func (c *Cluster) ensureNodeLeasesLocked() {
	for _, node := range c.objs.Resource(nodesGR) {
		c.ensureNodeLeaseLocked(node)
	}
}

// renewNodeLeases renews the stale leases of Ready nodes before a read of leases in gr that may
// include kube-node-lease (namespace "" or kube-node-lease). It costs one atomic load when the
// leases were renewed within the interval.
func (c *Cluster) renewNodeLeases(gr schema.GroupResource, namespace string) {
	if gr != leasesGR || (namespace != "" && namespace != nodeLeaseNamespace) {
		return
	}
	now := time.Now()
	if last := c.leases.renewedAt.Load(); now.UnixNano()-last < int64(nodeLeaseRenewInterval) {
		return
	}
	c.mu.Lock()
	defer c.unlockDurable(new(error), true) // the simulator's own writes: derived again after a crash
	if last := c.leases.renewedAt.Load(); now.UnixNano()-last < int64(nodeLeaseRenewInterval) {
		return // renewed by another reader meanwhile
	}
	c.leases.renewedAt.Store(now.UnixNano())
	renewTime := metav1.NewMicroTime(now)
	for _, key := range storage.Keys(c.objs.Resource(leasesGR), nodeLeaseNamespace) {
		cur := c.getLocked(leasesGR, key).(*coordinationv1.Lease)
		node, ok := c.getLocked(nodesGR, cur.Name).(*corev1.Node)
		if !ok || !nodeReady(node) || cur.Spec.HolderIdentity == nil || *cur.Spec.HolderIdentity != node.Name {
			continue
		}
		if cur.Spec.RenewTime != nil && now.Sub(cur.Spec.RenewTime.Time) < nodeLeaseRenewInterval {
			continue
		}
		next := cur.DeepCopy()
		next.Spec.RenewTime = &renewTime
		c.storeLocked(leasesGR, next, cur)
	}
}

func nodeReady(node *corev1.Node) bool {
	for _, cond := range node.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}
