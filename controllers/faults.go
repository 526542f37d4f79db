package controllers

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	infrav1 "github.com/goofy-capi/cluster-api-provider-goofy/api/v1alpha1"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/mux"
)

// faultsActive counts the objects with an active fault of each kind (docs/faults.md). The kind
// label takes only the values of mux.FaultKinds.
var faultsActive = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "goofy_faults_active",
	Help: "GoofyClusters and GoofyMachines with an active injected fault, by fault kind.",
}, []string{"kind"})

func init() {
	metrics.Registry.MustRegister(faultsActive)
	for _, k := range mux.FaultKinds {
		faultsActive.WithLabelValues(k).Set(0)
	}
}

// faultBook remembers the active fault kinds of each object, so that the gauge counts objects
// and an object that changes its faults, or goes, moves the counts once.
type faultBook struct {
	mu       sync.Mutex
	byObject map[string][]string
}

var activeFaults = &faultBook{byObject: map[string][]string{}}

func (b *faultBook) set(key string, kinds []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if slices.Equal(b.byObject[key], kinds) {
		return // the common case: nothing changed (no faults before nor now)
	}
	for _, k := range b.byObject[key] {
		faultsActive.WithLabelValues(k).Dec()
	}
	for _, k := range kinds {
		faultsActive.WithLabelValues(k).Inc()
	}
	if len(kinds) == 0 {
		delete(b.byObject, key)
		return
	}
	b.byObject[key] = kinds
}

func clusterFaultKey(gc *infrav1.GoofyCluster) string { return "GoofyCluster/" + klogRef(gc) }
func machineFaultKey(gm *infrav1.GoofyMachine) string { return "GoofyMachine/" + string(gm.UID) }

// faultsObject is a GoofyCluster, GoofyMachine or GoofyMachinePool.
type faultsObject interface {
	client.Object
	conditions.Setter
}

// recordFaults sets the FaultsInjected condition (True naming the active faults; False once none
// is left; absent on objects that never had one), emits an event when the active faults change,
// and counts them in goofy_faults_active (not with an empty key: a GoofyMachinePool's faults are
// counted on its instances). It returns when to reconcile again: when the first active fault with
// an until time ends.
func recordFaults(ctx context.Context, recorder events.EventRecorder, obj faultsObject, key string, a mux.ActiveFaults, now time.Time) time.Duration {
	if key != "" {
		activeFaults.set(key, a.Kinds)
	}
	var prev *metav1.Condition
	if c := conditions.Get(obj, infrav1.FaultsInjectedCondition); c != nil {
		prev = c.DeepCopy() // Get may point into the object's conditions, which Set changes
	}
	if len(a.Names) > 0 {
		msg := strings.Join(a.Names, "; ")
		conditions.Set(obj, metav1.Condition{Type: infrav1.FaultsInjectedCondition, Status: metav1.ConditionTrue, Reason: infrav1.FaultsActiveReason, Message: msg})
		if prev == nil || prev.Status != metav1.ConditionTrue || prev.Message != msg {
			ctrl.LoggerFrom(ctx).Info("Faults injected", "faults", msg)
			emit(recorder, obj, corev1.EventTypeWarning, "FaultsInjected", "InjectFaults", "Faults injected: "+msg)
		}
	} else if prev != nil {
		conditions.Set(obj, metav1.Condition{Type: infrav1.FaultsInjectedCondition, Status: metav1.ConditionFalse, Reason: infrav1.NoFaultsReason,
			Message: "no fault of spec.simulation is active"})
		if prev.Status == metav1.ConditionTrue {
			ctrl.LoggerFrom(ctx).Info("Faults cleared")
			emit(recorder, obj, corev1.EventTypeNormal, "FaultsCleared", "ClearFaults", "No fault is injected any more")
		}
	}
	if a.Next.IsZero() {
		return 0
	}
	// A little after the end, so the reconcile finds the fault over.
	return a.Next.Sub(now) + 100*time.Millisecond
}

func emit(recorder events.EventRecorder, obj runtime.Object, eventType, reason, action, note string) {
	if recorder != nil {
		recorder.Eventf(obj, nil, eventType, reason, action, "%s", note)
	}
}

// sooner returns the result that requeues at the earlier of res and after (0: none).
func sooner(res ctrl.Result, after time.Duration) ctrl.Result {
	if after > 0 && (res.RequeueAfter == 0 || after < res.RequeueAfter) {
		res.RequeueAfter = after
	}
	return res
}

// machineFaults are the active faults of one machine, as the phases apply them.
type machineFaults struct {
	nodeNotReady, etcdUnhealthy, vmFailed bool
}

// setPodReadiness makes a static pod's readiness what kubelet reports when its probe passes or
// fails; pod is the pod as read.
func setPodReadiness(ctx context.Context, c client.Client, pod *corev1.Pod, ready bool, now metav1.Time) error {
	status, changed := corev1.ConditionFalse, false
	if ready {
		status = corev1.ConditionTrue
	}
	for i := range pod.Status.Conditions {
		cond := &pod.Status.Conditions[i]
		if (cond.Type == corev1.PodReady || cond.Type == corev1.ContainersReady) && cond.Status != status {
			cond.Status, cond.LastTransitionTime = status, now
			cond.Reason = ""
			if !ready {
				cond.Reason = "ContainersNotReady"
			}
			changed = true
		}
	}
	for i := range pod.Status.ContainerStatuses {
		if cs := &pod.Status.ContainerStatuses[i]; cs.Ready != ready {
			cs.Ready, changed = ready, true
		}
	}
	if !changed {
		return nil
	}
	err := c.Status().Update(ctx, pod)
	if apierrors.IsConflict(err) {
		return nil // the next reconcile tries again
	}
	return err
}

// markNodeUnreachable sets every Node condition Unknown, as the node lifecycle controller does
// when the kubelet stops posting status. It reports whether anything changed.
func markNodeUnreachable(n *corev1.Node, now metav1.Time) bool {
	changed := false
	for i := range n.Status.Conditions {
		c := &n.Status.Conditions[i]
		if c.Status != corev1.ConditionUnknown {
			c.Status, c.Reason, c.Message = corev1.ConditionUnknown, "NodeStatusUnknown", "Kubelet stopped posting node status."
			c.LastTransitionTime = now
			changed = true
		}
	}
	return changed
}
