package mux

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	kcpetcd "sigs.k8s.io/cluster-api/controlplane/kubeadm/pkg/etcd"
	"sigs.k8s.io/cluster-api/controlplane/kubeadm/pkg/proxy"

	infrav1 "github.com/goofy-capi/cluster-api-provider-goofy/api/v1alpha1"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/storage"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// Listener addresses of these tests: 127.0.0.1 and 127.0.0.2 (all of 127.0.0.0/8 is the loopback
// interface's on Linux), ports 12950-12953.

func TestParseListenerAddresses(t *testing.T) {
	for _, tc := range []struct {
		spec string
		want []string
		err  string
	}{
		{spec: "127.0.0.2", want: []string{"127.0.0.2"}},
		{spec: "127.0.0.1-127.0.0.3", want: []string{"127.0.0.1", "127.0.0.2", "127.0.0.3"}},
		{spec: "127.0.0.0/30", want: []string{"127.0.0.1", "127.0.0.2"}},
		{spec: "127.0.0.4/31", want: []string{"127.0.0.4", "127.0.0.5"}},
		{spec: " 127.0.0.5 , 127.0.0.4-127.0.0.5,::1", want: []string{"127.0.0.5", "127.0.0.4", "::1"}},
		{spec: "127.0.0.255-127.0.1.0", want: []string{"127.0.0.255", "127.0.1.0"}},
		{spec: "", err: "no address"},
		{spec: "0.0.0.0", err: "unspecified"},
		{spec: "127.0.0.3-127.0.0.1", err: "FIRST not after LAST"},
		{spec: "127.0.0.1-::1", err: "one family"},
		{spec: "10.0.0.0/8", err: "more than 4096"},
		{spec: "127.0.0.0-127.0.16.1", err: "more than 4096"},
		{spec: "localhost", err: "ParseAddr"},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			g := NewWithT(t)
			got, err := ParseListenerAddresses(tc.spec)
			if tc.err != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tc.err)))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tc.want))
		})
	}
}

func TestListenerAddressesOptionChecks(t *testing.T) {
	g := NewWithT(t)
	_, err := NewWorkloadClustersMux(store.NewManager(), "127.0.0.1", WithListenerAddresses("127.0.0.1", "127.0.0.1"))
	g.Expect(err).To(MatchError(ContainSubstring("given twice")))
	_, err = NewWorkloadClustersMux(store.NewManager(), "127.0.0.1", WithListenerAddresses("127.0.0.1"), WithBindAddress("0.0.0.0"))
	g.Expect(err).To(MatchError(ContainSubstring("exclude each other")))
	_, err = NewWorkloadClustersMux(store.NewManager(), "127.0.0.1", WithListenerAddresses("::"))
	g.Expect(err).To(MatchError(ContainSubstring("unicast")))
	m, err := NewWorkloadClustersMux(store.NewManager(), "goofy.example", WithListenerAddresses("127.0.0.2", "127.0.0.3"), WithPortRange(12950, 12959))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(m.Host()).To(Equal("127.0.0.2"))
	g.Expect(m.Addresses()).To(Equal([]string{"127.0.0.2", "127.0.0.3"}))
	g.Expect(m.Capacity()).To(Equal(20))
}

// TestListenersSpreadOverLoopbackAddresses: with two listener addresses and a range of two
// ports, four workload clusters get the four endpoints, each bound on the address its endpoint
// advertises and reached there by client-go (with CAPI's kubeconfig) and by KCP's etcd client
// through port-forward, each seeing only its own cluster; a fifth gets a clear error; deleting a
// cluster closes its listener and frees its endpoint for the next one.
func TestListenersSpreadOverLoopbackAddresses(t *testing.T) {
	g := NewWithT(t)
	const lo, hi = 12950, 12951
	m := newTestMux(t, WithPortRange(lo, hi), WithListenerAddresses("127.0.0.1", "127.0.0.2"))
	g.Expect(m.Capacity()).To(Equal(4))
	cc := newClusterCerts(t)
	certPEM, keyPEM := clientCertFrom(t, cc.etcdCA, cc.etcdCAKey, "kube-etcd-healthcheck-client")
	etcdCert, err := tls.X509KeyPair(certPEM, keyPEM)
	g.Expect(err).NotTo(HaveOccurred())
	etcdTLS := &tls.Config{RootCAs: pool(cc.etcdCA), Certificates: []tls.Certificate{etcdCert}, MinVersion: tls.VersionTLS12}
	ctx := context.Background()

	// serve registers cluster i's control plane (node n<i>) and a marker of its own.
	serve := func(i int, name string, l *WorkloadClusterListener) {
		t.Helper()
		node := fmt.Sprintf("n%d", i)
		runningPod(t, l, "etcd-"+node)
		runningPod(t, l, "kube-apiserver-"+node)
		createMarker(t, l, "marker-"+strconv.Itoa(i))
		g.Expect(m.AddEtcdMember(name, "etcd-"+node, cc.etcdCA, cc.etcdCAKey)).To(Succeed())
		g.Expect(m.AddAPIServer(name, "kube-apiserver-"+node, cc.ca, cc.caKey)).To(Succeed())
	}
	// reach checks, at the listener's advertised endpoint, that client-go sees cluster i's marker
	// alone and that KCP's etcd client lists cluster i's member alone.
	reach := func(i int, l *WorkloadClusterListener) {
		t.Helper()
		cfg := capiRESTConfig(t, fmt.Sprintf("c%d", i), l, cc)
		g.Expect(cfg.Host).To(Equal("https://" + net.JoinHostPort(l.Host(), strconv.Itoa(l.Port()))))
		cms, err := kubernetes.NewForConfigOrDie(cfg).CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		var names []string
		for _, cm := range cms.Items {
			names = append(names, cm.Name)
		}
		g.Expect(names).To(ConsistOf("marker-"+strconv.Itoa(i)), "cluster %d at %s", i, l.HostPort())

		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		ec, err := kcpetcd.NewClient(cctx, kcpetcd.ClientConfiguration{
			Endpoint:    fmt.Sprintf("etcd-n%d", i),
			Proxy:       proxy.Proxy{Kind: "pods", Namespace: metav1.NamespaceSystem, KubeConfig: cfg, Port: EtcdClientPort},
			TLSConfig:   etcdTLS,
			DialTimeout: 10 * time.Second,
			CallTimeout: 10 * time.Second,
		})
		g.Expect(err).NotTo(HaveOccurred())
		defer func() { _ = ec.Close() }()
		members, err := ec.Members(cctx)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(members).To(HaveLen(1))
		g.Expect(members[0].Name).To(Equal(fmt.Sprintf("n%d", i)))
	}

	var ls []*WorkloadClusterListener
	for i := range 4 {
		name := fmt.Sprintf("ns/s%d", i)
		l, err := m.InitWorkloadClusterListener(name)
		g.Expect(err).NotTo(HaveOccurred())
		ls = append(ls, l)
	}
	// The first address's range first, then the second's.
	var endpoints []string
	for _, l := range ls {
		endpoints = append(endpoints, l.HostPort())
		g.Expect(l.BindAddress()).To(Equal(l.Host()))
	}
	g.Expect(endpoints).To(Equal([]string{"127.0.0.1:12950", "127.0.0.1:12951", "127.0.0.2:12950", "127.0.0.2:12951"}))
	for i, l := range ls {
		serve(i, fmt.Sprintf("ns/s%d", i), l)
	}
	for i, l := range ls {
		reach(i, l)
	}
	holder, _, ok := m.EndpointHolder("127.0.0.2", lo)
	g.Expect(ok).To(BeTrue())
	g.Expect(holder).To(Equal("ns/s2"))
	holder, _, _ = m.PortHolder(lo)
	g.Expect(holder).To(Equal("ns/s0"), "PortHolder is on the first address")
	host, port, ok := m.HeldEndpoint("ns/s3")
	g.Expect([]any{host, port, ok}).To(Equal([]any{"127.0.0.2", hi, true}))

	// The whole address × port space is taken: a clear error, from every way of asking.
	_, err = m.InitWorkloadClusterListener("ns/s4")
	g.Expect(errors.Is(err, ErrPortRangeExhausted)).To(BeTrue(), "got %v", err)
	g.Expect(err.Error()).To(ContainSubstring("12950-12951 on each of 2 listener addresses, 4 endpoints"))
	_, _, err = m.ReserveWorkloadClusterEndpoint("ns/s4", "uid-4")
	g.Expect(errors.Is(err, ErrPortRangeExhausted)).To(BeTrue(), "got %v", err)
	// A host that is not a listener address is no address of its own: the first one's.
	_, err = m.ClaimWorkloadClusterEndpoint("ns/s4", "127.0.0.3", lo, "uid-4")
	g.Expect(errors.Is(err, ErrPortNotHeld)).To(BeTrue(), "got %v", err)
	g.Expect(err.Error()).To(ContainSubstring("127.0.0.1:12950 is held by another workload cluster"))
	_, err = m.ClaimWorkloadClusterEndpoint("ns/s4", "127.0.0.2", lo, "uid-4")
	g.Expect(errors.Is(err, ErrPortNotHeld)).To(BeTrue(), "got %v", err)
	g.Expect(err.Error()).To(ContainSubstring("127.0.0.2:12950 is held by another workload cluster"))

	// Deleting a cluster closes its listener and frees its endpoint, on its own address only.
	g.Expect(m.DeleteWorkloadClusterListener("ns/s3")).To(Succeed())
	_, err = net.DialTimeout("tcp", "127.0.0.2:12951", 5*time.Second)
	g.Expect(err).To(HaveOccurred(), "nothing listens on a deleted cluster's endpoint")
	g.Expect(bindError("127.0.0.2", hi)).To(Succeed())
	g.Expect(bindError("127.0.0.1", hi)).NotTo(Succeed(), "the same port on the other address is still s1's")
	_, _, held := m.EndpointHolder("127.0.0.2", hi)
	g.Expect(held).To(BeFalse())
	l4, err := m.InitWorkloadClusterListener("ns/s4")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(l4.HostPort()).To(Equal("127.0.0.2:12951"))
	serve(4, "ns/s4", l4)
	reach(4, l4)
	reach(1, ls[1])
}

// TestListenerAddressesAcrossRestart: a workload cluster keeps its address and port across a
// restart (the record on disk holds the address); the same port on another address is another
// endpoint for HotRestart's judgement, and a GoofyCluster whose spec moved to the other address
// is refused.
func TestListenerAddressesAcrossRestart(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	const port = 12952
	open := func(addrs ...string) (*WorkloadClustersMux, func()) {
		db, err := storage.Open(dir)
		g.Expect(err).NotTo(HaveOccurred())
		stores := store.NewManager(store.WithStorage(db))
		m, err := NewWorkloadClustersMux(stores, "127.0.0.1", WithPortRange(port, port), WithListenerAddresses(addrs...))
		g.Expect(err).NotTo(HaveOccurred())
		stopped := false
		stop := func() {
			if !stopped {
				stopped = true
				g.Expect(m.Shutdown(context.Background())).To(Succeed())
				stores.Close()
				g.Expect(db.Close()).To(Succeed())
			}
		}
		t.Cleanup(stop)
		return m, stop
	}
	m, stop := open("127.0.0.1", "127.0.0.2")
	host, p, err := m.ReserveWorkloadClusterEndpoint("ns/a", "uid-a")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(net.JoinHostPort(host, strconv.Itoa(p))).To(Equal("127.0.0.1:12952"))
	host, p, err = m.ReserveWorkloadClusterEndpoint("ns/b", "uid-b")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(net.JoinHostPort(host, strconv.Itoa(p))).To(Equal("127.0.0.2:12952"))
	// The claim without a host takes the reservation's address.
	b, err := m.ClaimWorkloadClusterListener("ns/b", port, "uid-b")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(b.HostPort()).To(Equal("127.0.0.2:12952"))
	a, err := m.ClaimWorkloadClusterEndpoint("ns/a", "127.0.0.1", port, "uid-a")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(a.HostPort()).To(Equal("127.0.0.1:12952"))
	createMarker(t, b, "b")
	stop()

	owned := func(name, host string, uid types.UID) infrav1.GoofyCluster {
		gc := ownedCluster("ns", name, port, uid)
		gc.Spec.ControlPlaneEndpoint.Host = host
		return gc
	}
	m, stop = open("127.0.0.1", "127.0.0.2")
	others := m.OtherClustersOnEndpoint([]infrav1.GoofyCluster{owned("a", "127.0.0.1", "uid-a"), owned("b", "127.0.0.2", "uid-b")}, "ns/b", "127.0.0.2", port)
	g.Expect(others).To(BeEmpty(), "the same port on another address is another endpoint")
	g.Expect(OtherClustersOnPort([]infrav1.GoofyCluster{owned("a", "127.0.0.1", "uid-a")}, "ns/b", port)).To(HaveLen(1))
	// b's spec moved to a's address: refused; a is restored on its own.
	err = m.HotRestart(&infrav1.GoofyClusterList{Items: []infrav1.GoofyCluster{owned("a", "127.0.0.1", "uid-a"), owned("b", "127.0.0.1", "uid-b")}})
	g.Expect(errors.Is(err, ErrPortNotHeld)).To(BeTrue(), "got %v", err)
	g.Expect(err.Error()).To(ContainSubstring("held 127.0.0.2:12952, not 127.0.0.1:12952"))
	_, ok := m.Listener("ns/b")
	g.Expect(ok).To(BeFalse())
	la, ok := m.Listener("ns/a")
	g.Expect(ok).To(BeTrue())
	g.Expect(la.HostPort()).To(Equal("127.0.0.1:12952"))
	// With its spec back on its own address, b gets its endpoint and its state back; a host that
	// is no listener address (the manager's earlier host) is the record's address.
	lb, err := m.ClaimWorkloadClusterEndpoint("ns/b", "127.0.0.2", port, "uid-b")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(lb.HostPort()).To(Equal("127.0.0.2:12952"))
	_, err = lb.Store().Get(corev1.SchemeGroupVersion.WithResource("configmaps"), "default", "b")
	g.Expect(err).NotTo(HaveOccurred())
	stop()
	m, stop = open("127.0.0.1", "127.0.0.2")
	g.Expect(m.HotRestart(&infrav1.GoofyClusterList{Items: []infrav1.GoofyCluster{owned("a", "127.0.0.1", "uid-a"), owned("b", "goofy.example", "uid-b")}})).To(Succeed())
	lb, ok = m.Listener("ns/b")
	g.Expect(ok).To(BeTrue())
	g.Expect(lb.HostPort()).To(Equal("127.0.0.2:12952"))
	stop()

	// A manager that no longer listens on b's address refuses b's endpoint, clearly, at the
	// restart and at b's claims; a keeps its own.
	m, _ = open("127.0.0.1")
	err = m.HotRestart(&infrav1.GoofyClusterList{Items: []infrav1.GoofyCluster{owned("a", "127.0.0.1", "uid-a"), owned("b", "127.0.0.2", "uid-b")}})
	g.Expect(errors.Is(err, ErrPortNotHeld)).To(BeTrue(), "got %v", err)
	g.Expect(err.Error()).To(ContainSubstring("host 127.0.0.2 is not one of the listener addresses 127.0.0.1"))
	for _, host := range []string{"127.0.0.2", "127.0.0.1", ""} {
		_, err = m.ClaimWorkloadClusterEndpoint("ns/b", host, port, "uid-b")
		g.Expect(errors.Is(err, ErrPortNotHeld)).To(BeTrue(), "host %q: got %v", host, err)
	}
	la, ok = m.Listener("ns/a")
	g.Expect(ok).To(BeTrue())
	g.Expect(la.HostPort()).To(Equal("127.0.0.1:12952"))
}
