package controllers

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	infrav1 "github.com/goofy-capi/cluster-api-provider-goofy/api/v1alpha1"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/mux"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// statusConflictClient is an uncached client whose every status patch fails with a conflict, as
// when another writer changed the object between the reconcile's read and its status patch (a
// kill of the manager at that point leaves the same state behind).
func statusConflictClient(t testing.TB) client.Client {
	t.Helper()
	w, err := client.NewWithWatch(cfg, client.Options{Scheme: testScheme})
	if err != nil {
		t.Fatal(err)
	}
	return interceptor.NewClient(w, interceptor.Funcs{
		SubResourcePatch: func(_ context.Context, _ client.Client, sub string, obj client.Object, _ client.Patch, _ ...client.SubResourcePatchOption) error {
			return apierrors.NewConflict(schema.GroupResource{Group: infrav1.GroupVersion.Group, Resource: sub}, obj.GetName(), errors.New("injected"))
		},
	})
}

// objectPatchFailingClient is an uncached client whose every object patch fails with err; the
// bodies of those patches go to *bodies.
func objectPatchFailingClient(t testing.TB, err error, bodies *[]string) client.Client {
	t.Helper()
	w, werr := client.NewWithWatch(cfg, client.Options{Scheme: testScheme})
	if werr != nil {
		t.Fatal(werr)
	}
	return interceptor.NewClient(w, interceptor.Funcs{
		Patch: func(_ context.Context, _ client.WithWatch, obj client.Object, patch client.Patch, _ ...client.PatchOption) error {
			data, derr := patch.Data(obj)
			if derr != nil {
				return derr
			}
			*bodies = append(*bodies, string(data))
			return err
		},
	})
}

// TestFinalizerStoredBeforeProvisioning: the finalizer is stored before a machine provisions
// anything in its workload cluster and before a GoofyCluster's listener and store exist, so a
// status patch that fails afterwards (or a kill) never leaves provisioned objects without one;
// and the finalizer then releases them on deletion. A GoofyCluster's endpoint travels with its
// finalizer, on a port reserved in memory that a failed patch or a deletion frees again.
func TestFinalizerStoredBeforeProvisioning(t *testing.T) {
	requireEnv(t)
	g := NewWithT(t)
	ctx := context.Background()
	h := newHarness(t)
	failing := statusConflictClient(t)
	ns := newNamespace(t)

	// A GoofyCluster whose object patch (the finalizer with the endpoint) fails: no listener, no
	// store, and the port reserved for it is free again, over a mux of one port.
	stores := store.NewManager()
	port := testPortMax - 2
	one, err := mux.NewWorkloadClustersMux(stores, "127.0.0.1", mux.WithPortRange(port, port))
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = one.Shutdown(context.Background()) })
	portFree := func(why string) {
		t.Helper()
		l, err := one.InitWorkloadClusterListener("other/next")
		g.Expect(err).NotTo(HaveOccurred(), why)
		g.Expect(l.Port()).To(Equal(port), why)
		g.Expect(one.DeleteWorkloadClusterListener("other/next")).To(Succeed())
	}
	for i, injected := range []error{
		apierrors.NewConflict(schema.GroupResource{Group: infrav1.GroupVersion.Group, Resource: "goofyclusters"}, "x", errors.New("injected")),
		apierrors.NewInternalError(errors.New("injected")),
	} {
		f := newFixture(t, ns, fmt.Sprintf("nofin-%d", i), nil)
		var bodies []string
		r := &GoofyClusterReconciler{Client: objectPatchFailingClient(t, injected, &bodies), Mux: one}
		_, _ = r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(f.gc)})
		g.Expect(bodies).NotTo(BeEmpty(), injected.Error())
		g.Expect(bodies[0]).To(And(ContainSubstring(infrav1.ClusterFinalizer), ContainSubstring(`"controlPlaneEndpoint":{"host":"127.0.0.1","port":`+strconv.Itoa(port)+`}`)),
			"one object patch with the finalizer and the endpoint")
		for _, b := range bodies[1:] {
			g.Expect(b).NotTo(ContainSubstring("controlPlaneEndpoint"), "the deferred patch writes no endpoint whose port is free")
		}
		key := mux.ClusterKey(ns, f.gc.Name)
		_, listening := one.Listener(key)
		g.Expect(listening).To(BeFalse(), injected.Error())
		_, hasStore := stores.GetCluster(key)
		g.Expect(hasStore).To(BeFalse(), injected.Error())
		portFree(injected.Error())
		get(t, f.gc)
		g.Expect(f.gc.Finalizers).To(BeEmpty())
		g.Expect(f.gc.Spec.ControlPlaneEndpoint.IsZero()).To(BeTrue())
	}

	// The patch stored, the reservation holds the port until the claim; deleting the GoofyCluster
	// before that claim frees it.
	f := newFixture(t, ns, "resv", nil)
	r := &GoofyClusterReconciler{Client: k8sClient, Mux: one}
	_, err = r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(f.gc)})
	g.Expect(err).NotTo(HaveOccurred())
	get(t, f.gc)
	g.Expect(f.gc.Spec.ControlPlaneEndpoint.Port).To(BeEquivalentTo(port))
	_, err = one.InitWorkloadClusterListener("other/next")
	g.Expect(err).To(MatchError(mux.ErrPortRangeExhausted), "the stored endpoint's port stays reserved")
	g.Expect(k8sClient.Delete(ctx, f.gc)).To(Succeed())
	_, err = r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(f.gc)})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(f.gc), &infrav1.GoofyCluster{}))).To(BeTrue())
	portFree("deleted before its claim")

	// Likewise when its Cluster is gone first.
	f = newFixture(t, ns, "orphan", nil)
	_, err = r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(f.gc)})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = one.InitWorkloadClusterListener("other/next")
	g.Expect(err).To(MatchError(mux.ErrPortRangeExhausted), "the stored endpoint's port stays reserved")
	g.Expect(k8sClient.Delete(ctx, f.cluster)).To(Succeed())
	g.Expect(k8sClient.Delete(ctx, f.gc)).To(Succeed())
	_, err = r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(f.gc)})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(f.gc), &infrav1.GoofyCluster{}))).To(BeTrue())
	portFree("its Cluster deleted before its claim")

	// A GoofyCluster whose status patch fails: the listener exists, the finalizer is stored.
	f = newFixture(t, ns, "fin", nil)
	clusterR := &GoofyClusterReconciler{Client: failing, Mux: h.mux}
	for range 2 { // the finalizer's (and endpoint's) reconcile, then the listener's
		_, err = clusterR.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(f.gc)})
		g.Expect(err).NotTo(HaveOccurred()) // a conflict is a short requeue
	}
	_, listening := h.mux.Listener(mux.ClusterKey(f.ns, "fin"))
	g.Expect(listening).To(BeTrue())
	get(t, f.gc)
	g.Expect(f.gc.Finalizers).To(ContainElement(infrav1.ClusterFinalizer))
	h.provisionCluster(t, f)

	// A machine whose status patch fails: its Node and control-plane members exist, and so does
	// its finalizer.
	_, gm := newMachine(t, f, "fin-cp-0", machineOpts{controlPlane: true})
	machineR := &GoofyMachineReconciler{Client: failing, Mux: h.mux, Clock: h.clock}
	for range 2 { // the finalizer's reconcile, then the phases'
		_, err = machineR.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(gm)})
		g.Expect(err).NotTo(HaveOccurred())
	}
	key := mux.ClusterKey(f.ns, "fin")
	g.Expect(storeGet(h, f, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "fin-cp-0"}})).To(Succeed())
	g.Expect(h.mux.HasAPIServer(key, "kube-apiserver-fin-cp-0")).To(BeTrue())
	get(t, gm)
	g.Expect(gm.Finalizers).To(ContainElement(infrav1.MachineFinalizer))
	g.Expect(gm.Spec.ProviderID).To(Equal("goofy://" + f.ns + "/fin/fin-cp-0"))

	// With the finalizer, deletion releases what the machine provisioned.
	h.reconcileUntilReady(t, gm)
	h.deleteMachine(t, gm)
	g.Expect(apierrors.IsNotFound(storeGet(h, f, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "fin-cp-0"}}))).To(BeTrue())
	g.Expect(h.mux.HasAPIServer(key, "kube-apiserver-fin-cp-0")).To(BeFalse())
}
