package controllers

import (
	"reflect"

	"github.com/go-logr/logr"

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

// predicateLogger is the logger for CAPI's predicates. They call log.WithValues on every event
// they see (every Machine and Cluster update) but log only at V(4) and above; with zap each
// WithValues clones an encoder, which was 6.5% of the manager's allocations at N=100. Below that
// verbosity they get a logger that discards, and the clones go away with the lines nobody sees.
func predicateLogger(log logr.Logger) logr.Logger {
	if log.V(4).Enabled() {
		return log
	}
	return logr.Discard()
}
