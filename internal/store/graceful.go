package store

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Graceful deletion of pods, as the real API server and kubelet do it: deleting a pod that runs
// on a node sets deletionTimestamp to now + the grace period and deletionGracePeriodSeconds, and
// the pod stays (Terminating) until its kubelet has stopped the containers and deletes it with a
// grace period of 0. The simulated kubelet answers after ClusterOptions.PodStopDelay, or after
// the grace period when that is shorter. Other kinds have no graceful deletion.

var (
	podsGR  = corev1.SchemeGroupVersion.WithResource("pods").GroupResource()
	nodesGR = corev1.SchemeGroupVersion.WithResource("nodes").GroupResource()
)

// gracePeriod is the grace period a delete of cur gets, and whether the kind deletes gracefully
// at all. It follows the pod strategy upstream: the request's gracePeriodSeconds, else the pod's
// terminationGracePeriodSeconds; 0 for pods not on a node or already finished; 1 for negatives.
func gracePeriod(b *kindBehavior, cur client.Object, requested *int64) (int64, bool) {
	if b.info.GVR.GroupResource() != podsGR {
		return 0, false
	}
	pod, ok := cur.(*corev1.Pod)
	if !ok {
		return 0, false
	}
	var period int64
	switch {
	case requested != nil:
		period = *requested
	case pod.Spec.TerminationGracePeriodSeconds != nil:
		period = *pod.Spec.TerminationGracePeriodSeconds
	}
	if pod.Spec.NodeName == "" || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		period = 0
	}
	return atLeastOneIfNegative(period), true
}

// atLeastOneIfNegative: upstream treats a negative grace period as 1 s.
func atLeastOneIfNegative(period int64) int64 {
	if period < 0 {
		return 1
	}
	return period
}

// shortenGracePeriodLocked handles a delete of an object that is already being deleted. For a
// terminating pod a shorter grace period moves deletionTimestamp earlier, and 0 (kubectl delete
// --force --grace-period=0) removes it unless finalizers hold it. Anything else is unchanged.
func (c *Cluster) shortenGracePeriodLocked(b *kindBehavior, cur client.Object, requested *int64) client.Object {
	if b.info.GVR.GroupResource() != podsGR {
		return cur
	}
	current := cur.GetDeletionGracePeriodSeconds()
	if current != nil && *current > 0 {
		if requested == nil {
			return cur // graceful deletion pending
		}
		period := atLeastOneIfNegative(*requested)
		if period >= *current {
			return cur
		}
		next := cur.DeepCopyObject().(client.Object)
		t := metav1.NewTime(cur.GetDeletionTimestamp().Add(time.Duration(period-*current) * time.Second))
		next.SetDeletionTimestamp(&t)
		next.SetDeletionGracePeriodSeconds(&period)
		if period > 0 || len(next.GetFinalizers()) > 0 {
			c.putLocked(podsGR, next, cur)
			return next
		}
		return c.removeLocked(b, cur, next)
	}
	// Grace period already 0: only finalizers keep the pod.
	if len(cur.GetFinalizers()) > 0 {
		return cur
	}
	return c.removeLocked(b, cur, cur.DeepCopyObject().(client.Object))
}
