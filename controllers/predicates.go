package controllers

import (
	"reflect"

	"github.com/go-logr/logr"

	"k8s.io/apimachinery/pkg/runtime"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/predicates"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// specOrMetadataChanged lets an update through only when something a Goofy reconciler reads
// changed: spec (generation), labels, annotations, owner references, finalizers or deletion; or
// when it is a resync (--sync-period), the safety net that reconciles every object again.
// Status-only updates are dropped: CAPI rewrites Machine status many times while a machine
// provisions, and the reconcilers' own status patches would otherwise each trigger a reconcile
// (on a cache that may not show the write yet). Phase progress needs no events: the reconciler
// requeues itself at each phase's deadline.
func specOrMetadataChanged() predicate.Funcs {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		if e.ObjectOld == nil || e.ObjectNew == nil {
			return true
		}
		return isResync(e) || metadataOrSpecDiffers(e.ObjectOld, e.ObjectNew)
	}}
}

// isResync reports whether an update is an informer resync: the cached object delivered again.
// controller-runtime does not mark resyncs, but every write gives an object a new
// resourceVersion, so an update whose old and new objects share one changed nothing.
func isResync(e event.UpdateEvent) bool {
	return e.ObjectOld.GetResourceVersion() == e.ObjectNew.GetResourceVersion()
}

// createsAndResyncs lets through create events and resyncs. For the Cluster watches: a Goofy
// object whose Cluster is not in the cache yet waits for its creation.
func createsAndResyncs() predicate.Funcs {
	return predicate.Funcs{
		CreateFunc: func(event.CreateEvent) bool { return true },
		UpdateFunc: func(e event.UpdateEvent) bool {
			return e.ObjectOld != nil && e.ObjectNew != nil && isResync(e)
		},
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

// clusterGatesChanged lets through the Cluster updates that change what a waiting GoofyMachine
// reads from its Cluster (clusterGatesOf, the same function waitingFor uses), in whichever of
// CAPI's writes the change comes. The reconcile such an update causes reads a cache that holds at
// least that update, so a machine never waits for a Cluster update that was already dropped.
func clusterGatesChanged() predicate.Funcs {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok := e.ObjectOld.(*clusterv1.Cluster)
			n, ok2 := e.ObjectNew.(*clusterv1.Cluster)
			return ok && ok2 && clusterGatesOf(o) != clusterGatesOf(n)
		},
		CreateFunc:  func(event.CreateEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

// clusterToMachinesEvents are the Cluster events the GoofyMachine reconciler maps to the Cluster's
// machines: its creation, resyncs, pause transitions and changes of its gates.
func clusterToMachinesEvents(scheme *runtime.Scheme, log logr.Logger) predicate.Funcs {
	return predicates.Any(scheme, log,
		createsAndResyncs(),
		predicates.ClusterPausedTransitions(scheme, log),
		clusterGatesChanged(),
	)
}

// clusterToGoofyClusterEvents are the Cluster events the GoofyCluster reconciler maps to the
// Cluster's GoofyCluster: its creation, resyncs and pause transitions.
func clusterToGoofyClusterEvents(scheme *runtime.Scheme, log logr.Logger) predicate.Funcs {
	return predicates.Any(scheme, log, createsAndResyncs(), predicates.ClusterPausedTransitions(scheme, log))
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
// they see (every Machine and Cluster update) but log only at V(4) and above. A WithValues is not
// free with either of the manager's log formats: the JSON one (zap) clones an encoder, which was
// 6.5% of the manager's allocations at N=100, and the text one (klog's textlogger) copies the
// key/value list. predicateLogger skips the WithValues while V(4) is off; the check is made at
// each call, so raising the verbosity at run time (--v, /debug/flags/v) enables the lines.
func predicateLogger(log logr.Logger) logr.Logger {
	if log.GetSink() == nil {
		return log
	}
	return log.WithSink(&lazyValuesSink{LogSink: log.GetSink()})
}

// predicateLogLevel is the lowest level CAPI's predicates log at.
const predicateLogLevel = 4

// lazyValuesSink adds values only when lines at predicateLogLevel would be written; otherwise
// WithValues returns the same sink, allocating nothing.
type lazyValuesSink struct{ logr.LogSink }

func (s *lazyValuesSink) WithValues(keysAndValues ...any) logr.LogSink {
	if !s.Enabled(predicateLogLevel) {
		return s
	}
	return &lazyValuesSink{s.LogSink.WithValues(keysAndValues...)}
}

func (s *lazyValuesSink) WithName(name string) logr.LogSink {
	return &lazyValuesSink{s.LogSink.WithName(name)}
}
