package mux

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	gwebsocket "github.com/gorilla/websocket"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	//lint:ignore SA1019 client-go's SPDY dialer and KCP's proxy.Conn speak it
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport/spdy"
	"sigs.k8s.io/cluster-api/controlplane/kubeadm/pkg/proxy"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/etcd"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/portforward"
)

// limitedCluster serves one workload cluster (API server, etcd member etcd-0) under lim, on
// this test file's ports (12600-12699).
func limitedCluster(t *testing.T, lim Limits) (*WorkloadClusterListener, clusterCerts) {
	t.Helper()
	g := NewWithT(t)
	m := newTestMux(t, WithPortRange(12600, 12699), WithLimits(lim))
	cc := newClusterCerts(t)
	const wcl = "ns/limits"
	l, err := m.InitWorkloadClusterListener(wcl)
	g.Expect(err).NotTo(HaveOccurred())
	runningPod(t, l, "etcd-0")
	g.Expect(m.AddEtcdMember(wcl, "etcd-0", cc.etcdCA, cc.etcdCAKey)).To(Succeed())
	g.Expect(m.AddAPIServer(wcl, "kube-apiserver-0", cc.ca, cc.caKey)).To(Succeed())
	return l, cc
}

// clientAs is a client-go clientset for a certificate of the cluster CA, without client-side
// retries of 429s (client-go retries them by default).
func clientAs(t *testing.T, l *WorkloadClusterListener, cc clusterCerts, cn string, groups ...string) *kubernetes.Clientset {
	t.Helper()
	cfg := &rest.Config{Host: l.Address(), TLSClientConfig: rest.TLSClientConfig{CAData: pemCert(cc.ca)}, QPS: -1}
	cfg.CertData, cfg.KeyData = clientCert(t, cc, cn, groups, time.Hour)
	return kubernetes.NewForConfigOrDie(cfg)
}

// grantAll lets user do everything, through the cluster's RBAC objects (it is not in
// system:masters, so max-in-flight applies to it).
func grantAll(t *testing.T, l *WorkloadClusterListener, user string) {
	t.Helper()
	c, _ := l.GetClient()
	ctx := context.Background()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "all-" + user},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"*"}}}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "all-" + user},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}}}
	if err := c.Create(ctx, role); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, binding); err != nil {
		t.Fatal(err)
	}
}

func refusals(reason string) float64 { return testutil.ToFloat64(refusedTotal.WithLabelValues(reason)) }

// getConfigMaps lists configmaps once, without retries.
func getConfigMaps(cs *kubernetes.Clientset) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return cs.CoreV1().RESTClient().Get().Namespace("default").Resource("configmaps").MaxRetries(0).Do(ctx).Error()
}

func createConfigMap(cs *kubernetes.Clientset, name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}
	return cs.CoreV1().RESTClient().Post().Namespace("default").Resource("configmaps").Body(cm).MaxRetries(0).Do(ctx).Error()
}

// TestMaxRequestsInFlight: past --workload-max-requests-inflight (reads) or
// --workload-max-mutating-requests-inflight (writes) a request is answered 429 with
// Retry-After, as kube-apiserver's max-in-flight filter answers; system:masters is exempt.
func TestMaxRequestsInFlight(t *testing.T) {
	g := NewWithT(t)
	l, cc := limitedCluster(t, Limits{MaxRequestsInFlight: 2, MaxMutatingRequestsInFlight: 1})
	// Hold every configmaps request of user "limited" (not a watch).
	arrived, release := make(chan string, 10), make(chan struct{})
	hook := func(r *http.Request) {
		u, _ := request.UserFrom(r.Context())
		if strings.Contains(r.URL.Path, "/configmaps") && r.URL.Query().Get("watch") == "" && u != nil && u.GetName() == "limited" {
			arrived <- r.Method
			<-release
		}
	}
	testHookServing.Store(&hook)
	t.Cleanup(func() { testHookServing.Store(nil) })
	released := false
	t.Cleanup(func() {
		if !released {
			close(release)
		}
	})

	grantAll(t, l, "limited")
	limited := clientAs(t, l, cc, "limited")
	done := make(chan error, 10)
	for range 2 {
		go func() { done <- getConfigMaps(limited) }()
	}
	go func() { done <- createConfigMap(limited, "held") }()
	for range 3 {
		select {
		case <-arrived:
		case <-time.After(30 * time.Second):
			t.Fatal("requests did not arrive")
		}
	}

	readOnly, mutating := refusals(reasonInflightReadOnly), refusals(reasonInflightMutating)
	err := getConfigMaps(limited)
	g.Expect(apierrors.IsTooManyRequests(err)).To(BeTrue(), "got %v", err)
	seconds, ok := apierrors.SuggestsClientDelay(err)
	g.Expect(ok).To(BeTrue(), "no Retry-After")
	g.Expect(seconds).To(Equal(1))
	g.Expect(refusals(reasonInflightReadOnly) - readOnly).To(BeEquivalentTo(1))

	err = createConfigMap(limited, "refused")
	g.Expect(apierrors.IsTooManyRequests(err)).To(BeTrue(), "got %v", err)
	g.Expect(refusals(reasonInflightMutating) - mutating).To(BeEquivalentTo(1))

	// system:masters passes, as upstream; so do long-running requests (a watch).
	admin := clientAs(t, l, cc, "kubernetes-admin", "system:masters")
	g.Expect(getConfigMaps(admin)).To(Succeed())
	w, err := limited.CoreV1().ConfigMaps("default").Watch(context.Background(), metav1.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	w.Stop()

	close(release)
	released = true
	for range 3 {
		g.Expect(<-done).To(Succeed())
	}
	g.Expect(getConfigMaps(limited)).To(Succeed(), "the slots are free again")
}

// TestRequestTimeout: a request that is not long-running is answered 504 after
// --workload-request-timeout, as kube-apiserver's timeout filter answers; watches are not.
func TestRequestTimeout(t *testing.T) {
	g := NewWithT(t)
	l, cc := limitedCluster(t, Limits{RequestTimeout: 500 * time.Millisecond})
	admin := clientAs(t, l, cc, "kubernetes-admin", "system:masters")
	w, err := admin.CoreV1().ConfigMaps("default").Watch(context.Background(), metav1.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	defer w.Stop()

	// A slow etcd (an injected latency far past the timeout).
	g.Expect(l.SetFaults(context.Background(), &Faults{Latency: etcd.Latency{Base: time.Hour}})).To(Succeed())
	before := refusals(reasonRequestTimeout)
	err = getConfigMaps(admin)
	g.Expect(apierrors.IsTimeout(err)).To(BeTrue(), "got %v", err)
	g.Expect(refusals(reasonRequestTimeout) - before).To(BeEquivalentTo(1))

	// A write whose handler ignores its context (a stalled disk): the filter answers.
	g.Expect(l.SetFaults(context.Background(), nil)).To(Succeed())
	release := make(chan struct{})
	hook := func(r *http.Request) {
		if strings.Contains(r.URL.Path, "/configmaps") && r.Method == http.MethodPost {
			<-release
		}
	}
	testHookServing.Store(&hook)
	t.Cleanup(func() { testHookServing.Store(nil); close(release) })
	before = refusals(reasonRequestTimeout)
	_, err = admin.CoreV1().ConfigMaps("default").Create(context.Background(),
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "stalled"}}, metav1.CreateOptions{})
	g.Expect(apierrors.IsTimeout(err)).To(BeTrue(), "got %v", err)
	g.Expect(refusals(reasonRequestTimeout) - before).To(BeEquivalentTo(1))

	// The watch opened before outlived the timeout and still delivers.
	c, _ := l.GetClient()
	g.Expect(c.Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after", Namespace: "default"}})).To(Succeed())
	g.Eventually(w.ResultChan(), 10*time.Second).Should(Receive())
}

// TestMaxConnectionsPerListener: past --workload-max-connections-per-listener a connection with a
// client certificate is closed once its handshake completed, and its place is free again once one
// closes; connections without a client certificate have a quarter of it to themselves;
// system:masters and etcd clients are not limited.
func TestMaxConnectionsPerListener(t *testing.T) {
	g := NewWithT(t)
	l, cc := limitedCluster(t, Limits{MaxConnectionsPerListener: 4}) // 1 anonymous
	someone := keyPair(t, cc.ca, cc.caKey, "someone")
	admin := keyPair(t, cc.ca, cc.caKey, "kubernetes-admin", "system:masters")
	etcdClient := keyPair(t, cc.etcdCA, cc.etcdCAKey, "kube-etcd-healthcheck-client")
	dial := func(sni string, cert *tls.Certificate) *tls.Conn {
		c, err := dialListener(t, l, sni, cert, "h2")
		g.Expect(err).NotTo(HaveOccurred())
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	var open []*tls.Conn
	for range 4 {
		c := dial("", &someone)
		g.Expect(serves(c)).To(BeTrue())
		open = append(open, c)
	}
	before := refusals(reasonConnections)
	g.Expect(serves(dial("", &someone))).To(BeFalse(), "a fifth connection")
	g.Expect(refusals(reasonConnections) - before).To(BeEquivalentTo(1))

	before = refusals(reasonAnonymousConnections)
	g.Expect(serves(dial("", nil))).To(BeTrue(), "anonymous connections are counted apart")
	g.Expect(serves(dial("", nil))).To(BeFalse(), "a second anonymous connection")
	g.Expect(refusals(reasonAnonymousConnections) - before).To(BeEquivalentTo(1))

	for range 3 {
		g.Expect(serves(dial("", &admin))).To(BeTrue(), "system:masters is not limited")
		_, err := memberList(grpcOver(t, dial("etcd-0", &etcdClient)))
		g.Expect(err).NotTo(HaveOccurred(), "etcd clients are not limited")
	}

	_ = open[1].Close()
	g.Eventually(func() bool { return serves(dial("", &someone)) }, 10*time.Second, 50*time.Millisecond).Should(BeTrue())
}

// serves reports whether a request on tc is answered (/healthz, which anyone may read).
func serves(tc *tls.Conn) bool {
	resp, err := oneConn(tc).Get("https://listener/healthz")
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// TestMaxWatchesPerCluster: past --workload-max-watches-per-cluster a watch is answered 429,
// and its slot is free again once one ends; system:masters is exempt and not counted, as
// upstream's API Priority and Fairness exempts it.
func TestMaxWatchesPerCluster(t *testing.T) {
	g := NewWithT(t)
	l, cc := limitedCluster(t, Limits{MaxWatchesPerCluster: 2})
	grantAll(t, l, "limited")
	limited := clientAs(t, l, cc, "limited")
	admin := clientAs(t, l, cc, "kubernetes-admin", "system:masters")
	watch := func(cs *kubernetes.Clientset) (interface{ Stop() }, error) {
		return cs.CoreV1().RESTClient().Get().Namespace("default").Resource("configmaps").Param("watch", "true").MaxRetries(0).Watch(context.Background())
	}
	var open []interface{ Stop() }
	t.Cleanup(func() {
		for _, w := range open {
			w.Stop()
		}
	})
	for range 3 {
		w, err := watch(admin)
		g.Expect(err).NotTo(HaveOccurred(), "system:masters past the limit")
		open = append(open, w)
	}
	var limitedWatches []interface{ Stop() }
	for range 2 {
		w, err := watch(limited)
		g.Expect(err).NotTo(HaveOccurred(), "masters' watches take no slot")
		limitedWatches = append(limitedWatches, w)
	}
	open = append(open, limitedWatches...)
	before := refusals(reasonWatches)
	_, err := watch(limited)
	g.Expect(apierrors.IsTooManyRequests(err)).To(BeTrue(), "got %v", err)
	g.Expect(err.Error()).To(ContainSubstring("Too many watches on this cluster (at most 2)"))
	seconds, _ := apierrors.SuggestsClientDelay(err)
	g.Expect(seconds).To(Equal(1))
	g.Expect(refusals(reasonWatches) - before).To(BeEquivalentTo(1))
	g.Expect(getConfigMaps(limited)).To(Succeed(), "other requests pass")
	w, err := watch(admin)
	g.Expect(err).NotTo(HaveOccurred(), "system:masters with the slots full")
	open = append(open, w)

	limitedWatches[0].Stop()
	g.Eventually(func() error {
		w, err := watch(limited)
		if err == nil {
			open = append(open, w)
		}
		return err
	}, 10*time.Second, 50*time.Millisecond).Should(Succeed())
}

// TestWatchWriteTimeout: a watch whose client stopped reading is ended once an event could not
// be written for --workload-watch-write-timeout, and frees its slot: over HTTP/1.1 (the
// connection's buffers fill) and over HTTP/2 with client-go (a watch nobody reads fills its
// stream's flow-control window).
func TestWatchWriteTimeout(t *testing.T) {
	readerless := map[string]func(t *testing.T, l *WorkloadClusterListener, cc clusterCerts){
		"HTTP/1.1": func(t *testing.T, l *WorkloadClusterListener, cc clusterCerts) {
			g := NewWithT(t)
			limited := keyPair(t, cc.ca, cc.caKey, "limited")
			c, err := dialListener(t, l, "", &limited)
			g.Expect(err).NotTo(HaveOccurred())
			t.Cleanup(func() { _ = c.Close() })
			_, err = fmt.Fprintf(c, "GET /api/v1/namespaces/default/configmaps?watch=true HTTP/1.1\r\nHost: listener\r\n\r\n")
			g.Expect(err).NotTo(HaveOccurred())
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
		},
		"HTTP/2, client-go": func(t *testing.T, l *WorkloadClusterListener, cc clusterCerts) {
			g := NewWithT(t)
			w, err := clientAs(t, l, cc, "limited").CoreV1().ConfigMaps("default").Watch(context.Background(), metav1.ListOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			t.Cleanup(w.Stop) // its ResultChan is never read
		},
	}
	for name, open := range readerless {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			l, cc := limitedCluster(t, Limits{MaxWatchesPerCluster: 1, WatchWriteTimeout: 300 * time.Millisecond})
			grantAll(t, l, "limited") // system:masters' watches take no slot
			open(t, l, cc)
			cs := clientAs(t, l, cc, "limited")
			watch := func() error {
				w, err := cs.CoreV1().RESTClient().Get().Namespace("default").Resource("configmaps").Param("watch", "true").MaxRetries(0).Watch(context.Background())
				if err == nil {
					w.Stop()
				}
				return err
			}
			g.Expect(apierrors.IsTooManyRequests(watch())).To(BeTrue(), "the reader-less watch holds the only slot")

			// Events far larger than what the connection buffers, until a write blocks.
			before := refusals(reasonWatchWriteTimeout)
			kc, _ := l.GetClient()
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "big", Namespace: "default"}, Data: map[string]string{"v": strings.Repeat("x", 512<<10)}}
			g.Expect(kc.Create(context.Background(), cm)).To(Succeed())
			g.Eventually(func() float64 {
				cm.Data["n"] = fmt.Sprint(time.Now().UnixNano())
				g.Expect(kc.Update(context.Background(), cm)).To(Succeed())
				return refusals(reasonWatchWriteTimeout) - before
			}, 30*time.Second, 20*time.Millisecond).Should(BeEquivalentTo(1))
			g.Eventually(watch, 10*time.Second, 50*time.Millisecond).Should(Succeed(), "the slot is free again")
		})
	}
}

// spdyConn upgrades a port-forward to pod (client-go's SPDY dialer, as kubectl's fallback).
func spdyConn(t *testing.T, l *WorkloadClusterListener, cc clusterCerts, pod string) httpstream.Connection {
	t.Helper()
	cfg := capiRESTConfig(t, "limits", l, cc)
	rt, upgrader, err := spdy.RoundTripperFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	req := kubernetes.NewForConfigOrDie(cfg).CoreV1().RESTClient().Post().Namespace(metav1.NamespaceSystem).Resource("pods").Name(pod).SubResource("portforward")
	conn, _, err := spdy.NewDialer(upgrader, &http.Client{Transport: rt}, http.MethodPost, req.URL()).Dial(portforward.ProtocolV1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// forwardPair opens the error and data streams of one forwarded connection to port.
func forwardPair(t *testing.T, conn httpstream.Connection, port int, id string) (errs, data httpstream.Stream) {
	t.Helper()
	h := http.Header{}
	h.Set(corev1.PortHeader, fmt.Sprint(port))
	h.Set(corev1.PortForwardRequestIDHeader, id)
	h.Set(corev1.StreamType, corev1.StreamTypeError)
	errs, err := conn.CreateStream(h)
	if err != nil {
		t.Fatalf("error stream %s: %v", id, err)
	}
	_ = errs.Close() // we never write to it
	h.Set(corev1.StreamType, corev1.StreamTypeData)
	if data, err = conn.CreateStream(h); err != nil {
		t.Fatalf("data stream %s: %v", id, err)
	}
	return errs, data
}

// streamConn is KCP's proxy.Conn whose Close ends only its stream: proxy.Conn's Close, and its
// deadlines when they expire, end the whole port-forward connection, which KCP opens for one
// stream (tls.Conn's Close sets a write deadline).
type streamConn struct {
	net.Conn
	stream httpstream.Stream
}

func (c streamConn) Close() error                     { return c.stream.Reset() }
func (c streamConn) SetDeadline(time.Time) error      { return nil }
func (c streamConn) SetReadDeadline(time.Time) error  { return nil }
func (c streamConn) SetWriteDeadline(time.Time) error { return nil }

// TestMaxPortForwardStreams: past --workload-max-port-forward-streams a port-forward connection
// refuses a stream on its error stream, as a failed forward is reported, and forwards again once
// one ends; a WebSocket asking for more ports is refused.
func TestMaxPortForwardStreams(t *testing.T) {
	g := NewWithT(t)
	l, cc := limitedCluster(t, Limits{MaxPortForwardStreams: 1})
	etcdClient := keyPair(t, cc.etcdCA, cc.etcdCAKey, "kube-etcd-healthcheck-client")
	conn := spdyConn(t, l, cc, "etcd-0")
	// A forwarded stream carries a TLS connection to the member.
	tunnel := func(id string) (*tls.Conn, httpstream.Stream, error) {
		_, data := forwardPair(t, conn, EtcdClientPort, id)
		c, err := dialTLS(t, streamConn{proxy.NewConn(conn, data), data}, "etcd-0", &etcdClient, "h2")
		return c, data, err
	}

	first, firstData, err := tunnel("0")
	g.Expect(err).NotTo(HaveOccurred())
	_, err = memberList(grpcOver(t, first))
	g.Expect(err).NotTo(HaveOccurred())

	before := refusals(reasonPortForwardStreams)
	errs, _ := forwardPair(t, conn, EtcdClientPort, "1")
	msg, err := io.ReadAll(errs)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(msg)).To(Equal("error forwarding port 2379 to pod kube-system/etcd-0: too many port-forward streams on this connection (at most 1)"))
	g.Expect(refusals(reasonPortForwardStreams) - before).To(BeEquivalentTo(1))

	_ = firstData.Reset()
	n := 1
	g.Eventually(func() error {
		n++
		c, data, err := tunnel(fmt.Sprint(n))
		if err == nil {
			_, err = memberList(grpcOver(t, c))
			_ = data.Reset()
		}
		return err
	}, 10*time.Second, 50*time.Millisecond).Should(Succeed(), "the stream's slot is free again")

	// The WebSocket channel protocol names its ports up front.
	tlsCfg := &tls.Config{RootCAs: pool(cc.ca), Certificates: []tls.Certificate{keyPair(t, cc.ca, cc.caKey, "kubernetes-admin", "system:masters")}}
	d := gwebsocket.Dialer{TLSClientConfig: tlsCfg, Subprotocols: []string{"v4.channel.k8s.io"}, HandshakeTimeout: 10 * time.Second}
	u := "wss://" + l.HostPort() + "/api/v1/namespaces/kube-system/pods/etcd-0/portforward?ports=2379,2379"
	before = refusals(reasonPortForwardStreams)
	g.Expect(refusedUpgrade(t, d, u)).To(ContainSubstring("too many ports: 2, at most 1 on one connection"))
	g.Expect(refusals(reasonPortForwardStreams) - before).To(BeEquivalentTo(1))
}

// refusedUpgrade dials u expecting the upgrade refused with 400, and returns the response body.
func refusedUpgrade(t *testing.T, d gwebsocket.Dialer, u string) string {
	t.Helper()
	ws, resp, err := d.Dial(u, nil)
	if err == nil {
		_ = ws.Close()
		t.Fatalf("the upgrade of %s was accepted", u)
	}
	if resp == nil {
		t.Fatalf("no response from %s: %v", u, err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("%s: %d %s", u, resp.StatusCode, body)
	}
	return string(body)
}

// TestWebSocketChannelPortsFitTheProtocol: without a stream limit, the channel protocol still
// refuses more ports than its one-byte channel numbers can tell apart (past 127 ports, channel
// 2i wraps onto another port's or the close signal; past 40 in the base64 variant).
func TestWebSocketChannelPortsFitTheProtocol(t *testing.T) {
	g := NewWithT(t)
	l, cc := limitedCluster(t, Limits{})
	tlsCfg := &tls.Config{RootCAs: pool(cc.ca), Certificates: []tls.Certificate{keyPair(t, cc.ca, cc.caKey, "kubernetes-admin", "system:masters")}}
	d := gwebsocket.Dialer{TLSClientConfig: tlsCfg, Subprotocols: []string{"v4.channel.k8s.io"}, HandshakeTimeout: 10 * time.Second}
	ports := func(n int) string { return strings.TrimSuffix(strings.Repeat("2379,", n), ",") }
	base := "wss://" + l.HostPort() + "/api/v1/namespaces/kube-system/pods/etcd-0/portforward?ports="

	g.Expect(refusedUpgrade(t, d, base+ports(portforward.MaxChannelPorts+1))).To(ContainSubstring("at most 127"))

	ws, resp, err := d.Dial(base+ports(portforward.MaxChannelPorts), nil)
	g.Expect(err).NotTo(HaveOccurred())
	_ = resp.Body.Close()
	defer ws.Close()
	// The last port's channels are 252 and 253: each starts with the port number.
	seen := map[byte]bool{}
	_ = ws.SetReadDeadline(time.Now().Add(20 * time.Second))
	for len(seen) < 2*portforward.MaxChannelPorts {
		_, msg, err := ws.ReadMessage()
		g.Expect(err).NotTo(HaveOccurred())
		seen[msg[0]] = true
	}
	g.Expect(seen).To(HaveKey(byte(253)))

	// The base64 variant sends channel n as the character '0'+n, one byte only up to 79.
	d.Subprotocols = []string{"v4.base64.channel.k8s.io"}
	g.Expect(refusedUpgrade(t, d, base+ports(portforward.MaxBase64ChannelPorts+1))).To(ContainSubstring("at most 40"))
	b64, resp, err := d.Dial(base+ports(portforward.MaxBase64ChannelPorts), nil)
	g.Expect(err).NotTo(HaveOccurred())
	_ = resp.Body.Close()
	defer b64.Close()
	seen = map[byte]bool{}
	_ = b64.SetReadDeadline(time.Now().Add(20 * time.Second))
	for len(seen) < 2*portforward.MaxBase64ChannelPorts {
		_, msg, err := b64.ReadMessage()
		g.Expect(err).NotTo(HaveOccurred())
		seen[msg[0]-'0'] = true
	}
	g.Expect(seen).To(HaveKey(byte(79)))
}
