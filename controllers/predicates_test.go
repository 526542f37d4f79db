package controllers

import (
	"testing"

	"github.com/go-logr/logr/funcr"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

// TestSpecOrMetadataChanged: status-only updates (CAPI's Machine status, Goofy's own status
// patches) do not become reconciles; anything a reconciler reads does.
func TestSpecOrMetadataChanged(t *testing.T) {
	base := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Name: "m", Generation: 1, ResourceVersion: "1",
		Labels: map[string]string{"a": "b"}}}
	now := metav1.Now()
	cases := map[string]struct {
		change func(m *clusterv1.Machine)
		want   bool
	}{
		"status only": {func(m *clusterv1.Machine) {
			m.Status.Phase = "Provisioning"
			m.ResourceVersion = "2"
		}, false},
		"managed fields only": {func(m *clusterv1.Machine) {
			m.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "x"}}
		}, false},
		"spec (generation)": {func(m *clusterv1.Machine) { m.Generation = 2 }, true},
		"label":             {func(m *clusterv1.Machine) { m.Labels["c"] = "d" }, true},
		"annotation":        {func(m *clusterv1.Machine) { m.Annotations = map[string]string{clusterv1.PausedAnnotation: ""} }, true},
		"owner reference":   {func(m *clusterv1.Machine) { m.OwnerReferences = []metav1.OwnerReference{{Name: "o"}} }, true},
		"finalizer":         {func(m *clusterv1.Machine) { m.Finalizers = []string{"f"} }, true},
		"deletion":          {func(m *clusterv1.Machine) { m.DeletionTimestamp = &now }, true},
	}
	p := specOrMetadataChanged()
	for name, c := range cases {
		n := base.DeepCopy()
		c.change(n)
		if got := p.Update(event.UpdateEvent{ObjectOld: base, ObjectNew: n}); got != c.want {
			t.Errorf("%s: got %v, want %v", name, got, c.want)
		}
	}
	if !p.Create(event.CreateEvent{Object: base}) || !p.Delete(event.DeleteEvent{Object: base}) {
		t.Error("creates and deletes must pass")
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
