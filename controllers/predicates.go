package controllers

import (
	"reflect"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// specOrMetadataChanged lets an update through only when something a Goofy reconciler reads
// changed: spec (generation), labels, annotations, owner references, finalizers or deletion.
// Status-only updates are dropped: CAPI rewrites Machine status many times while a machine
// provisions, and the reconcilers' own status patches would otherwise each trigger a reconcile
// (on a cache that may not show the write yet). Phase progress needs no events: the reconciler
// requeues itself at each phase's deadline.
func specOrMetadataChanged() predicate.Funcs {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		if e.ObjectOld == nil || e.ObjectNew == nil {
			return true
		}
		return metadataOrSpecDiffers(e.ObjectOld, e.ObjectNew)
	}}
}

func metadataOrSpecDiffers(o, n client.Object) bool {
	return o.GetGeneration() != n.GetGeneration() ||
		!o.GetDeletionTimestamp().Equal(n.GetDeletionTimestamp()) ||
		!reflect.DeepEqual(o.GetLabels(), n.GetLabels()) ||
		!reflect.DeepEqual(o.GetAnnotations(), n.GetAnnotations()) ||
		!reflect.DeepEqual(o.GetOwnerReferences(), n.GetOwnerReferences()) ||
		!reflect.DeepEqual(o.GetFinalizers(), n.GetFinalizers())
}
