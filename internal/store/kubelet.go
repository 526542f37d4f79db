package store

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/storage"
)

// The kubelet's part of pod deletion: it confirms that a gracefully deleted pod's containers have
// stopped. Deleting a pod that runs on a node sets deletionTimestamp to now + the grace period and
// deletionGracePeriodSeconds (the pod strategy's CheckGracefulDelete, package kinds), and the pod
// stays Terminating until its kubelet deletes it with a grace period of 0. The simulated kubelet
// answers after ClusterOptions.PodStopDelay, or after the grace period when that is shorter.

// kubeletSawPod makes the pod's kubelet stop a pod that has just begun terminating or whose grace
// period got shorter.
func (c *Cluster) kubeletSawPod(old, pod client.Object) {
	grace := pod.GetDeletionGracePeriodSeconds()
	if pod.GetDeletionTimestamp() == nil || grace == nil || *grace == 0 {
		return
	}
	if old != nil && old.GetDeletionGracePeriodSeconds() != nil && *old.GetDeletionGracePeriodSeconds() <= *grace {
		return
	}
	c.scheduleKubeletStop(pod, *grace)
}

// scheduleKubeletStop makes the simulated kubelet confirm that pod has stopped, after the stop
// delay or its grace period, whichever is shorter.
func (c *Cluster) scheduleKubeletStop(pod client.Object, period int64) {
	delay := min(c.podStopDelay, time.Duration(period)*time.Second)
	key, uid := storage.Key(pod.GetNamespace(), pod.GetName()), pod.GetUID()
	time.AfterFunc(delay, func() { c.kubeletStopped(key, uid) })
}

// kubeletStopped deletes the pod with a grace period of 0, as kubelet does once the containers
// are gone: it is removed, or kept with deletionGracePeriodSeconds 0 while finalizers remain. A
// pod that was removed or replaced (another UID) in the meantime is left alone.
func (c *Cluster) kubeletStopped(key string, uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	cur := c.getLocked(podsGR, key)
	if cur == nil || cur.GetUID() != uid || cur.GetDeletionTimestamp() == nil {
		return
	}
	b, ok := behaviorForGR(podsGR)
	if !ok {
		return
	}
	zero := int64(0)
	c.controllerDeleteLocked(b, cur, metav1.DeletePropagationBackground, &zero)
}
