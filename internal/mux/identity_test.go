package mux

import (
	"context"
	"errors"
	"net"
	"strconv"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/goofy-capi/cluster-api-provider-goofy/api/v1alpha1"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/storage"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// durableLife opens the mux of one "process" over the state in dir; stop ends it as a process's
// end would (listeners closed, state kept).
func durableLife(t *testing.T, dir string, lo, hi int) (m *WorkloadClustersMux, stop func()) {
	t.Helper()
	db, err := storage.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	stores := store.NewManager(store.WithStorage(db))
	m, err = NewWorkloadClustersMux(stores, "127.0.0.1", WithPortRange(lo, hi))
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		if err := m.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
		stores.Close()
		if err := db.Close(); err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(stop)
	return m, stop
}

func createMarker(t *testing.T, l *WorkloadClusterListener, name string) {
	t.Helper()
	c, _ := l.GetClient()
	if err := c.Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}}); err != nil {
		t.Fatal(err)
	}
}

func hasMarker(t *testing.T, l *WorkloadClusterListener, name string) bool {
	t.Helper()
	c, _ := l.GetClient()
	err := c.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: name}, &corev1.ConfigMap{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	return err == nil
}

// TestHotRestartNewOwnerStartsEmpty (issue 27 item 9): the workload cluster of a GoofyCluster
// deleted while the manager was down, whose name a new GoofyCluster (another UID) carries at the
// restart, is not the new one's: the new cluster gets none of the earlier objects, and the
// earlier cluster's port record does not bind it. The same UID gets its state back, restart
// after restart.
func TestHotRestartNewOwnerStartsEmpty(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	const lo, hi = 12900, 12904
	restore := func(gc infrav1.GoofyCluster) (*WorkloadClusterListener, func()) {
		t.Helper()
		m, stop := durableLife(t, dir, lo, hi)
		g.Expect(m.HotRestart(&infrav1.GoofyClusterList{Items: []infrav1.GoofyCluster{gc}})).To(Succeed())
		l, ok := m.Listener("ns/foo")
		g.Expect(ok).To(BeTrue())
		g.Expect(l.Port()).To(BeEquivalentTo(gc.Spec.ControlPlaneEndpoint.Port))
		return l, stop
	}

	m, stop := durableLife(t, dir, lo, hi)
	l, err := m.ClaimWorkloadClusterListener("ns/foo", 0, "uid-1")
	g.Expect(err).NotTo(HaveOccurred())
	port := l.Port()
	createMarker(t, l, "old")
	stop()

	l, stop = restore(ownedCluster("ns", "foo", port, "uid-1"))
	g.Expect(hasMarker(t, l, "old")).To(BeTrue(), "the same GoofyCluster gets its state back")
	stop()

	// The GoofyCluster was deleted while the manager was down and created again, under the same
	// name, with the same endpoint (a GitOps tool re-applying it).
	l, stop = restore(ownedCluster("ns", "foo", port, "uid-2"))
	g.Expect(hasMarker(t, l, "old")).To(BeFalse(), "a new GoofyCluster must not adopt the objects of the deleted one")
	createMarker(t, l, "new")
	stop()

	l, stop = restore(ownedCluster("ns", "foo", port, "uid-2"))
	g.Expect(hasMarker(t, l, "new")).To(BeTrue())
	g.Expect(hasMarker(t, l, "old")).To(BeFalse())
	stop()

	// Another new GoofyCluster of that name with another endpoint: the earlier cluster's port
	// record is not its own, nor a reason to refuse it.
	other := port + 1
	if other > hi {
		other = port - 1
	}
	l, stop = restore(ownedCluster("ns", "foo", other, "uid-3"))
	g.Expect(hasMarker(t, l, "new")).To(BeFalse())
	stop()
	m, stop = durableLife(t, dir, lo, hi)
	g.Expect(m.HotRestart(&infrav1.GoofyClusterList{Items: []infrav1.GoofyCluster{ownedCluster("ns", "foo", other, "uid-3")}})).To(Succeed())
	holder, uid, held := m.PortHolder(other)
	g.Expect([]any{holder, uid, held}).To(Equal([]any{"ns/foo", types.UID("uid-3"), true}))
	_, _, held = m.PortHolder(port)
	g.Expect(held).To(BeFalse(), "the earlier cluster's port is free")
	stop()
}

// occupy listens on 127.0.0.1:port, as another process that took the port would.
func occupy(t *testing.T, port int) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	return ln
}

// TestHotRestartPortUnavailableUntilFree (issue 27 item 10): a recorded port that another process
// took while the manager was down cannot be bound at the restart. The cluster is not moved (its
// endpoint cannot change): its claim fails with ErrPortUnavailable naming the port and the bind
// error, no other cluster gets the port meanwhile, and the claim that comes once the port is free
// serves the cluster on it with its state.
func TestHotRestartPortUnavailableUntilFree(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	const lo, hi = 12905, 12909
	cc := newClusterCerts(t)
	m, stop := durableLife(t, dir, lo, hi)
	l, err := m.ClaimWorkloadClusterListener("ns/busy", 0, "uid-busy")
	g.Expect(err).NotTo(HaveOccurred())
	port := l.Port()
	createMarker(t, l, "kept")
	g.Expect(m.AddAPIServer("ns/busy", "kube-apiserver-0", cc.ca, cc.caKey)).To(Succeed())
	stop()

	squatter := occupy(t, port)
	m, _ = durableLife(t, dir, lo, hi)
	err = m.HotRestart(&infrav1.GoofyClusterList{Items: []infrav1.GoofyCluster{ownedCluster("ns", "busy", port, "uid-busy")}})
	g.Expect(errors.Is(err, ErrPortUnavailable)).To(BeTrue(), "got %v", err)
	g.Expect(err.Error()).To(ContainSubstring("port " + strconv.Itoa(port)))
	g.Expect(err.Error()).To(ContainSubstring("address already in use"))
	_, ok := m.Listener("ns/busy")
	g.Expect(ok).To(BeFalse())

	// The port stays the cluster's: no other cluster is given it, nor a webhook's approval.
	holder, _, held := m.PortHolder(port)
	g.Expect([]any{holder, held}).To(Equal([]any{"ns/busy", true}))
	for range 2 { // every try fails alike while the port is taken
		_, err = m.ClaimWorkloadClusterListener("ns/busy", port, "uid-busy")
		g.Expect(errors.Is(err, ErrPortUnavailable)).To(BeTrue(), "got %v", err)
	}
	_, owned := m.OwnerOf("ns/busy")
	g.Expect(owned).To(BeFalse(), "a failed claim holds nothing")

	g.Expect(squatter.Close()).To(Succeed())
	l, err = m.ClaimWorkloadClusterListener("ns/busy", port, "uid-busy")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(l.Port()).To(Equal(port))
	g.Expect(m.AddAPIServer("ns/busy", "kube-apiserver-0", cc.ca, cc.caKey)).To(Succeed())
	cs := kubernetes.NewForConfigOrDie(capiRESTConfig(t, "busy", l, cc))
	_, err = cs.CoreV1().ConfigMaps("default").Get(context.Background(), "kept", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred(), "served again on its port, with its state")
}

// TestServingResumesOnTakenPortAfterUnreachable: a cluster made unreachable lets its port go;
// if another process takes it meanwhile, clearing the fault fails with ErrPortUnavailable, and
// every later SetFaults tries again, so the cluster serves once the port is free.
func TestServingResumesOnTakenPortAfterUnreachable(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	m := newTestMux(t, WithPortRange(12910, 12914))
	cc := newClusterCerts(t)
	l, err := m.InitWorkloadClusterListener("ns/flaky")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(m.AddAPIServer("ns/flaky", "kube-apiserver-0", cc.ca, cc.caKey)).To(Succeed())
	g.Expect(l.SetFaults(ctx, &Faults{Unreachable: true})).To(Succeed())

	squatter := occupy(t, l.Port())
	for range 2 {
		err = l.SetFaults(ctx, nil)
		g.Expect(errors.Is(err, ErrPortUnavailable)).To(BeTrue(), "got %v", err)
		g.Expect(err.Error()).To(ContainSubstring("address already in use"))
	}
	g.Expect(squatter.Close()).To(Succeed())
	g.Expect(l.SetFaults(ctx, nil)).To(Succeed())
	cs := kubernetes.NewForConfigOrDie(capiRESTConfig(t, "flaky", l, cc))
	_, err = cs.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred(), "serving again once the port is free")

	// A deleted cluster's listener is not started again by a late SetFaults.
	port := l.Port()
	g.Expect(l.SetFaults(ctx, &Faults{Unreachable: true})).To(Succeed())
	g.Expect(m.DeleteWorkloadClusterListener("ns/flaky")).To(Succeed())
	g.Expect(l.SetFaults(ctx, nil)).To(Succeed())
	occupy(t, port).Close() // bindable: nothing listens
}
