package simulate

import (
	"context"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// podGC is kube-controller-manager's pod garbage collector, for orphaned pods: a pod bound to a
// Node that does not exist is marked Failed with a DisruptionTarget condition (reason
// DeletionByPodGC) and force-deleted, as upstream's gcOrphaned does: no kubelet is left to
// confirm its termination. Finalizers still hold the pod. A pod bound to a Node it has not seen
// (a name nobody registered, a Node deleted while the process was down) waits out upstream's
// 40 s quarantine first, in case the Node shows up; the pods of a Node whose deletion it sees go
// at once (upstream quarantines them too: a deleted Node's pods linger for 40 s there). It runs
// in every cluster, workloads or not. It keeps the names of the Nodes (a few per cluster), not
// the pods: a deleted Node's pods are listed from the store.
type podGC struct {
	c   *cluster
	idx int

	mu    sync.Mutex
	nodes map[string]bool
}

const (
	podGCNodePrefix = "node:"
	podGCPodPrefix  = "pod:"
)

// podGCQuarantine is how long upstream's pod garbage collector waits for a Node missing from its
// informer to show up before it deletes the pods bound to it.
const podGCQuarantine = 40 * time.Second

func newPodGC(c *cluster, idx int) *podGC { return &podGC{c: c, idx: idx, nodes: map[string]bool{}} }

func (g *podGC) uncached() {}

func (g *podGC) resources() []schema.GroupResource {
	return []schema.GroupResource{nodesGR, podsGR}
}

func (g *podGC) observe(ch store.Change) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch ch.Resource {
	case nodesGR:
		name := changedObject(ch).GetName()
		if ch.New == nil {
			delete(g.nodes, name)
			g.c.enqueue(g.idx, podGCNodePrefix+name)
		} else {
			g.nodes[name] = true
		}
	case podsGR:
		// A pod bound to a Node not known (a node deleted while the process was down, a pod
		// created bound to a node that is not there): checked against the store after the
		// quarantine.
		if p, ok := ch.New.(*corev1.Pod); ok && p.Spec.NodeName != "" && !g.nodes[p.Spec.NodeName] {
			if old, _ := ch.Old.(*corev1.Pod); old == nil || old.Spec.NodeName == "" {
				g.c.after(g.c.sim.podGCQuarantine, g.idx, podGCPodPrefix+keyOf(p))
			}
		}
	}
}

func (g *podGC) sync(ctx context.Context, key string) error {
	if node, ok := strings.CutPrefix(key, podGCNodePrefix); ok {
		return g.collectNode(ctx, node)
	}
	pod := &corev1.Pod{}
	namespace, name, _ := strings.Cut(strings.TrimPrefix(key, podGCPodPrefix), "/")
	if err := g.c.client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, pod); err != nil {
		return client.IgnoreNotFound(err)
	}
	if pod.Spec.NodeName == "" {
		return nil
	}
	if gone, err := g.nodeGone(ctx, pod.Spec.NodeName); err != nil || !gone {
		return err
	}
	return g.markFailedAndDelete(ctx, pod)
}

// nodeGone reports whether the node is absent from the store, as upstream checks a node missing
// from its informer against the API server before it deletes the node's pods.
func (g *podGC) nodeGone(ctx context.Context, node string) (bool, error) {
	g.mu.Lock()
	known := g.nodes[node]
	g.mu.Unlock()
	if known {
		return false, nil
	}
	err := g.c.client.Get(ctx, client.ObjectKey{Name: node}, &corev1.Node{})
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	return false, err
}

// collectNode deletes the pods bound to a deleted node.
func (g *podGC) collectNode(ctx context.Context, node string) error {
	if gone, err := g.nodeGone(ctx, node); err != nil || !gone {
		return err
	}
	pods := &corev1.PodList{}
	if err := g.c.client.List(ctx, pods, client.MatchingFields{"spec.nodeName": node}); err != nil {
		return err
	}
	var first error
	for i := range pods.Items {
		if err := g.markFailedAndDelete(ctx, &pods.Items[i]); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// markFailedAndDelete turns a pod that has not finished Failed, with the DisruptionTarget
// condition, and deletes it with a grace period of 0, as upstream's
// markFailedAndDeletePodWithCondition does.
func (g *podGC) markFailedAndDelete(ctx context.Context, pod *corev1.Pod) error {
	if !isTerminal(pod) {
		next := pod.DeepCopy()
		next.Status.Phase = corev1.PodFailed
		setCondition(&next.Status, corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
			ObservedGeneration: pod.Generation, Reason: "DeletionByPodGC", Message: "PodGC: node no longer exists",
			LastTransitionTime: metav1.NewTime(time.Now().Truncate(time.Second))})
		if err := g.c.client.Status().Update(ctx, next); err != nil {
			return client.IgnoreNotFound(err)
		}
		pod = next
	}
	if pod.DeletionTimestamp != nil && pod.DeletionGracePeriodSeconds != nil && *pod.DeletionGracePeriodSeconds == 0 {
		return nil // already force-deleted, held by finalizers
	}
	err := g.c.client.Delete(ctx, pod, client.GracePeriodSeconds(0), client.Preconditions{UID: &pod.UID})
	if apierrors.IsConflict(err) {
		return nil // replaced by another pod of the name
	}
	return client.IgnoreNotFound(err)
}
