package store

import (
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// reactLocked is the simulated control plane: it reacts to one committed change of an object
// (old nil: created; obj nil: removed) as kube-controller-manager's controllers and the kubelet
// react to the watch event, but at once, under the cluster's lock, so that a client never sees
// the state in between (a dependent whose owner is gone, a namespace left Terminating with
// nothing in it). Each reaction lives in its controller's file; a reaction's own writes are
// committed changes too, and are reacted to in turn.
func (c *Cluster) reactLocked(gr schema.GroupResource, old, obj client.Object) {
	if obj == nil {
		c.collectDependents(old) // gc.go
		if ns := old.GetNamespace(); ns != "" {
			c.finishNamespace(ns) // namespace.go
		}
		if gr == nodesGR {
			c.collectPodsOfNode(old.GetName()) // podgc.go
			c.nodesChangedLocked()             // rollouts.go
		}
		c.afterOwnersChanged(old.GetNamespace(), old.GetOwnerReferences(), nil) // gc.go
		if gr == crdsGR {
			c.customResourceDefinitionChangedLocked(old, nil) // customresources.go
		} else if _, custom := old.(*unstructured.Unstructured); custom {
			c.customResourceRemovedLocked(gr) // customresources.go
		}
		return
	}
	if old != nil && !equality.Semantic.DeepEqual(old.GetOwnerReferences(), obj.GetOwnerReferences()) {
		c.afterOwnersChanged(obj.GetNamespace(), old.GetOwnerReferences(), obj.GetOwnerReferences()) // gc.go
	}
	switch gr {
	case nodesGR:
		c.ensureNodeLeaseLocked(obj) // nodelease.go
		if old == nil {
			c.nodesChangedLocked() // rollouts.go
		}
	case deploymentsGR, daemonSetsGR:
		c.rolloutsSawLocked(gr, obj) // rollouts.go
	case podsGR:
		c.kubeletSawPod(old, obj) // kubelet.go
	case crdsGR:
		c.customResourceDefinitionChangedLocked(old, obj) // customresources.go
	}
}
