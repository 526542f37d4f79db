package mux

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"math/big"
	"net"
	"net/http"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/cluster-api/controlplane/kubeadm/pkg/proxy"
)

// trustCluster serves one workload cluster with an API server and etcd member etcd-0, on this
// test file's ports (12500-12599).
func trustCluster(t *testing.T, name string) (*WorkloadClustersMux, *WorkloadClusterListener, clusterCerts) {
	t.Helper()
	g := NewWithT(t)
	m := newTestMux(t, WithPortRange(12500, 12599))
	cc := newClusterCerts(t)
	l, err := m.InitWorkloadClusterListener(name)
	g.Expect(err).NotTo(HaveOccurred())
	runningPod(t, l, "etcd-0")
	g.Expect(m.AddEtcdMember(name, "etcd-0", cc.etcdCA, cc.etcdCAKey)).To(Succeed())
	g.Expect(m.AddAPIServer(name, "kube-apiserver-0", cc.ca, cc.caKey)).To(Succeed())
	return m, l, cc
}

// keyPair issues a client certificate of ca with the given groups.
func keyPair(t *testing.T, ca *x509.Certificate, caKey crypto.Signer, cn string, groups ...string) tls.Certificate {
	t.Helper()
	certPEM, keyPEM := issueClientCert(t, ca, caKey, cn, groups, time.Hour)
	kp, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

// dialTLS opens one TLS connection with server name sni, presenting cert when given. The server
// certificate is not verified: these tests are about what the server accepts. TLS 1.2, so that
// the server's refusal of a client certificate fails the handshake itself (in TLS 1.3 the client
// learns of it on its first read).
func dialTLS(t *testing.T, nc net.Conn, sni string, cert *tls.Certificate, protos ...string) (*tls.Conn, error) {
	t.Helper()
	cfg := &tls.Config{ServerName: sni, InsecureSkipVerify: true, NextProtos: protos, MaxVersion: tls.VersionTLS12} //nolint:gosec // the server's side is under test
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	c := tls.Client(nc, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.HandshakeContext(ctx); err != nil {
		_ = nc.Close()
		return nil, err
	}
	return c, nil
}

func dialListener(t *testing.T, l *WorkloadClusterListener, sni string, cert *tls.Certificate, protos ...string) (*tls.Conn, error) {
	t.Helper()
	nc, err := net.DialTimeout("tcp", l.HostPort(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return dialTLS(t, nc, sni, cert, protos...)
}

// grpcOver makes an etcd Cluster client that speaks gRPC on the one connection tc.
func grpcOver(t *testing.T, tc *tls.Conn) pb.ClusterClient {
	t.Helper()
	used := false
	cc, err := grpc.NewClient("passthrough:///listener",
		grpc.WithTransportCredentials(insecure.NewCredentials()), // TLS is tc's
		grpc.WithContextDialer(func(context.Context, string) (net.Conn, error) {
			if used {
				return nil, io.EOF
			}
			used = true
			return tc, nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return pb.NewClusterClient(cc)
}

func memberList(c pb.ClusterClient) (*pb.MemberListResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return c.MemberList(ctx, &pb.MemberListRequest{})
}

// oneConn is an HTTP client on the one connection tc (HTTP/2 when negotiated).
func oneConn(tc *tls.Conn) *http.Client {
	used := false
	return &http.Client{Transport: &http.Transport{ForceAttemptHTTP2: true,
		DialTLSContext: func(context.Context, string, string) (net.Conn, error) {
			if used {
				return nil, io.EOF
			}
			used = true
			return tc, nil
		}}}
}

// h2Get sends GET path on the one connection tc.
func h2Get(t *testing.T, tc *tls.Conn, path string) int {
	t.Helper()
	return get(t, oneConn(tc), path)
}

func get(t *testing.T, hc *http.Client, path string) int {
	t.Helper()
	resp, err := hc.Get("https://listener" + path)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}

// TestTrustIsDecidedOncePerConnection: what a connection is for (an etcd member or the API
// server) is decided by its handshake and holds for its lifetime; trust and routing follow the
// same decision.
func TestTrustIsDecidedOncePerConnection(t *testing.T) {
	const wcl = "ns/trust"

	t.Run("a connection opened before its etcd member exists stays the API server's", func(t *testing.T) {
		g := NewWithT(t)
		m, l, cc := trustCluster(t, wcl)
		admin := keyPair(t, cc.ca, cc.caKey, "kubernetes-admin", "system:masters")
		early, err := dialListener(t, l, "etcd-late", &admin, "h2")
		g.Expect(err).NotTo(HaveOccurred())
		runningPod(t, l, "etcd-late")
		g.Expect(m.AddEtcdMember(wcl, "etcd-late", cc.etcdCA, cc.etcdCAKey)).To(Succeed())

		_, err = memberList(grpcOver(t, early))
		g.Expect(err).To(HaveOccurred(), "gRPC on an API server connection reached etcd")
		g.Expect(status.Code(err)).NotTo(Equal(codes.OK))

		// A new connection with that name is the member's: it needs the etcd CA.
		etcdClient := keyPair(t, cc.etcdCA, cc.etcdCAKey, "kube-etcd-healthcheck-client")
		late, err := dialListener(t, l, "etcd-late", &etcdClient, "h2")
		g.Expect(err).NotTo(HaveOccurred())
		resp, err := memberList(grpcOver(t, late))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(resp.Members).To(HaveLen(2))
	})

	t.Run("an etcd connection never reaches the API server", func(t *testing.T) {
		g := NewWithT(t)
		m, l, cc := trustCluster(t, wcl)
		// An etcd CA certificate claiming system:masters.
		masters := keyPair(t, cc.etcdCA, cc.etcdCAKey, "kubernetes-admin", "system:masters")
		for _, protos := range [][]string{{"h2"}, nil} {
			c, err := dialListener(t, l, "etcd-0", &masters, protos...)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(h2Get(t, c, "/api/v1/namespaces/kube-system/secrets")).To(Equal(http.StatusNotFound), "ALPN %v", protos)
		}

		// Its member removed, the connection's calls fail as on a stopped etcd; they do not
		// fall through to the API server.
		c, err := dialListener(t, l, "etcd-0", &masters, "h2")
		g.Expect(err).NotTo(HaveOccurred())
		client := grpcOver(t, c)
		_, err = memberList(client)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(m.DeleteEtcdMember(wcl, "etcd-0")).To(Succeed())
		_, err = memberList(client)
		g.Expect(status.Code(err)).To(Equal(codes.Unavailable), "%v", err)
		g.Expect(status.Convert(err).Message()).To(Equal("etcdserver: server stopped"))
	})

	t.Run("neither CA's certificates are accepted by the other", func(t *testing.T) {
		g := NewWithT(t)
		_, l, cc := trustCluster(t, wcl)
		etcdMasters := keyPair(t, cc.etcdCA, cc.etcdCAKey, "kubernetes-admin", "system:masters")
		clusterMasters := keyPair(t, cc.ca, cc.caKey, "kubernetes-admin", "system:masters")
		etcdClient := keyPair(t, cc.etcdCA, cc.etcdCAKey, "kube-etcd-healthcheck-client")

		for _, sni := range []string{"", "kubernetes", "localhost", "etcd-unknown"} {
			_, err := dialListener(t, l, sni, &etcdMasters, "h2")
			g.Expect(err).To(HaveOccurred(), "the API server (server name %q) accepted an etcd CA certificate", sni)
			c, err := dialListener(t, l, sni, &clusterMasters, "h2")
			g.Expect(err).NotTo(HaveOccurred(), sni)
			g.Expect(h2Get(t, c, "/api/v1/namespaces")).To(Equal(http.StatusOK), sni)
		}
		_, err := dialListener(t, l, "etcd-0", &clusterMasters, "h2")
		g.Expect(err).To(HaveOccurred(), "etcd accepted a cluster CA certificate")
		_, err = dialListener(t, l, "etcd-0", nil, "h2")
		g.Expect(err).To(HaveOccurred(), "etcd accepted a connection without a certificate")
		c, err := dialListener(t, l, "etcd-0", &etcdClient, "h2")
		g.Expect(err).NotTo(HaveOccurred())
		_, err = memberList(grpcOver(t, c))
		g.Expect(err).NotTo(HaveOccurred())
	})

	t.Run("a port-forward tunnel to an etcd pod reaches only that member", func(t *testing.T) {
		g := NewWithT(t)
		m, l, cc := trustCluster(t, wcl)
		clusterMasters := keyPair(t, cc.ca, cc.caKey, "kubernetes-admin", "system:masters")
		etcdClient := keyPair(t, cc.etcdCA, cc.etcdCAKey, "kube-etcd-healthcheck-client")
		dialer, err := proxy.NewDialer(proxy.Proxy{Kind: "pods", Namespace: metav1.NamespaceSystem, KubeConfig: capiRESTConfig(t, "trust", l, cc), Port: EtcdClientPort})
		g.Expect(err).NotTo(HaveOccurred())
		tunnel := func() net.Conn {
			before := forwardedKeys(l)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			nc, err := dialer.DialContextWithAddr(ctx, "etcd-0")
			g.Expect(err).NotTo(HaveOccurred())
			t.Cleanup(func() { _ = nc.Close() })
			// The tunnel is tagged once the forward has dialed back into the listener.
			g.Eventually(func() []any { return forwardedKeys(l) }, 10*time.Second, 10*time.Millisecond).Should(ContainElement(Not(BeElementOf(append(before, "none")...))))
			return nc
		}

		// Whatever server name the client sends (etcdctl behind kubectl sends 127.0.0.1).
		_, err = dialTLS(t, tunnel(), "kubernetes", &clusterMasters, "h2")
		g.Expect(err).To(HaveOccurred(), "a tunnel to etcd accepted a cluster CA certificate")
		c, err := dialTLS(t, tunnel(), "127.0.0.1", &etcdClient, "h2")
		g.Expect(err).NotTo(HaveOccurred())
		_, err = memberList(grpcOver(t, c))
		g.Expect(err).NotTo(HaveOccurred())

		// The member removed between the forward and the handshake: refused, not the API server.
		nc := tunnel()
		g.Expect(m.DeleteEtcdMember(wcl, "etcd-0")).To(Succeed())
		_, err = dialTLS(t, nc, "kubernetes", &clusterMasters, "h2")
		g.Expect(err).To(HaveOccurred(), "a tunnel to a removed etcd member reached the API server")
	})

	t.Run("rotated CAs: connections verified with the old one are trusted no longer", func(t *testing.T) {
		g := NewWithT(t)
		m, l, cc := trustCluster(t, wcl)
		admin := keyPair(t, cc.ca, cc.caKey, "kubernetes-admin", "system:masters")
		etcdClient := keyPair(t, cc.etcdCA, cc.etcdCAKey, "kube-etcd-healthcheck-client")
		apiConn, err := dialListener(t, l, "", &admin, "h2")
		g.Expect(err).NotTo(HaveOccurred())
		apiClient := oneConn(apiConn)
		namespaces := func() int { return get(t, apiClient, "/api/v1/namespaces") }
		etcdConn, err := dialListener(t, l, "etcd-0", &etcdClient, "h2")
		g.Expect(err).NotTo(HaveOccurred())
		etcd := grpcOver(t, etcdConn)
		g.Expect(namespaces()).To(Equal(http.StatusOK))
		_, err = memberList(etcd)
		g.Expect(err).NotTo(HaveOccurred())

		rotated := newClusterCerts(t)
		g.Expect(m.AddAPIServer(wcl, "kube-apiserver-0", rotated.ca, rotated.caKey)).To(Succeed())
		g.Expect(m.AddEtcdMember(wcl, "etcd-0", rotated.etcdCA, rotated.etcdCAKey)).To(Succeed())
		g.Expect(namespaces()).To(Equal(http.StatusUnauthorized), "a certificate of the old cluster CA")
		_, err = memberList(etcd)
		g.Expect(status.Code(err)).To(Equal(codes.Unavailable), "%v", err)

		// Certificates of the new CAs work on new connections.
		newAdmin := keyPair(t, rotated.ca, rotated.caKey, "kubernetes-admin", "system:masters")
		c, err := dialListener(t, l, "", &newAdmin, "h2")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(h2Get(t, c, "/api/v1/namespaces")).To(Equal(http.StatusOK))
		newEtcd := keyPair(t, rotated.etcdCA, rotated.etcdCAKey, "kube-etcd-healthcheck-client")
		c, err = dialListener(t, l, "etcd-0", &newEtcd, "h2")
		g.Expect(err).NotTo(HaveOccurred())
		_, err = memberList(grpcOver(t, c))
		g.Expect(err).NotTo(HaveOccurred())
		_, err = dialListener(t, l, "etcd-0", &etcdClient, "h2")
		g.Expect(err).To(HaveOccurred(), "a certificate of the old etcd CA")
	})

	t.Run("an etcd CA with the cluster CA's key is refused", func(t *testing.T) {
		g := NewWithT(t)
		m := newTestMux(t, WithPortRange(12500, 12599))
		cc := newClusterCerts(t)
		// The same key under the etcd CA's name: its certificates would verify against either.
		sameKey := selfSignedCA(t, "etcd-ca", cc.caKey)
		_, err := m.InitWorkloadClusterListener(wcl)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(m.AddAPIServer(wcl, "kube-apiserver-0", cc.ca, cc.caKey)).To(Succeed())
		g.Expect(m.AddEtcdMember(wcl, "etcd-0", sameKey, cc.caKey)).To(MatchError(ContainSubstring("has the cluster CA's key")))
		g.Expect(m.AddEtcdMember(wcl, "etcd-0", cc.ca, cc.caKey)).To(MatchError(ContainSubstring("has the cluster CA's key")))

		other := "ns/trust-other"
		_, err = m.InitWorkloadClusterListener(other)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(m.AddEtcdMember(other, "etcd-0", sameKey, cc.caKey)).To(Succeed())
		g.Expect(m.AddAPIServer(other, "kube-apiserver-0", cc.ca, cc.caKey)).To(MatchError(ContainSubstring("has the etcd CA's key")))
	})
}

func forwardedKeys(l *WorkloadClusterListener) []any {
	var keys []any
	l.forwarded.Range(func(k, _ any) bool { keys = append(keys, k); return true })
	return keys
}

// selfSignedCA makes a CA certificate named cn for key.
func selfSignedCA(t *testing.T, cn string, key crypto.Signer) *x509.Certificate {
	t.Helper()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}
