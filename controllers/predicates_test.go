package controllers

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/go-logr/logr"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/predicates"
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

// TestPredicateLogger: CAPI's predicates call WithValues on every event and log at V(4) and up.
// Through predicateLogger the values reach the manager's logger only while V(4) is on, checked
// at each event, so a verbosity raised at run time (/debug/flags/v) shows their lines.
func TestPredicateLogger(t *testing.T) {
	out := &logOutput{}
	filter := predicates.ResourceHasFilterLabel(testScheme, predicateLogger(logr.New(&recordingSink{out: out})), "shard-a")
	other := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Name: "m", Labels: map[string]string{clusterv1.WatchLabel: "shard-b"}}}

	if filter.Generic(event.GenericEvent{Object: other}) {
		t.Fatal("the watch filter let another shard's object through")
	}
	if n, lines := out.withValues.Load(), out.written(); n != 0 || len(lines) != 0 {
		t.Fatalf("at V(0): %d WithValues, lines %q; want none", n, lines)
	}

	out.verbosity.Store(predicateLogLevel)
	filter.Generic(event.GenericEvent{Object: other})
	lines := out.written()
	if out.withValues.Load() == 0 || len(lines) != 1 {
		t.Fatalf("at V(4): %d WithValues, lines %q; want the predicate's line", out.withValues.Load(), lines)
	}
	if !strings.Contains(lines[0], "Machine") || !strings.Contains(lines[0], "predicate") {
		t.Errorf("line %q lacks the predicate's values", lines[0])
	}
}

// logOutput is what recordingSinks write to; its verbosity can change while they are used.
type logOutput struct {
	verbosity  atomic.Int32
	withValues atomic.Int32
	mu         sync.Mutex
	lines      []string
}

func (o *logOutput) written() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.lines...)
}

// recordingSink writes each line with its values to out and counts WithValues calls.
type recordingSink struct {
	out    *logOutput
	values []any
}

func (s *recordingSink) Init(logr.RuntimeInfo)  {}
func (s *recordingSink) Enabled(level int) bool { return int32(level) <= s.out.verbosity.Load() }
func (s *recordingSink) Info(_ int, msg string, kv ...any) {
	s.out.mu.Lock()
	defer s.out.mu.Unlock()
	s.out.lines = append(s.out.lines, fmt.Sprint(msg, append(append([]any(nil), s.values...), kv...)))
}
func (s *recordingSink) Error(_ error, msg string, kv ...any) { s.Info(0, msg, kv...) }
func (s *recordingSink) WithValues(kv ...any) logr.LogSink {
	s.out.withValues.Add(1)
	return &recordingSink{out: s.out, values: append(append([]any(nil), s.values...), kv...)}
}
func (s *recordingSink) WithName(string) logr.LogSink { return s }
