package controllers

import (
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// TestSpecOrMetadataChanged: status-only updates (CAPI's Machine status, Goofy's own status
// patches) do not become reconciles; anything a reconciler reads does, and so do resyncs (the
// same resourceVersion on both sides). Every other case is a write: a new resourceVersion.
func TestSpecOrMetadataChanged(t *testing.T) {
	base := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Name: "m", Generation: 1, ResourceVersion: "1",
		Labels: map[string]string{"a": "b"}}}
	now := metav1.Now()
	cases := map[string]struct {
		change func(m *clusterv1.Machine)
		want   bool
	}{
		"status only":         {func(m *clusterv1.Machine) { m.Status.Phase = "Provisioning" }, false},
		"managed fields only": {func(m *clusterv1.Machine) { m.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "x"}} }, false},
		"resync":              {func(m *clusterv1.Machine) { m.ResourceVersion = base.ResourceVersion }, true},
		"spec (generation)":   {func(m *clusterv1.Machine) { m.Generation = 2 }, true},
		"label":               {func(m *clusterv1.Machine) { m.Labels["c"] = "d" }, true},
		"annotation":          {func(m *clusterv1.Machine) { m.Annotations = map[string]string{clusterv1.PausedAnnotation: ""} }, true},
		"owner reference":     {func(m *clusterv1.Machine) { m.OwnerReferences = []metav1.OwnerReference{{Name: "o"}} }, true},
		"finalizer":           {func(m *clusterv1.Machine) { m.Finalizers = []string{"f"} }, true},
		"deletion":            {func(m *clusterv1.Machine) { m.DeletionTimestamp = &now }, true},
	}
	p := specOrMetadataChanged()
	for name, c := range cases {
		n := base.DeepCopy()
		n.ResourceVersion = "2"
		c.change(n)
		if got := p.Update(event.UpdateEvent{ObjectOld: base, ObjectNew: n}); got != c.want {
			t.Errorf("%s: got %v, want %v", name, got, c.want)
		}
	}
	if !p.Create(event.CreateEvent{Object: base}) || !p.Delete(event.DeleteEvent{Object: base}) {
		t.Error("creates and deletes must pass")
	}
}

// TestClusterWatchPredicates: which Cluster events reach the GoofyMachines and the GoofyCluster
// of the Cluster. The machines get every update that changes what they wait for, in whichever of
// CAPI's writes it comes: the ControlPlaneInitialized condition (written first) and
// status.initialization.controlPlaneInitialized (written next) each count, so the first of the
// two writes ends the wait and the second, which changes nothing the machines read, is dropped.
func TestClusterWatchPredicates(t *testing.T) {
	base := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "c", Generation: 1, ResourceVersion: "1"}}
	initializedCondition := metav1.Condition{Type: clusterv1.ClusterControlPlaneInitializedCondition,
		Status: metav1.ConditionTrue, Reason: clusterv1.ClusterControlPlaneInitializedReason}
	cases := map[string]struct {
		old, new        func(c *clusterv1.Cluster) // nil: base
		machines, ownGC bool
	}{
		"resync":           {new: func(c *clusterv1.Cluster) { c.ResourceVersion = "1" }, machines: true, ownGC: true},
		"unrelated status": {new: func(c *clusterv1.Cluster) { c.Status.Phase = "Provisioned" }},
		"paused":           {new: func(c *clusterv1.Cluster) { c.Spec.Paused = ptr.To(true) }, machines: true, ownGC: true},
		"unpaused":         {old: func(c *clusterv1.Cluster) { c.Spec.Paused = ptr.To(true) }, machines: true, ownGC: true},
		"infrastructure provisioned": {
			new: func(c *clusterv1.Cluster) { c.Status.Initialization.InfrastructureProvisioned = ptr.To(true) }, machines: true},
		"ControlPlaneInitialized condition": {
			new: func(c *clusterv1.Cluster) { c.Status.Conditions = []metav1.Condition{initializedCondition} }, machines: true},
		"status.initialization.controlPlaneInitialized": {
			new: func(c *clusterv1.Cluster) { c.Status.Initialization.ControlPlaneInitialized = ptr.To(true) }, machines: true},
		"status.initialization.controlPlaneInitialized after the condition": {
			old: func(c *clusterv1.Cluster) { c.Status.Conditions = []metav1.Condition{initializedCondition} },
			new: func(c *clusterv1.Cluster) {
				c.Status.Conditions = []metav1.Condition{initializedCondition}
				c.Status.Initialization.ControlPlaneInitialized = ptr.To(true)
			}},
		"condition after status.initialization.controlPlaneInitialized": {
			old: func(c *clusterv1.Cluster) { c.Status.Initialization.ControlPlaneInitialized = ptr.To(true) },
			new: func(c *clusterv1.Cluster) {
				c.Status.Conditions = []metav1.Condition{initializedCondition}
				c.Status.Initialization.ControlPlaneInitialized = ptr.To(true)
			}},
	}
	log := logr.Discard()
	machines, ownGC := clusterToMachinesEvents(testScheme, log), clusterToGoofyClusterEvents(testScheme, log)
	for name, c := range cases {
		o, n := base.DeepCopy(), base.DeepCopy()
		n.ResourceVersion = "2"
		for obj, change := range map[*clusterv1.Cluster]func(*clusterv1.Cluster){o: c.old, n: c.new} {
			if change != nil {
				change(obj)
			}
		}
		e := event.UpdateEvent{ObjectOld: o, ObjectNew: n}
		if got := machines.Update(e); got != c.machines {
			t.Errorf("%s: reaches the machines = %v, want %v", name, got, c.machines)
		}
		if got := ownGC.Update(e); got != c.ownGC {
			t.Errorf("%s: reaches the GoofyCluster = %v, want %v", name, got, c.ownGC)
		}
	}
	for _, p := range []predicate.Funcs{machines, ownGC} {
		if !p.Create(event.CreateEvent{Object: base}) {
			t.Error("a Cluster's creation must pass: objects may wait for it")
		}
		if p.Delete(event.DeleteEvent{Object: base}) || p.Generic(event.GenericEvent{Object: base}) {
			t.Error("deletes and generic events need not pass")
		}
	}
}

// TestPredicateLogger: CAPI's predicates get the manager's logger only when their V(4)+ lines
// would be printed; otherwise a discarding logger, whose WithValues costs nothing.
func TestPredicateLogger(t *testing.T) {
	for verbosity, wantReal := range map[int]bool{0: false, 3: false, 4: true, 6: true} {
		log := funcr.New(func(prefix, args string) {}, funcr.Options{Verbosity: verbosity})
		got := predicateLogger(log)
		if real := got.GetSink() != nil; real != wantReal {
			t.Errorf("verbosity %d: real logger = %v, want %v", verbosity, real, wantReal)
		}
	}
}
