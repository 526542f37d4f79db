package simulate

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// The kubelets' node leases: every Node has a Lease of its name in kube-node-lease, owned by the
// Node (so the garbage collector deletes it with it), held by the node and renewed every quarter
// of its 40 s duration, as kubelet's node lease controller does. A real kubelet writes each
// renewal; at 1,000 clusters of 6 nodes that would be 600 writes a second nobody reads. The
// simulated kubelets renew when somebody looks instead: a read of leases in kube-node-lease
// (store.Cluster.OnRead) first renews the stale leases of Ready nodes, at most once per interval
// (a NotReady node's kubelet is down, so its lease goes stale, as upstream).

const (
	nodeLeaseNamespace       = "kube-node-lease"
	nodeLeaseDurationSeconds = 40
	nodeLeaseRenewInterval   = nodeLeaseDurationSeconds * time.Second / 4
)

var leasesGR = coordinationv1.SchemeGroupVersion.WithResource("leases").GroupResource()

// nodeLeases is every node's kubelet, as far as its lease goes. It keeps a few facts per node
// (not the objects): whether the node is Ready, and its lease's holder and renew time.
type nodeLeases struct {
	c   *cluster
	idx int

	mu    sync.Mutex
	nodes map[string]*leaseState // by node name; also a lease whose node is not known (yet)

	// renewMu serializes renewal passes: a reader that finds the leases stale waits for the pass
	// under way rather than reading them stale.
	renewMu   sync.Mutex
	renewedAt atomic.Int64 // unix nanoseconds of the last renewal pass
	stopHook  func()
}

// leaseState is what nodeLeases knows of a node and its lease.
type leaseState struct {
	node    bool // the Node exists
	uid     types.UID
	ready   bool
	lease   bool // its Lease exists
	held    bool // the Lease's holder is the node
	renewed time.Time
}

func newNodeLeases(c *cluster, idx int) *nodeLeases {
	nl := &nodeLeases{c: c, idx: idx, nodes: map[string]*leaseState{}}
	nl.stopHook = c.store.OnRead(leasesGR, nl.beforeRead)
	return nl
}

func (nl *nodeLeases) uncached() {}

func (nl *nodeLeases) stop() { nl.stopHook() }

func (nl *nodeLeases) resources() []schema.GroupResource {
	return []schema.GroupResource{nodesGR, leasesGR}
}

func (nl *nodeLeases) stateLocked(name string) *leaseState {
	s := nl.nodes[name]
	if s == nil {
		s = &leaseState{}
		nl.nodes[name] = s
	}
	return s
}

func (nl *nodeLeases) forgetIfEmptyLocked(name string, s *leaseState) {
	if !s.node && !s.lease {
		delete(nl.nodes, name)
	}
}

// observe notes nodes and node leases, and queues a node without a lease (a new node, a node
// of a cluster restored from a version that had none, a lease deleted under a running kubelet).
func (nl *nodeLeases) observe(ch store.Change) {
	obj := changedObject(ch)
	if ch.Resource == leasesGR && obj.GetNamespace() != nodeLeaseNamespace {
		return
	}
	nl.mu.Lock()
	defer nl.mu.Unlock()
	name := obj.GetName()
	s := nl.stateLocked(name)
	switch o := ch.New.(type) {
	case *corev1.Node:
		s.node, s.uid, s.ready = true, o.UID, nodeReady(o)
	case *coordinationv1.Lease:
		s.lease = true
		s.held = o.Spec.HolderIdentity != nil && *o.Spec.HolderIdentity == name
		s.renewed = time.Time{}
		if o.Spec.RenewTime != nil {
			s.renewed = o.Spec.RenewTime.Time
		}
	case nil:
		if ch.Resource == nodesGR {
			s.node = false
		} else {
			s.lease = false
		}
	}
	if s.node && !s.lease {
		nl.c.enqueue(nl.idx, name)
	}
	nl.forgetIfEmptyLocked(name, s)
}

// sync creates the node's Lease if it has none, as kubelet does when it registers.
func (nl *nodeLeases) sync(ctx context.Context, name string) error {
	nl.mu.Lock()
	s := nl.nodes[name]
	if s == nil || !s.node || s.lease {
		nl.mu.Unlock()
		return nil
	}
	uid := s.uid
	nl.mu.Unlock()
	t := metav1.NewMicroTime(time.Now())
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: nodeLeaseNamespace,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: name, UID: uid}},
		},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(name),
			LeaseDurationSeconds: ptr.To[int32](nodeLeaseDurationSeconds),
			RenewTime:            &t,
		},
	}
	err := nl.c.client.Create(ctx, lease, client.FieldOwner("kubelet"))
	if apierrors.IsAlreadyExists(err) {
		return nil // created meanwhile (or only not observed yet): its change is on its way
	}
	return err
}

// beforeRead renews the stale leases of Ready nodes before a read of leases that may include
// kube-node-lease (namespace "" or kube-node-lease). It costs an atomic load when the leases
// were renewed within the interval. It writes through the client and reads nothing from the
// store (a read would run it again).
func (nl *nodeLeases) beforeRead(namespace string) {
	if namespace != "" && namespace != nodeLeaseNamespace {
		return
	}
	if time.Now().UnixNano()-nl.renewedAt.Load() < int64(nodeLeaseRenewInterval) {
		return
	}
	nl.renewMu.Lock()
	defer nl.renewMu.Unlock()
	now := time.Now()
	if now.UnixNano()-nl.renewedAt.Load() < int64(nodeLeaseRenewInterval) {
		return // renewed by another reader meanwhile
	}
	var stale []string
	nl.mu.Lock()
	for name, s := range nl.nodes {
		if s.node && s.ready && s.lease && s.held && now.Sub(s.renewed) >= nodeLeaseRenewInterval {
			stale = append(stale, name)
		}
	}
	nl.mu.Unlock()
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"renewTime": metav1.NewMicroTime(now)}})
	for _, name := range stale {
		lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: nodeLeaseNamespace}}
		// A lease deleted or changed meanwhile is not renewed: the next reader tries again.
		_ = nl.c.client.Patch(nl.c.ctx, lease, client.RawPatch(types.MergePatchType, patch), client.FieldOwner("kubelet"))
	}
	nl.renewedAt.Store(now.UnixNano())
}
