package controllers

import (
	"context"
	"errors"
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

// TestFinalizerStoredBeforeProvisioning: the finalizer is stored before a machine provisions
// anything in its workload cluster and before a GoofyCluster reserves its listener, so a status
// patch that fails afterwards (or a kill) never leaves provisioned objects without one; and the
// finalizer then releases them on deletion.
func TestFinalizerStoredBeforeProvisioning(t *testing.T) {
	requireEnv(t)
	g := NewWithT(t)
	ctx := context.Background()
	h := newHarness(t)
	failing := statusConflictClient(t)

	// A GoofyCluster whose status patch fails: the listener is reserved, the finalizer is stored.
	f := newFixture(t, newNamespace(t), "fin", nil)
	clusterR := &GoofyClusterReconciler{Client: failing, Mux: h.mux}
	var err error
	for range 2 { // the finalizer's reconcile, then the listener's
		_, err = clusterR.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(f.gc)})
		g.Expect(err).NotTo(HaveOccurred()) // a conflict is a short requeue
	}
	_, reserved := h.mux.Listener(mux.ClusterKey(f.ns, "fin"))
	g.Expect(reserved).To(BeTrue())
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
