package portforward_test

import (
	"context"
	"crypto/tls"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	kcpetcd "sigs.k8s.io/cluster-api/controlplane/kubeadm/pkg/etcd"
	etcdutil "sigs.k8s.io/cluster-api/controlplane/kubeadm/pkg/etcd/util"
	"sigs.k8s.io/cluster-api/controlplane/kubeadm/pkg/proxy"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/etcd"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/etcd/etcdtest"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/portforward"
)

const wl = "wl-pf"

// etcdCluster is a fake etcd with members a, b, c served over TLS, and the
// port-forward env whose etcd-<member> pods forward port 2379 to it.
func etcdCluster(t testing.TB, opts portforward.Options) (*env, *etcd.Server, *etcdtest.PKI) {
	t.Helper()
	srv, err := etcd.NewServer(context.Background(), fake.NewClientBuilder().Build(), wl)
	if err != nil {
		t.Fatal(err)
	}
	pods := []string{"etcd-a", "etcd-b", "etcd-c"}
	pki := etcdtest.NewPKI(t, pods...)
	addr := etcdtest.Serve(t, srv, pki)
	e := newEnv(t, opts)
	for _, p := range pods {
		if _, err := srv.AddMember(context.Background(), p); err != nil {
			t.Fatal(err)
		}
		e.addPod("kube-system", p, corev1.PodRunning, map[int32]string{2379: addr})
	}
	return e, srv, pki
}

// kcpEtcdClient is KCP's own etcd client, built exactly as KCP's
// EtcdClientGenerator does: port-forward through the API server to pod
// etcd-<node>, TLS with the endpoint (the pod name) as server name.
func kcpEtcdClient(t testing.TB, e *env, pki *etcdtest.PKI, pod string) *kcpetcd.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := kcpetcd.NewClient(ctx, kcpetcd.ClientConfiguration{
		Endpoint:    pod,
		Proxy:       proxy.Proxy{Kind: "pods", Namespace: "kube-system", KubeConfig: e.kubeConfig(), Port: 2379},
		TLSConfig:   pki.ClientTLS(),
		DialTimeout: 10 * time.Second,
		CallTimeout: 10 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestKCPEtcdClientThroughPortForward(t *testing.T) {
	for _, tc := range []struct {
		name     string
		disable  bool
		protocol string
	}{
		{"websocket", false, "websocket"},
		{"spdy fallback", true, "spdy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.disable && raceDetector {
				// Upstream, not here: KCP's proxy.Dialer shares one client-go
				// SpdyRoundTripper between the concurrent dials clientv3 makes,
				// and RoundTrip stores the connection in it (a data race). With
				// WebSockets enabled, as the mux serves them, KCP never takes
				// that path.
				t.Skip("KCP's SPDY-only dialer races on a shared round tripper")
			}
			g := NewWithT(t)
			e, srv, pki := etcdCluster(t, portforward.Options{DisableWebSockets: tc.disable})
			before := forwarded(tc.protocol)
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()

			a := kcpEtcdClient(t, e, pki, "etcd-a")
			g.Expect(a.LeaderID).To(Equal(etcd.MemberIDFor(wl, "a")))
			members, err := a.Members(ctx)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(etcdutil.MemberNames(members)).To(ConsistOf("a", "b", "c"))
			g.Expect(members[0].ClusterID).To(Equal(srv.ClusterID()))

			g.Expect(a.MoveLeader(ctx, etcdutil.MemberForName(members, "b").ID)).To(Succeed())
			b := kcpEtcdClient(t, e, pki, "etcd-b")
			g.Expect(b.LeaderID).To(Equal(etcd.MemberIDFor(wl, "b")))
			g.Expect(a.MoveLeader(ctx, etcd.MemberIDFor(wl, "c"))).To(MatchError(ContainSubstring("not leader")))

			g.Expect(b.RemoveMember(ctx, etcd.MemberIDFor(wl, "c"))).To(Succeed())
			members, err = b.Members(ctx)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(etcdutil.MemberNames(members)).To(ConsistOf("a", "b"))

			alarms, err := b.Alarms(ctx)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(alarms).To(BeEmpty())

			g.Expect(forwarded(tc.protocol) - before).To(BeNumerically(">=", 2))
		})
	}
}

// KCP also dials kube-apiserver-<node>:6443 through the port-forward to read
// the serving certificate of the API server.
func TestKCPProxyDialerToAPIServerPort(t *testing.T) {
	g := NewWithT(t)
	pki := etcdtest.NewPKI(t, "kube-apiserver-a")
	lis, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pki.Server}})
	g.Expect(err).NotTo(HaveOccurred())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			_ = c.(*tls.Conn).Handshake()
			_ = c.Close()
		}
	}()
	t.Cleanup(func() {
		_ = lis.Close()
		<-done
	})

	e := newEnv(t, portforward.Options{})
	e.addPod("kube-system", "kube-apiserver-a", corev1.PodRunning, map[int32]string{6443: lis.Addr().String()})
	d, err := proxy.NewDialer(proxy.Proxy{Kind: "pods", Namespace: "kube-system", KubeConfig: e.kubeConfig(), Port: 6443})
	g.Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	conn, err := d.DialContext(ctx, "tcp", "kube-apiserver-a")
	g.Expect(err).NotTo(HaveOccurred())
	tc := tls.Client(conn, &tls.Config{RootCAs: pki.CAPool, ServerName: "kube-apiserver-a"})
	g.Expect(tc.HandshakeContext(ctx)).To(Succeed())
	g.Expect(tc.ConnectionState().PeerCertificates[0].NotAfter).NotTo(BeZero())
	_ = tc.Close()
}

// BenchmarkEtcdMemberListThroughPortForward measures KCP's etcd client doing
// MemberList round trips over one port-forwarded connection.
func BenchmarkEtcdMemberListThroughPortForward(b *testing.B) {
	for _, tc := range []struct {
		name    string
		disable bool
	}{{"spdy", true}, {"websocket", false}} {
		b.Run(tc.name, func(b *testing.B) {
			e, _, pki := etcdCluster(b, portforward.Options{DisableWebSockets: tc.disable})
			c := kcpEtcdClient(b, e, pki, "etcd-a")
			ctx := context.Background()
			b.ResetTimer()
			for range b.N {
				if _, err := c.Members(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "roundtrips/s")
		})
	}
}
