package store

import (
	"fmt"
	"time"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/storage"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The rollouts of Deployments and DaemonSets: no ReplicaSet, pod or container runs in a simulated
// cluster, but clients wait on what kube-controller-manager's deployment and daemonset
// controllers report (KCP waits for the CoreDNS Deployment and the kube-proxy DaemonSet to be
// rolled out after it changes their images). So a Deployment reports its rollout complete at
// once, every replica of the current generation updated and available, and a DaemonSet reports
// one updated, available pod per Node, as those controllers would once the pods ran.

var (
	deploymentsGR = appsv1.SchemeGroupVersion.WithResource("deployments").GroupResource()
	daemonSetsGR  = appsv1.SchemeGroupVersion.WithResource("daemonsets").GroupResource()
)

// deploymentRolledOut returns d with the status of a completed rollout, or nil when it has it.
func deploymentRolledOut(d *appsv1.Deployment) *appsv1.Deployment {
	n := ptr.Deref(d.Spec.Replicas, 1)
	want := appsv1.DeploymentStatus{
		ObservedGeneration: d.Generation,
		Replicas:           n, UpdatedReplicas: n, ReadyReplicas: n, AvailableReplicas: n,
		TerminatingReplicas: d.Status.TerminatingReplicas,
		Conditions: []appsv1.DeploymentCondition{
			rolloutCondition(d.Status.Conditions, appsv1.DeploymentAvailable, "MinimumReplicasAvailable", "Deployment has minimum availability."),
			rolloutCondition(d.Status.Conditions, appsv1.DeploymentProgressing, "NewReplicaSetAvailable",
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

// rolloutCondition is a True condition of the type, keeping its times when it was True already.
func rolloutCondition(conds []appsv1.DeploymentCondition, typ appsv1.DeploymentConditionType, reason, message string) appsv1.DeploymentCondition {
	for _, c := range conds {
		if c.Type == typ && c.Status == corev1.ConditionTrue && c.Reason == reason && c.Message == message {
			return c
		}
	}
	t := now()
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

// rolloutDelay is how long the simulated controllers take to report a rollout: as upstream, the
// status comes a moment after the change, so a client that updates an object right after
// creating it is not bound to conflict with the controller's write.
const rolloutDelay = 100 * time.Millisecond

// rolloutsSawLocked reacts to a committed change of a Deployment or DaemonSet: its rollout is
// reported after rolloutDelay, from the object as it is then. Callers hold c.mu.
func (c *Cluster) rolloutsSawLocked(gr schema.GroupResource, obj client.Object) {
	if !c.instantRollouts || obj.GetDeletionTimestamp() != nil {
		return
	}
	key := storage.Key(obj.GetNamespace(), obj.GetName())
	switch o := obj.(type) {
	case *appsv1.Deployment:
		if deploymentRolledOut(o) == nil {
			return
		}
	case *appsv1.DaemonSet:
		if daemonSetRolledOut(o, int32(len(c.objs.Resource(nodesGR)))) == nil {
			return
		}
	}
	time.AfterFunc(rolloutDelay, func() { c.reportRollout(gr, key) })
}

// reportRollout writes the rollout status of the object at key, if it still needs one.
func (c *Cluster) reportRollout(gr schema.GroupResource, key string) {
	c.mu.Lock()
	defer c.unlockDurable(new(error), true) // derived again after a crash
	if c.closed {
		return
	}
	if !c.instantRollouts {
		return
	}
	switch o := c.getLocked(gr, key).(type) {
	case *appsv1.Deployment:
		if next := deploymentRolledOut(o); next != nil && o.DeletionTimestamp == nil {
			c.storeLocked(gr, next, o)
		}
	case *appsv1.DaemonSet:
		if next := daemonSetRolledOut(o, int32(len(c.objs.Resource(nodesGR)))); next != nil && o.DeletionTimestamp == nil {
			c.storeLocked(gr, next, o)
		}
	}
}

// nodesChangedLocked keeps every DaemonSet's counts at the number of Nodes. Callers hold c.mu.
func (c *Cluster) nodesChangedLocked() {
	if !c.instantRollouts {
		return
	}
	nodes := int32(len(c.objs.Resource(nodesGR)))
	for _, obj := range c.objs.Resource(daemonSetsGR) {
		ds := obj.(*appsv1.DaemonSet)
		if ds.DeletionTimestamp != nil || ds.Status.DesiredNumberScheduled == nodes {
			continue
		}
		c.rolloutsSawLocked(daemonSetsGR, ds)
	}
}

// SetInstantRollouts turns the instant rollout reports on (the default) or off: off when a
// simulator runs the deployment and daemonset controllers, whose status then comes from the pods
// that exist. Turned on, every Deployment and DaemonSet is reported again.
func (c *Cluster) SetInstantRollouts(on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.instantRollouts == on {
		return
	}
	c.instantRollouts = on
	if !on || c.closed {
		return
	}
	for _, gr := range []schema.GroupResource{deploymentsGR, daemonSetsGR} {
		for _, obj := range c.objs.Resource(gr) {
			c.rolloutsSawLocked(gr, obj)
		}
	}
}
