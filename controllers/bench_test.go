package controllers

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	infrav1 "github.com/goofy-capi/cluster-api-provider-goofy/api/v1alpha1"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/mux"
)

// TestReconcilesPerProvisionedMachine: with zero phase delays a machine is Ready after two
// reconciles that write once each: the finalizer with the provider ID (that reconcile ends there,
// as CAPI's do after adding a finalizer), then the status with every phase done; and a Ready
// machine asks for no further requeue and writes nothing: no hot loop.
func TestReconcilesPerProvisionedMachine(t *testing.T) {
	requireEnv(t)
	h := newHarness(t)
	f := newFixture(t, newNamespace(t), "count", nil)
	h.provisionCluster(t, f)
	setClusterStatus(t, f, true)
	for _, o := range []machineOpts{{controlPlane: true}, {}} {
		name := "count-md-0"
		if o.controlPlane {
			name = "count-cp-0"
		}
		_, gm := newMachine(t, f, name, o)
		var n int
		writes := h.writesDuring(func() { n = h.reconcileUntilReady(t, gm) })
		t.Logf("%s: Ready after %d reconciles, %d writes", name, n, writes)
		if n != 2 || writes != 2 {
			t.Errorf("%s: Ready after %d reconciles and %d writes, want 2 and 2", name, n, writes)
		}
		var res ctrl.Result
		if writes := h.writesDuring(func() { res = h.reconcileMachine(t, gm) }); res != (ctrl.Result{}) || writes != 0 {
			t.Errorf("%s: a Ready machine requeues (%+v) or writes (%d)", name, res, writes)
		}
	}
}

// reconcileTotal sums controller-runtime's reconcile counter of a controller.
func reconcileTotal(tb testing.TB, controllerName string) float64 {
	tb.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	var sum float64
	for _, f := range families {
		if f.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "controller" && l.GetValue() == controllerName {
					sum += m.GetCounter().GetValue()
				}
			}
		}
	}
	return sum
}

// BenchmarkHundredMachinesToNodeReady measures, through a running manager (10 workers per
// controller, envtest API server), creating 100 worker Machines + GoofyMachines with zero phase
// delays one after the other: the time until all 100 Nodes are Ready in the workload cluster, each
// machine's latency from its creation to its Node being Ready (p50, p99), and the reconciles the
// manager ran per machine (including those caused by watch events).
func BenchmarkHundredMachinesToNodeReady(b *testing.B) {
	requireEnv(b)
	const machines = 100
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		ns := newNamespace(b)
		h := newHarness(b)
		startManager(b, h, ns, managerOptions{concurrency: 10})
		f := newFixture(b, ns, "bench", nil)
		var l *mux.WorkloadClusterListener
		for deadline := time.Now().Add(30 * time.Second); l == nil; {
			if time.Now().After(deadline) {
				b.Fatal("GoofyCluster not provisioned within 30s")
			}
			l, _ = h.mux.Listener(mux.ClusterKey(ns, "bench"))
			time.Sleep(10 * time.Millisecond)
		}
		setClusterStatus(b, f, true)
		wc, _ := l.GetClient()
		before := reconcileTotal(b, "goofymachine")

		// Watch the workload store for Ready Nodes while the machines are created.
		readyAt := map[string]time.Time{}
		createdAt := map[string]time.Time{}
		var mu sync.Mutex
		stop := make(chan struct{})
		polled := make(chan struct{})
		go func() {
			defer close(polled)
			for {
				names := readyNodeNames(ctx, b, wc)
				now := time.Now()
				mu.Lock()
				for _, n := range names {
					if _, ok := readyAt[n]; !ok {
						readyAt[n] = now
					}
				}
				done := len(readyAt) == machines
				mu.Unlock()
				select {
				case <-stop:
					return
				default:
				}
				if done {
					return
				}
				time.Sleep(2 * time.Millisecond)
			}
		}()

		b.StartTimer()
		start := time.Now()
		for m := 0; m < machines; m++ {
			name := fmt.Sprintf("bench-md-%03d", m)
			mu.Lock()
			createdAt[name] = time.Now()
			mu.Unlock()
			newMachine(b, f, name, machineOpts{})
		}
		created := time.Since(start)
		select {
		case <-polled:
		case <-time.After(5 * time.Minute):
			close(stop)
			<-polled
			b.Fatalf("only %d of %d Nodes Ready after 5 minutes", len(readyAt), machines)
		}
		elapsed := time.Since(start)
		b.StopTimer()
		var latencies []time.Duration
		for name, at := range createdAt {
			latencies = append(latencies, readyAt[name].Sub(at))
		}
		sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
		b.ReportMetric(float64(latencies[len(latencies)/2].Milliseconds()), "p50-ms-create-to-ready")
		b.ReportMetric(float64(latencies[len(latencies)*99/100].Milliseconds()), "p99-ms-create-to-ready")
		b.ReportMetric(float64(elapsed.Milliseconds()), "ms/100machines")
		b.ReportMetric(float64(created.Milliseconds()), "ms-creating/100machines")
		// Reconciles still in flight for Ready machines (their own status patches) count too.
		time.Sleep(time.Second)
		b.ReportMetric((reconcileTotal(b, "goofymachine")-before)/machines, "reconciles/machine")
	}
}

func readyNodeNames(ctx context.Context, tb testing.TB, c client.Client) []string {
	nodes := &corev1.NodeList{}
	if err := c.List(ctx, nodes); err != nil {
		tb.Error(err)
		return nil
	}
	var names []string
	for _, node := range nodes.Items {
		for _, cond := range node.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
				names = append(names, node.Name)
			}
		}
	}
	return names
}

// BenchmarkReconcileReadyMachine is the steady-state cost of reconciling a Ready control-plane
// machine (four management reads; its Node and, in one list, its static pods re-checked in the
// workload cluster: TestReadsPerReadyMachine), uncached client on envtest.
func BenchmarkReconcileReadyMachine(b *testing.B) {
	requireEnv(b)
	h := newHarness(b)
	f := newFixture(b, newNamespace(b), "steady", nil)
	h.provisionCluster(b, f)
	_, gm := newMachine(b, f, "steady-cp-0", machineOpts{controlPlane: true})
	h.reconcileUntilReady(b, gm)
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(gm)}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := h.machineR.Reconcile(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	get(b, gm)
	if c := condition(gm, infrav1.ReadyCondition); c == nil || c.Status != metav1.ConditionTrue {
		b.Fatal("machine not Ready")
	}
}
