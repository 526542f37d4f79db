package controllers

import (
	"context"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"regexp"
	"sync/atomic"
	"testing"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	infrav1 "github.com/goofy-capi/cluster-api-provider-goofy/api/v1alpha1"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/mux"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/workload"
)

// TestReconcilersHaveNoBackendBranch: the GoofyCluster and GoofyMachine reconcilers name no
// backend in their code (the Azure one's state is a field they hand on, nothing more), and each
// chooses its object's backend in exactly one place.
func TestReconcilersHaveNoBackendBranch(t *testing.T) {
	azure := regexp.MustCompile(`(?i)azure`)
	for file, chooser := range map[string]string{
		"goofycluster_controller.go": "clusterBackend",
		"goofymachine_controller.go": "machineBackend",
	} {
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		choices := 0
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.Ident:
					if azure.MatchString(n.Name) {
						t.Errorf("%s: %s names a backend (%s): backends are chosen in backend.go and do their own work",
							fset.Position(n.Pos()), fn.Name.Name, n.Name)
					}
				case *ast.CallExpr:
					if sel, ok := n.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == chooser {
						choices++
					}
				}
				return true
			})
		}
		if choices != 1 {
			t.Errorf("%s chooses the backend in %d places, want 1 (once per reconcile)", file, choices)
		}
	}
}

// recordingMachineBackend is a MachineBackend that only counts calls; it stores the finalizer so
// that a deletion reaches it.
type recordingMachineBackend struct{ normal, deleted int }

func (b *recordingMachineBackend) ReconcileNormal(_ context.Context, s *machineScope) (ctrl.Result, error) {
	b.normal++
	controllerutil.AddFinalizer(s.gm, infrav1.MachineFinalizer)
	return ctrl.Result{}, nil
}

func (b *recordingMachineBackend) ReconcileDelete(context.Context, *machineScope) error {
	b.deleted++
	return nil
}

// TestBackendChosenOncePerReconcile: each reconcile chooses its object's backend once, from the
// spec (the GoofyCluster's spec.backend), and delegates its normal and delete paths to it.
func TestBackendChosenOncePerReconcile(t *testing.T) {
	requireEnv(t)
	g := NewWithT(t)
	ctx := context.Background()
	h := newHarness(t)

	clusterChoices := 0
	h.clusterR.chooseBackend = func(*infrav1.GoofyCluster) ClusterBackend { clusterChoices++; return simulatedClusterBackend{} }
	f := newFixture(t, newNamespace(t), "choice", nil)
	clusterReconciles := 0
	for i := 0; i < 5; i++ {
		h.reconcileCluster(t, f.gc)
		clusterReconciles++
		get(t, f.gc)
		if f.gc.Status.Initialization.Provisioned != nil {
			break
		}
	}
	g.Expect(clusterChoices).To(Equal(clusterReconciles))
	h.clusterR.chooseBackend = nil
	h.provisionCluster(t, f)

	fake := &recordingMachineBackend{}
	machineChoices := 0
	h.machineR.chooseBackend = func(*machineScope) MachineBackend { machineChoices++; return fake }
	_, gm := newMachine(t, f, "choice-cp-0", machineOpts{controlPlane: true})
	h.reconcileMachine(t, gm)
	h.reconcileMachine(t, gm)
	g.Expect(machineChoices).To(Equal(2))
	g.Expect(fake.normal).To(Equal(2))
	g.Expect(fake.deleted).To(BeZero())
	get(t, gm)
	g.Expect(gm.Finalizers).To(ContainElement(infrav1.MachineFinalizer))
	g.Expect(k8sClient.Delete(ctx, gm)).To(Succeed())
	h.reconcileMachine(t, gm)
	g.Expect(machineChoices).To(Equal(3))
	g.Expect(fake.deleted).To(Equal(1))
	g.Expect(apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(gm), &infrav1.GoofyMachine{}))).To(BeTrue())

	// The default choice follows the GoofyCluster's spec.backend.
	h.machineR.chooseBackend = nil
	azureGC := &infrav1.GoofyCluster{Spec: infrav1.GoofyClusterSpec{Backend: infrav1.GoofyClusterBackend{Azure: &infrav1.AzureClusterBackend{}}}}
	g.Expect(h.clusterR.clusterBackend(azureGC)).To(BeAssignableToTypeOf(&azureClusterBackend{}))
	g.Expect(h.clusterR.clusterBackend(f.gc)).To(BeAssignableToTypeOf(simulatedClusterBackend{}))
	g.Expect(h.machineR.machineBackend(&machineScope{gc: azureGC})).To(BeAssignableToTypeOf(&azureMachineBackend{}))
	g.Expect(h.machineR.machineBackend(&machineScope{gc: f.gc})).To(BeAssignableToTypeOf(&simulatedMachineBackend{}))
	g.Expect(h.machineR.machineBackend(&machineScope{})).To(BeAssignableToTypeOf(&simulatedMachineBackend{}), "GoofyCluster gone")
}

// readCounter counts the read requests (get, list) a client sends.
type readCounter struct{ n atomic.Int64 }

func (c *readCounter) during(f func()) int64 {
	before := c.n.Load()
	f()
	return c.n.Load() - before
}

// noWatch gives a client without Watch (the workload store's) the method interceptor.NewClient wants.
type noWatch struct{ client.Client }

func (noWatch) Watch(context.Context, client.ObjectList, ...client.ListOption) (watch.Interface, error) {
	return nil, errors.New("no watch")
}

// countReads wraps c so that its reads are counted in n.
func countReads(c client.WithWatch, n *readCounter) client.WithWatch {
	return interceptor.NewClient(c, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			n.n.Add(1)
			return c.Get(ctx, key, obj, opts...)
		},
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			n.n.Add(1)
			return c.List(ctx, list, opts...)
		},
	})
}

// countMachineReads makes h's machine reconciler count its reads of the management cluster in
// mgmt and those of the workload clusters in workload. Call it before the first machine reconcile.
func countMachineReads(h *harness, mgmt, workload *readCounter) {
	h.machineR.Client = countReads(h.machineR.Client.(client.WithWatch), mgmt)
	h.machineR.env().nodes.workloadClient = func(l *mux.WorkloadClusterListener) (client.Client, error) {
		c, err := l.GetClient()
		if err != nil {
			return nil, err
		}
		return countReads(noWatch{c}, workload), nil
	}
}

// TestReadsPerReadyMachine measures what reconciling a Ready machine reads, with every ensure
// step's object in place: reads of the management cluster (through the reconciler's client) and
// of the workload cluster (through the node unit's client), per machine, for control-plane
// machines and workers, in a cluster of three of each: a small constant, whatever the number of
// machines and static pods.
func TestReadsPerReadyMachine(t *testing.T) {
	requireEnv(t)
	h := newHarness(t)
	mgmt, wl := &readCounter{}, &readCounter{}
	countMachineReads(h, mgmt, wl)
	f := newFixture(t, newNamespace(t), "reads", nil)
	h.provisionCluster(t, f)
	setClusterStatus(t, f, true)
	var cps, workers []*infrav1.GoofyMachine
	for i := range 3 {
		_, cp := newMachine(t, f, "reads-cp-"+string(rune('0'+i)), machineOpts{controlPlane: true})
		h.reconcileUntilReady(t, cp)
		cps = append(cps, cp)
		_, w := newMachine(t, f, "reads-md-"+string(rune('0'+i)), machineOpts{})
		h.reconcileUntilReady(t, w)
		workers = append(workers, w)
	}
	measure := func(gm *infrav1.GoofyMachine) (m, w int64) {
		m = mgmt.during(func() { w = wl.during(func() { h.reconcileMachine(t, gm) }) })
		return m, w
	}
	// The GoofyMachine, its Machine, Cluster and GoofyCluster; the Node and, on a control-plane
	// node, one list of its static pods. Before the node unit recorded what it provisioned, a
	// control-plane machine re-ran every ensure step: 4 and 95 reads.
	const mgmtReads, cpReads, workerReads = 4, 2, 1
	for _, gm := range cps {
		m, w := measure(gm)
		t.Logf("%s (control plane): %d management reads, %d workload reads", gm.Name, m, w)
		if m != mgmtReads || w != cpReads {
			t.Errorf("%s (control plane): %d management and %d workload reads, want %d and %d", gm.Name, m, w, mgmtReads, cpReads)
		}
	}
	for _, gm := range workers {
		m, w := measure(gm)
		t.Logf("%s (worker): %d management reads, %d workload reads", gm.Name, m, w)
		if m != mgmtReads || w != workerReads {
			t.Errorf("%s (worker): %d management and %d workload reads, want %d and %d", gm.Name, m, w, mgmtReads, workerReads)
		}
	}

	// More static pods on a node (a user's static pod) and more machines change nothing.
	wc, err := mustListener(t, h, f).GetClient()
	if err != nil {
		t.Fatal(err)
	}
	extra := workload.StaticPod("my-agent", "reads-cp-0", kubernetesVersion, internalIP(cps[0]), metav1.Now())
	if err := wc.Create(context.Background(), extra); err != nil {
		t.Fatal(err)
	}
	for i := 3; i < 6; i++ {
		_, w := newMachine(t, f, "reads-md-"+string(rune('0'+i)), machineOpts{})
		h.reconcileUntilReady(t, w)
	}
	if m, w := measure(cps[0]); m != mgmtReads || w != cpReads {
		t.Errorf("%s with a fifth static pod, among 9 machines: %d management and %d workload reads, want %d and %d",
			cps[0].Name, m, w, mgmtReads, cpReads)
	}
	// Writes: none (a Ready machine's reconcile changes nothing).
	if writes := h.writesDuring(func() { measure(cps[1]); measure(workers[1]) }); writes != 0 {
		t.Errorf("Ready machines wrote %d times", writes)
	}
}
