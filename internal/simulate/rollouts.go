package simulate

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// instantRollouts reports the rollouts of Deployments and DaemonSets in a cluster whose workloads
// are off: no ReplicaSet, pod or container runs there, but clients wait on what
// kube-controller-manager's deployment and daemonset controllers report (KCP waits for the
// CoreDNS Deployment and the kube-proxy DaemonSet to be rolled out after it changes their
// images). So a Deployment reports its rollout complete, every replica of the current
// generation updated and available, and a DaemonSet one updated, available pod per Node, as
// those controllers would once the pods ran, rolloutDelay after a change. It keeps the number
// of Nodes and the keys of the DaemonSets (a few per cluster), not the objects.
type instantRollouts struct {
	c   *cluster
	idx int

	mu         sync.Mutex
	nodes      int32
	daemonSets map[string]bool
}

// rolloutDelay is how long the simulated controllers take to report a rollout: as upstream, the
// status comes a moment after the change, so a client that updates an object right after
// creating it is not bound to conflict with the controller's write.
const rolloutDelay = 100 * time.Millisecond

const (
	rolloutDeploymentPrefix = "deployment:"
	rolloutDaemonSetPrefix  = "daemonset:"
)

func newInstantRollouts(c *cluster, idx int) *instantRollouts {
	return &instantRollouts{c: c, idx: idx, daemonSets: map[string]bool{}}
}

func (r *instantRollouts) uncached() {}

func (r *instantRollouts) resources() []schema.GroupResource {
	return []schema.GroupResource{nodesGR, deploymentsGR, daemonSetsGR}
}

func (r *instantRollouts) observe(ch store.Change) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch o := ch.New.(type) {
	case nil:
		switch ch.Resource {
		case nodesGR:
			r.nodes--
			r.nodesChangedLocked()
		case daemonSetsGR:
			delete(r.daemonSets, keyOf(ch.Old))
		}
	case *corev1.Node:
		if ch.Old == nil {
			r.nodes++
			r.nodesChangedLocked()
		}
	case *appsv1.Deployment:
		if o.DeletionTimestamp == nil && deploymentRolledOut(o) != nil {
			r.c.after(rolloutDelay, r.idx, rolloutDeploymentPrefix+keyOf(o))
		}
	case *appsv1.DaemonSet:
		r.daemonSets[keyOf(o)] = true
		if o.DeletionTimestamp == nil && daemonSetRolledOut(o, r.nodes) != nil {
			r.c.after(rolloutDelay, r.idx, rolloutDaemonSetPrefix+keyOf(o))
		}
	}
}

// nodesChangedLocked keeps every DaemonSet's counts at the number of Nodes.
func (r *instantRollouts) nodesChangedLocked() {
	for key := range r.daemonSets {
		r.c.after(rolloutDelay, r.idx, rolloutDaemonSetPrefix+key)
	}
}

// sync writes the rollout status of the object, if it still needs one.
func (r *instantRollouts) sync(ctx context.Context, key string) error {
	if k, ok := strings.CutPrefix(key, rolloutDeploymentPrefix); ok {
		d := &appsv1.Deployment{}
		if err := r.c.client.Get(ctx, objectKey(k), d); err != nil {
			return client.IgnoreNotFound(err)
		}
		if next := deploymentRolledOut(d); next != nil && d.DeletionTimestamp == nil {
			return client.IgnoreNotFound(r.c.client.Status().Update(ctx, next))
		}
		return nil
	}
	ds := &appsv1.DaemonSet{}
	if err := r.c.client.Get(ctx, objectKey(strings.TrimPrefix(key, rolloutDaemonSetPrefix)), ds); err != nil {
		return client.IgnoreNotFound(err)
	}
	r.mu.Lock()
	nodes := r.nodes
	r.mu.Unlock()
	if next := daemonSetRolledOut(ds, nodes); next != nil && ds.DeletionTimestamp == nil {
		return client.IgnoreNotFound(r.c.client.Status().Update(ctx, next))
	}
	return nil
}

// objectKey parses namespace/name (or a cluster-scoped name).
func objectKey(key string) client.ObjectKey {
	if ns, name, ok := strings.Cut(key, "/"); ok {
		return client.ObjectKey{Namespace: ns, Name: name}
	}
	return client.ObjectKey{Name: key}
}

// deploymentRolledOut returns d with the status of a completed rollout, or nil when it has it.
func deploymentRolledOut(d *appsv1.Deployment) *appsv1.Deployment {
	n := ptr.Deref(d.Spec.Replicas, 1)
	want := appsv1.DeploymentStatus{
		ObservedGeneration: d.Generation,
		Replicas:           n, UpdatedReplicas: n, ReadyReplicas: n, AvailableReplicas: n,
		TerminatingReplicas: d.Status.TerminatingReplicas,
		Conditions: []appsv1.DeploymentCondition{
			rolledOutCondition(d.Status.Conditions, appsv1.DeploymentAvailable, "MinimumReplicasAvailable", "Deployment has minimum availability."),
			rolledOutCondition(d.Status.Conditions, appsv1.DeploymentProgressing, "NewReplicaSetAvailable",
				fmt.Sprintf("ReplicaSet %q has successfully progressed.", d.Name)),
		},
	}
	if d.Spec.Paused || equality.Semantic.DeepEqual(d.Status, want) {
		return nil
	}
	next := d.DeepCopy()
	next.Status = want
	return next
}

// rolledOutCondition is a True condition of the type, keeping its times when it was True already.
func rolledOutCondition(conds []appsv1.DeploymentCondition, typ appsv1.DeploymentConditionType, reason, message string) appsv1.DeploymentCondition {
	for _, c := range conds {
		if c.Type == typ && c.Status == corev1.ConditionTrue && c.Reason == reason && c.Message == message {
			return c
		}
	}
	t := metav1.NewTime(time.Now().Truncate(time.Second))
	return appsv1.DeploymentCondition{Type: typ, Status: corev1.ConditionTrue, Reason: reason, Message: message, LastUpdateTime: t, LastTransitionTime: t}
}

// daemonSetRolledOut returns ds with one updated, available pod per Node, or nil when it has it.
func daemonSetRolledOut(ds *appsv1.DaemonSet, nodes int32) *appsv1.DaemonSet {
	want := appsv1.DaemonSetStatus{
		ObservedGeneration:     ds.Generation,
		CurrentNumberScheduled: nodes, DesiredNumberScheduled: nodes, NumberReady: nodes,
		UpdatedNumberScheduled: nodes, NumberAvailable: nodes,
		Conditions: ds.Status.Conditions, CollisionCount: ds.Status.CollisionCount,
	}
	if equality.Semantic.DeepEqual(ds.Status, want) {
		return nil
	}
	next := ds.DeepCopy()
	next.Status = want
	return next
}
