package simulate

import (
	"context"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// nodeLifecycle is kube-controller-manager's node lifecycle controller and taint eviction
// controller: a Node's conditions and cordon become taints (TaintNodesByCondition: NoSchedule;
// taint-based eviction: not-ready and unreachable NoExecute), and a pod on a node with a
// NoExecute taint it does not tolerate is deleted, at once or after its tolerationSeconds (300 s
// by default, as the DefaultTolerationSeconds admission gives every pod).
type nodeLifecycle struct {
	c   *cluster
	idx int
}

func newNodeLifecycle(c *cluster, idx int) *nodeLifecycle { return &nodeLifecycle{c: c, idx: idx} }

func (n *nodeLifecycle) resources() []schema.GroupResource {
	return []schema.GroupResource{nodesGR, podsGR}
}

func (n *nodeLifecycle) observe(ch store.Change) {
	switch obj := ch.New.(type) {
	case *corev1.Node:
		n.c.enqueue(n.idx, obj.Name)
	case *corev1.Pod:
		// A pod newly on a node is judged against the node's NoExecute taints.
		if old, _ := ch.Old.(*corev1.Pod); obj.Spec.NodeName != "" && (old == nil || old.Spec.NodeName == "") {
			if node, _ := n.c.cache.get(nodesGR, obj.Spec.NodeName).(*corev1.Node); node != nil && hasNoExecute(node) {
				n.c.enqueue(n.idx, obj.Spec.NodeName)
			}
		}
	}
}

func hasNoExecute(node *corev1.Node) bool {
	for _, t := range node.Spec.Taints {
		if t.Effect == corev1.TaintEffectNoExecute {
			return true
		}
	}
	return false
}

// managedTaints are the taints this controller owns: set from the node's conditions, removed
// when they no longer hold.
var managedTaints = map[string]bool{
	corev1.TaintNodeNotReady: true, corev1.TaintNodeUnreachable: true, corev1.TaintNodeUnschedulable: true,
	corev1.TaintNodeMemoryPressure: true, corev1.TaintNodeDiskPressure: true, corev1.TaintNodePIDPressure: true,
	corev1.TaintNodeNetworkUnavailable: true,
}

// conditionTaints are the taints a node's status and cordon call for.
func conditionTaints(node *corev1.Node) []corev1.Taint {
	var out []corev1.Taint
	add := func(key string, effects ...corev1.TaintEffect) {
		for _, e := range effects {
			out = append(out, corev1.Taint{Key: key, Effect: e})
		}
	}
	for _, c := range node.Status.Conditions {
		switch {
		case c.Type == corev1.NodeReady && c.Status == corev1.ConditionFalse:
			add(corev1.TaintNodeNotReady, corev1.TaintEffectNoSchedule, corev1.TaintEffectNoExecute)
		case c.Type == corev1.NodeReady && c.Status == corev1.ConditionUnknown:
			add(corev1.TaintNodeUnreachable, corev1.TaintEffectNoSchedule, corev1.TaintEffectNoExecute)
		case c.Type == corev1.NodeMemoryPressure && c.Status == corev1.ConditionTrue:
			add(corev1.TaintNodeMemoryPressure, corev1.TaintEffectNoSchedule)
		case c.Type == corev1.NodeDiskPressure && c.Status == corev1.ConditionTrue:
			add(corev1.TaintNodeDiskPressure, corev1.TaintEffectNoSchedule)
		case c.Type == corev1.NodePIDPressure && c.Status == corev1.ConditionTrue:
			add(corev1.TaintNodePIDPressure, corev1.TaintEffectNoSchedule)
		case c.Type == corev1.NodeNetworkUnavailable && c.Status == corev1.ConditionTrue:
			add(corev1.TaintNodeNetworkUnavailable, corev1.TaintEffectNoSchedule)
		}
	}
	if node.Spec.Unschedulable {
		add(corev1.TaintNodeUnschedulable, corev1.TaintEffectNoSchedule)
	}
	return out
}

func (n *nodeLifecycle) sync(ctx context.Context, key string) error {
	node, _ := n.c.cache.get(nodesGR, key).(*corev1.Node)
	if node == nil || node.DeletionTimestamp != nil {
		return nil
	}
	if taints := n.wantTaints(node); !apiequality.Semantic.DeepEqual(taints, node.Spec.Taints) {
		next := node.DeepCopy()
		next.Spec.Taints = taints
		return n.c.client.Update(ctx, next) // its own change queues the node again
	}
	return n.evict(ctx, node)
}

// wantTaints keeps every taint the controller does not own and sets the ones it does, keeping
// a NoExecute taint's timeAdded while it holds.
func (n *nodeLifecycle) wantTaints(node *corev1.Node) []corev1.Taint {
	var out []corev1.Taint
	for _, t := range node.Spec.Taints {
		if !managedTaints[t.Key] {
			out = append(out, t)
		}
	}
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	for _, t := range conditionTaints(node) {
		if i := slices.IndexFunc(node.Spec.Taints, func(x corev1.Taint) bool { return x.MatchTaint(&t) }); i >= 0 {
			out = append(out, node.Spec.Taints[i])
			continue
		}
		if t.Effect == corev1.TaintEffectNoExecute {
			t.TimeAdded = &now
		}
		out = append(out, t)
	}
	if len(out) == 0 {
		return node.Spec.Taints[:0:0]
	}
	return out
}

// evict deletes the node's pods whose tolerations of its NoExecute taints ran out, and comes
// back when the next one runs out.
func (n *nodeLifecycle) evict(ctx context.Context, node *corev1.Node) error {
	var noExecute []corev1.Taint
	for _, t := range node.Spec.Taints {
		if t.Effect == corev1.TaintEffectNoExecute {
			noExecute = append(noExecute, t)
		}
	}
	if len(noExecute) == 0 {
		return nil
	}
	now := time.Now()
	var next time.Duration
	for _, p := range n.c.cache.podsOn(node.Name) {
		if p.DeletionTimestamp != nil || isTerminal(p) {
			continue
		}
		at, ok := evictionTime(p, noExecute)
		if !ok {
			continue
		}
		if wait := at.Sub(now); wait > 0 {
			if next == 0 || wait < next {
				next = wait
			}
			continue
		}
		if err := n.evictPod(ctx, p); err != nil && !isGone(err) {
			return err
		}
	}
	if next > 0 {
		n.c.after(next, n.idx, node.Name)
	}
	return nil
}

// evictionTime is when the taints evict the pod: at once for a taint it does not tolerate,
// else when the shortest tolerationSeconds since the taint was added runs out; ok is false when
// it tolerates them all for ever.
func evictionTime(p *corev1.Pod, taints []corev1.Taint) (time.Time, bool) {
	var at time.Time
	evicts := false
	for i := range taints {
		t := &taints[i]
		added := time.Time{}
		if t.TimeAdded != nil {
			added = t.TimeAdded.Time
		}
		var seconds *int64
		tolerated := false
		for _, tol := range p.Spec.Tolerations {
			if !tol.ToleratesTaint(discardLogger, t, false) {
				continue
			}
			tolerated = true
			if tol.TolerationSeconds == nil {
				seconds = nil
				break
			}
			if seconds == nil || *tol.TolerationSeconds < *seconds {
				seconds = tol.TolerationSeconds
			}
		}
		var when time.Time
		switch {
		case !tolerated:
			when = time.Time{}
		case seconds == nil:
			continue
		default:
			when = added.Add(time.Duration(max(*seconds, 0)) * time.Second)
		}
		if !evicts || when.Before(at) {
			at, evicts = when, true
		}
	}
	return at, evicts
}

// evictPod marks the pod as the taint eviction controller does (a DisruptionTarget condition)
// and deletes it.
func (n *nodeLifecycle) evictPod(ctx context.Context, p *corev1.Pod) error {
	next := p.DeepCopy()
	if setCondition(&next.Status, corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
		Reason: "DeletionByTaintManager", Message: "Taint manager: deleting due to NoExecute taint",
		LastTransitionTime: metav1.NewTime(time.Now().Truncate(time.Second))}) {
		if err := n.c.client.Status().Update(ctx, next); err != nil {
			return err
		}
	}
	return n.c.client.Delete(ctx, next, client.Preconditions{UID: &p.UID})
}
