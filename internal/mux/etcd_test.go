package mux

import (
	"context"
	"crypto/tls"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kcpetcd "sigs.k8s.io/cluster-api/controlplane/kubeadm/pkg/etcd"
	"sigs.k8s.io/cluster-api/controlplane/kubeadm/pkg/proxy"
)

// TestKCPEtcdClientThroughPortForward drives the fake etcd exactly as KCP does: its proxy dialer
// port-forwards to pod etcd-<node> port 2379 through the workload cluster's API server, and its
// etcd client speaks gRPC over TLS (server name etcd-<node>, client certificate from the etcd CA)
// through that tunnel.
func TestKCPEtcdClientThroughPortForward(t *testing.T) {
	g := NewWithT(t)
	m := newTestMux(t)
	cc := newClusterCerts(t)
	const wcl = "ns/etcd"
	l, err := m.InitWorkloadClusterListener(wcl)
	g.Expect(err).NotTo(HaveOccurred())
	nodes := []string{"cp-0", "cp-1", "cp-2"}
	for _, n := range nodes {
		runningPod(t, l, "etcd-"+n)
		runningPod(t, l, "kube-apiserver-"+n)
		g.Expect(m.AddEtcdMember(wcl, "etcd-"+n, cc.etcdCA, cc.etcdCAKey)).To(Succeed())
		g.Expect(m.AddAPIServer(wcl, "kube-apiserver-"+n, cc.ca, cc.caKey)).To(Succeed())
		g.Expect(m.HasEtcdMember(wcl, "etcd-"+n)).To(BeTrue())
	}

	// KCP builds its etcd client TLS config from the <cluster>-etcd CA: a client cert signed by it.
	certPEM, keyPEM := clientCertFrom(t, cc.etcdCA, cc.etcdCAKey, "kube-etcd-healthcheck-client")
	clientCert, err := tls.X509KeyPair(certPEM, keyPEM)
	g.Expect(err).NotTo(HaveOccurred())
	tlsConfig := &tls.Config{RootCAs: pool(cc.etcdCA), Certificates: []tls.Certificate{clientCert}, MinVersion: tls.VersionTLS12}

	newClient := func(node string) *kcpetcd.Client {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		c, err := kcpetcd.NewClient(ctx, kcpetcd.ClientConfiguration{
			Endpoint:    "etcd-" + node,
			Proxy:       proxy.Proxy{Kind: "pods", Namespace: metav1.NamespaceSystem, KubeConfig: capiRESTConfig(t, "etcd", l, cc), Port: EtcdClientPort},
			TLSConfig:   tlsConfig,
			DialTimeout: 10 * time.Second,
			CallTimeout: 10 * time.Second,
		})
		g.Expect(err).NotTo(HaveOccurred())
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	ctx := context.Background()

	c0 := newClient("cp-0")
	g.Expect(c0.LeaderID).NotTo(BeZero())
	members, err := c0.Members(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(members).To(HaveLen(3))
	ids := map[string]uint64{}
	for _, mb := range members {
		ids[mb.Name] = mb.ID
	}
	g.Expect(ids).To(HaveKey("cp-0"))
	// The first member leads.
	g.Expect(c0.LeaderID).To(Equal(ids["cp-0"]))

	alarms, err := c0.Alarms(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(alarms).To(BeEmpty())

	// Move leadership to cp-1, then remove cp-0 as KCP does when scaling down.
	g.Expect(c0.MoveLeader(ctx, ids["cp-1"])).To(Succeed())
	c1 := newClient("cp-1")
	g.Expect(c1.LeaderID).To(Equal(ids["cp-1"]))
	g.Expect(c1.RemoveMember(ctx, ids["cp-0"])).To(Succeed())
	members, err = c1.Members(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(members).To(HaveLen(2))

	// A client certificate from the cluster CA (not the etcd CA) is refused by the etcd member.
	wrongPEM, wrongKey := clientCertFrom(t, cc.ca, cc.caKey, "kubernetes-admin")
	wrong, _ := tls.X509KeyPair(wrongPEM, wrongKey)
	ctx2, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	bad, err := kcpetcd.NewClient(ctx2, kcpetcd.ClientConfiguration{
		Endpoint:    "etcd-cp-1",
		Proxy:       proxy.Proxy{Kind: "pods", Namespace: metav1.NamespaceSystem, KubeConfig: capiRESTConfig(t, "etcd", l, cc), Port: EtcdClientPort},
		TLSConfig:   &tls.Config{RootCAs: pool(cc.etcdCA), Certificates: []tls.Certificate{wrong}, MinVersion: tls.VersionTLS12},
		DialTimeout: 2 * time.Second,
		CallTimeout: 2 * time.Second,
	})
	if err == nil {
		_ = bad.Close()
	}
	g.Expect(err).To(HaveOccurred())
}

// The mux serves the etcd of every cluster from one gRPC server: a call through one cluster's
// port-forward is answered by that cluster's etcd, even where two clusters name their members alike.
func TestEtcdOfEachClusterAnswersAsItsOwn(t *testing.T) {
	g := NewWithT(t)
	m := newTestMux(t)
	cc := newClusterCerts(t)
	certPEM, keyPEM := clientCertFrom(t, cc.etcdCA, cc.etcdCAKey, "kube-etcd-healthcheck-client")
	clientCert, err := tls.X509KeyPair(certPEM, keyPEM)
	g.Expect(err).NotTo(HaveOccurred())
	tlsConfig := &tls.Config{RootCAs: pool(cc.etcdCA), Certificates: []tls.Certificate{clientCert}, MinVersion: tls.VersionTLS12}

	// ns/small runs one control-plane node, ns/large three; both have a cp-0.
	clusters := map[string][]string{"ns/small": {"cp-0"}, "ns/large": {"cp-0", "cp-1", "cp-2"}}
	for wcl, nodes := range clusters {
		l, err := m.InitWorkloadClusterListener(wcl)
		g.Expect(err).NotTo(HaveOccurred())
		for _, n := range nodes {
			runningPod(t, l, "etcd-"+n)
			runningPod(t, l, "kube-apiserver-"+n)
			g.Expect(m.AddEtcdMember(wcl, "etcd-"+n, cc.etcdCA, cc.etcdCAKey)).To(Succeed())
			g.Expect(m.AddAPIServer(wcl, "kube-apiserver-"+n, cc.ca, cc.caKey)).To(Succeed())
		}
	}
	clusterIDs := map[uint64]string{}
	for wcl, nodes := range clusters {
		l, _ := m.Listener(wcl)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		c, err := kcpetcd.NewClient(ctx, kcpetcd.ClientConfiguration{
			Endpoint:    "etcd-cp-0",
			Proxy:       proxy.Proxy{Kind: "pods", Namespace: metav1.NamespaceSystem, KubeConfig: capiRESTConfig(t, wcl, l, cc), Port: EtcdClientPort},
			TLSConfig:   tlsConfig,
			DialTimeout: 10 * time.Second,
			CallTimeout: 10 * time.Second,
		})
		g.Expect(err).NotTo(HaveOccurred())
		members, err := c.Members(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(members).To(HaveLen(len(nodes)), "members of %s", wcl)
		status, err := c.EtcdClient.Status(ctx, "etcd-cp-0")
		g.Expect(err).NotTo(HaveOccurred())
		clusterIDs[status.Header.ClusterId] = wcl
		_ = c.Close()
		cancel()
	}
	g.Expect(clusterIDs).To(HaveLen(2), "each cluster's etcd reports its own cluster ID")
}
