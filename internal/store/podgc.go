package store

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The pod garbage collector's part: pods bound to a deleted Node are force-deleted.

// collectPodsOfNode force-deletes the pods bound to a node that is gone, as the pod garbage
// collector does (upstream waits out a 40 s quarantine first): no kubelet is left to confirm
// their termination. Finalizers still hold a pod.
func (c *Cluster) collectPodsOfNode(node string) {
	b, ok := behaviorForGR(podsGR)
	if !ok {
		return
	}
	zero := int64(0)
	for _, obj := range c.objs.Resource(podsGR) {
		if pod, ok := obj.(*corev1.Pod); ok && pod.Spec.NodeName == node {
			c.controllerDeleteLocked(b, pod, metav1.DeletePropagationBackground, &zero)
		}
	}
}
