package mux

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/goofy-capi/cluster-api-provider-goofy/api/v1alpha1"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

func TestClientGoWithCAPIKubeconfig(t *testing.T) {
	g := NewWithT(t)
	m := newTestMux(t)
	cc := newClusterCerts(t)
	l, err := m.InitWorkloadClusterListener("ns/c1")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(l.Host()).To(Equal("127.0.0.1"))
	g.Expect(l.HostPort()).To(Equal("127.0.0.1:" + strconv.Itoa(l.Port())))
	g.Expect(l.Address()).To(Equal("https://" + l.HostPort()))

	// Not serving before the first API server.
	_, err = net.DialTimeout("tcp", l.HostPort(), time.Second)
	g.Expect(err).To(HaveOccurred())
	_, err = l.RESTConfig()
	g.Expect(err).To(HaveOccurred())

	g.Expect(m.AddAPIServer("ns/c1", "kube-apiserver-m1", cc.ca, cc.caKey)).To(Succeed())
	g.Expect(m.HasAPIServer("ns/c1", "kube-apiserver-m1")).To(BeTrue())

	cs := kubernetes.NewForConfigOrDie(capiRESTConfig(t, "c1", l, cc))
	nss, err := cs.CoreV1().Namespaces().List(context.Background(), metav1.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	var names []string
	for _, ns := range nss.Items {
		names = append(names, ns.Name)
	}
	g.Expect(names).To(ContainElements("default", "kube-public", "kube-system"))

	// The admin RESTConfig works too, over HTTP/2.
	l.Store().SetKubernetesVersion("v1.36.3")
	rc, err := l.RESTConfig()
	g.Expect(err).NotTo(HaveOccurred())
	v, err := kubernetes.NewForConfigOrDie(rc).Discovery().ServerVersion()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(v.GitVersion).To(Equal("v1.36.3"))

	// Serving certificate: CN kube-apiserver, ECDSA leaf, SANs as kubeadm's.
	conn, err := tls.Dial("tcp", l.HostPort(), &tls.Config{RootCAs: pool(cc.ca), ServerName: "kubernetes.default.svc", NextProtos: []string{"h2"}})
	g.Expect(err).NotTo(HaveOccurred())
	state := conn.ConnectionState()
	_ = conn.Close()
	leaf := state.PeerCertificates[0]
	g.Expect(leaf.Subject.CommonName).To(Equal("kube-apiserver"))
	g.Expect(leaf.PublicKeyAlgorithm).To(Equal(x509.ECDSA))
	g.Expect(leaf.DNSNames).To(ContainElements("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"))
	g.Expect(state.NegotiatedProtocol).To(Equal("h2"))
	// The client offers Go's default key exchanges (post-quantum hybrid first); the server
	// chooses classic X25519, which costs a fraction of the CPU per handshake.
	g.Expect(state.CurveID).To(Equal(tls.X25519))

	// Removing the last API server stops serving; the port stays reserved.
	g.Expect(m.DeleteAPIServer("ns/c1", "kube-apiserver-m1")).To(Succeed())
	_, err = net.DialTimeout("tcp", l.HostPort(), time.Second)
	g.Expect(err).To(HaveOccurred())
	g.Expect(m.ListListeners()).To(Equal(map[string]string{"ns/c1": "https://" + l.HostPort()}))
	g.Expect(m.Listeners()).To(Equal(map[string]*WorkloadClusterListener{"ns/c1": l}))
	g.Expect(m.Describe()).To(Equal([]ListenerInfo{{Cluster: "ns/c1", Address: l.Address(), Serving: false}}))
}

func TestIsolationBetweenClusters(t *testing.T) {
	g := NewWithT(t)
	m := newTestMux(t)
	ccA, ccB := newClusterCerts(t), newClusterCerts(t)
	la, _ := m.InitWorkloadClusterListener("ns/a")
	lb, _ := m.InitWorkloadClusterListener("ns/b")
	g.Expect(m.AddAPIServer("ns/a", "kube-apiserver-a", ccA.ca, ccA.caKey)).To(Succeed())
	g.Expect(m.AddAPIServer("ns/b", "kube-apiserver-b", ccB.ca, ccB.caKey)).To(Succeed())
	ctx := context.Background()

	// Cluster A's client certificate against cluster B (trusting B's server) is rejected by B.
	cfgA := capiRESTConfig(t, "a", la, ccA)
	cross := rest.CopyConfig(cfgA)
	cross.Host = lb.Address()
	cross.CAData = pemCert(ccB.ca)
	_, err := kubernetes.NewForConfigOrDie(cross).CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	expectRejectedInHandshake(g, err)

	// And A's own kubeconfig simply pointed at B does not trust B's server either.
	moved := rest.CopyConfig(cfgA)
	moved.Host = lb.Address()
	_, err = kubernetes.NewForConfigOrDie(moved).CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	g.Expect(err).To(HaveOccurred())

	// No client certificate: anonymous, which this cluster's (empty) policy allows nothing.
	anon := &rest.Config{Host: la.Address(), TLSClientConfig: rest.TLSClientConfig{CAData: pemCert(ccA.ca)}}
	_, err = kubernetes.NewForConfigOrDie(anon).CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "got %v", err)
	g.Expect(err.Error()).To(ContainSubstring(`User "system:anonymous" cannot list resource "namespaces"`))

	// An expired certificate from the right CA: rejected.
	expired := rest.CopyConfig(anon)
	expired.CertData, expired.KeyData = clientCert(t, ccA, "kubernetes-admin", []string{"system:masters"}, -time.Hour)
	_, err = kubernetes.NewForConfigOrDie(expired).CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	expectRejectedInHandshake(g, err)

	// A valid certificate of an identity the cluster does not authorize: 403.
	stranger := rest.CopyConfig(anon)
	stranger.CertData, stranger.KeyData = clientCert(t, ccA, "mallory", []string{"people"}, time.Hour)
	_, err = kubernetes.NewForConfigOrDie(stranger).CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "got %v", err)

	// The health endpoints are open, like kube-apiserver's.
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool(ccA.ca)}}}
	resp, err := hc.Get(la.Address() + "/healthz")
	g.Expect(err).NotTo(HaveOccurred())
	_ = resp.Body.Close()
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
}

func TestPortsAreReusedAndExhaustionIsAnError(t *testing.T) {
	g := NewWithT(t)
	m := newTestMux(t, WithPortRange(12000, 12002))
	var ports []int
	for i := 0; i < 3; i++ {
		l, err := m.InitWorkloadClusterListener(fmt.Sprintf("ns/c%d", i))
		g.Expect(err).NotTo(HaveOccurred())
		ports = append(ports, l.Port())
	}
	g.Expect(ports).To(ConsistOf(12000, 12001, 12002))
	_, err := m.InitWorkloadClusterListener("ns/c3")
	g.Expect(errors.Is(err, ErrPortRangeExhausted)).To(BeTrue(), "got %v", err)

	// Idempotent for an existing cluster.
	again, err := m.InitWorkloadClusterListener("ns/c1")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again.Port()).To(Equal(ports[1]))

	// Deleting frees the port (and the store) for the next cluster.
	g.Expect(m.DeleteWorkloadClusterListener("ns/c1")).To(Succeed())
	l, err := m.InitWorkloadClusterListener("ns/c3")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(l.Port()).To(Equal(ports[1]))

	// A port taken by another process is skipped.
	g.Expect(m.DeleteWorkloadClusterListener("ns/c2")).To(Succeed())
	busy, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(ports[2]))
	g.Expect(err).NotTo(HaveOccurred())
	defer busy.Close()
	_, err = m.InitWorkloadClusterListener("ns/c4")
	g.Expect(errors.Is(err, ErrPortRangeExhausted)).To(BeTrue(), "got %v", err)
}

func TestHotRestartKeepsPorts(t *testing.T) {
	g := NewWithT(t)
	mgr := store.NewManager()
	m1, err := NewWorkloadClustersMux(mgr, "127.0.0.1", WithPortRange(12100, 12199))
	g.Expect(err).NotTo(HaveOccurred())
	cc := newClusterCerts(t)
	l1, _ := m1.InitWorkloadClusterListener("ns/keep")
	g.Expect(m1.AddAPIServer("ns/keep", "kube-apiserver-x", cc.ca, cc.caKey)).To(Succeed())
	port := l1.Port()
	g.Expect(m1.Shutdown(context.Background())).To(Succeed())

	// Something else grabbed the port of another cluster. (A cluster naming keep's port too is
	// TestHotRestartPortsGoToTheirHolders.)
	busy, err := net.Listen("tcp", "127.0.0.1:12150")
	g.Expect(err).NotTo(HaveOccurred())
	defer busy.Close()

	m2 := newTestMux(t, WithPortRange(12100, 12199))
	list := &infrav1.GoofyClusterList{Items: []infrav1.GoofyCluster{
		goofyCluster("ns", "keep", port),
		goofyCluster("ns", "taken", 12150),
		goofyCluster("ns", "fresh", 0), // no endpoint yet: left to the reconciler
	}}
	err = m2.HotRestart(list)
	g.Expect(err).To(HaveOccurred())
	g.Expect(err.Error()).To(ContainSubstring("ns/taken"))
	g.Expect(err.Error()).NotTo(ContainSubstring("workload cluster ns/keep:"))
	l2, ok := m2.Listener("ns/keep")
	g.Expect(ok).To(BeTrue())
	g.Expect(l2.Port()).To(Equal(port))
	_, ok = m2.Listener("ns/fresh")
	g.Expect(ok).To(BeFalse())

	// Serving again on the same port, with the same store content.
	g.Expect(m2.AddAPIServer("ns/keep", "kube-apiserver-x", cc.ca, cc.caKey)).To(Succeed())
	cs := kubernetes.NewForConfigOrDie(capiRESTConfig(t, "keep", l2, cc))
	_, err = cs.CoreV1().Namespaces().Get(context.Background(), "kube-system", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
}

func TestManyListenersServe(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 1,000 listeners")
	}
	g := NewWithT(t)
	m := newTestMux(t, WithPortRange(13000, 14999))
	cc := newClusterCerts(t)
	const n = 1000
	listeners := make([]*WorkloadClusterListener, n)
	for i := range n {
		name := fmt.Sprintf("ns/many-%d", i)
		l, err := m.InitWorkloadClusterListener(name)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(m.AddAPIServer(name, "kube-apiserver-0", cc.ca, cc.caKey)).To(Succeed())
		listeners[i] = l
	}
	g.Expect(m.ListListeners()).To(HaveLen(n))
	// Every listener answers with its own store: write a marker in each, read it back over TLS.
	for i, l := range listeners {
		c, _ := l.GetClient()
		g.Expect(c.Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "marker", Namespace: "default"}, Data: map[string]string{"i": strconv.Itoa(i)}})).To(Succeed())
	}
	for i, l := range listeners {
		rc, err := l.RESTConfig()
		g.Expect(err).NotTo(HaveOccurred())
		rc.Timeout = 10 * time.Second
		cm, err := kubernetes.NewForConfigOrDie(rc).CoreV1().ConfigMaps("default").Get(context.Background(), "marker", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(cm.Data["i"]).To(Equal(strconv.Itoa(i)))
	}
}

func TestShutdownLeaksNoGoroutine(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	g := NewWithT(t)
	m, err := NewWorkloadClustersMux(store.NewManager(), "127.0.0.1", WithPortRange(12200, 12299))
	g.Expect(err).NotTo(HaveOccurred())
	cc := newClusterCerts(t)
	l, _ := m.InitWorkloadClusterListener("ns/leak")
	g.Expect(m.AddAPIServer("ns/leak", "kube-apiserver-a", cc.ca, cc.caKey)).To(Succeed())
	g.Expect(m.AddEtcdMember("ns/leak", "etcd-a", cc.etcdCA, cc.etcdCAKey)).To(Succeed())

	// An open watch must not hold shutdown.
	rc := capiRESTConfig(t, "leak", l, cc)
	tr, err := rest.TransportFor(rc)
	g.Expect(err).NotTo(HaveOccurred())
	rc.Transport, rc.TLSClientConfig = tr, rest.TLSClientConfig{}
	cs := kubernetes.NewForConfigOrDie(rc)
	w, err := cs.CoreV1().Pods("").Watch(context.Background(), metav1.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	g.Expect(m.Shutdown(ctx)).To(Succeed())
	w.Stop()
	if ht, ok := tr.(interface{ CloseIdleConnections() }); ok {
		ht.CloseIdleConnections()
	}
}

func goofyCluster(ns, name string, port int) infrav1.GoofyCluster {
	return infrav1.GoofyCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-infra", Labels: map[string]string{clusterv1.ClusterNameLabel: name}},
		Spec:       infrav1.GoofyClusterSpec{ControlPlaneEndpoint: clusterv1.APIEndpoint{Host: "127.0.0.1", Port: int32(port)}},
	}
}

func pool(ca *x509.Certificate) *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca)
	return p
}

// clientCert issues a client certificate signed by the cluster CA, valid for validFor from now
// (negative: already expired).
func clientCert(t testing.TB, cc clusterCerts, cn string, groups []string, validFor time.Duration) (certPEM, keyPEM []byte) {
	t.Helper()
	return issueClientCert(t, cc.ca, cc.caKey, cn, groups, validFor)
}

func clientCertFrom(t testing.TB, ca *x509.Certificate, caKey crypto.Signer, cn string) (certPEM, keyPEM []byte) {
	t.Helper()
	return issueClientCert(t, ca, caKey, cn, nil, time.Hour)
}

func issueClientCert(t testing.TB, ca *x509.Certificate, caKey crypto.Signer, cn string, groups []string, validFor time.Duration) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	notAfter := time.Now().Add(validFor)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: cn, Organization: groups},
		NotBefore:    notAfter.Add(-2 * time.Hour),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	kp, err := pemKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pemCert(cert), kp
}

// expectRejectedInHandshake checks that a request failed before reaching the API handler: the TLS
// handshake refused the client certificate. How the client reports it depends on timing (a bad
// certificate alert, a broken pipe, a reset connection), but never as an API Status.
func expectRejectedInHandshake(g Gomega, err error) {
	g.Expect(err).To(HaveOccurred(), "the request was accepted")
	var status apierrors.APIStatus
	g.Expect(errors.As(err, &status)).To(BeFalse(), "the request reached the handler: %v", err)
}
