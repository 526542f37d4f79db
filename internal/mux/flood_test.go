package mux

import (
	"context"
	"errors"
	"io"
	"net"
	"runtime"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/cluster-api/controlplane/kubeadm/pkg/proxy"
)

// TestConnectionFloodLeavesMastersIn: strangers holding connections open against one cluster (TLS
// without a client certificate, and raw TCP that never sends a byte, more of each than the
// listener's connection limit) do not keep CAPI (CAPI's <cluster>-kubeconfig, system:masters)
// from listing nodes within 2 s, and hold little of the process's memory. With the default
// limits: the raw sockets fill the handshakes, the TLS ones the anonymous connections.
func TestConnectionFloodLeavesMastersIn(t *testing.T) {
	const raw, anonymous = 300, 300
	g := NewWithT(t)
	l, cc := limitedCluster(t, DefaultLimits())

	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)

	var held []net.Conn
	t.Cleanup(func() {
		for _, c := range held {
			_ = c.Close()
		}
	})
	anonymousBefore, handshakesBefore := refusals(reasonAnonymousConnections), refusals(reasonHandshakes)
	handshaken := 0
	for range anonymous {
		c, err := dialListener(t, l, "", nil, "http/1.1")
		if err == nil {
			handshaken++
			held = append(held, c)
		}
	}
	for range raw {
		c, err := net.DialTimeout("tcp", l.HostPort(), 5*time.Second)
		g.Expect(err).NotTo(HaveOccurred())
		held = append(held, c)
	}

	cs, err := kubernetes.NewForConfig(capiRESTConfig(t, "limits", l, cc))
	g.Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	_, err = cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	took := time.Since(start)
	g.Expect(err).NotTo(HaveOccurred(), "system:masters listing nodes during the flood")

	// The listener accepts and counts on its own time.
	g.Eventually(func() float64 { return refusals(reasonAnonymousConnections) - anonymousBefore }, 10*time.Second, 10*time.Millisecond).
		Should(BeNumerically(">=", anonymous-DefaultLimits().MaxConnectionsPerListener/4), "the anonymous connections are limited")
	g.Eventually(func() float64 { return refusals(reasonHandshakes) - handshakesBefore }, 10*time.Second, 10*time.Millisecond).
		Should(BeNumerically(">=", raw-DefaultLimits().MaxConnectionsPerListener), "the handshakes are limited")

	// KCP's etcd health check: a port-forward whose stream dials back into the listener.
	etcdClient := keyPair(t, cc.etcdCA, cc.etcdCAKey, "kube-etcd-healthcheck-client")
	tunnel := spdyConn(t, l, cc, "etcd-0")
	_, data := forwardPair(t, tunnel, EtcdClientPort, "0")
	tc, err := dialTLS(t, streamConn{proxy.NewConn(tunnel, data), data}, "etcd-0", &etcdClient, "h2")
	g.Expect(err).NotTo(HaveOccurred())
	_, err = memberList(grpcOver(t, tc))
	g.Expect(err).NotTo(HaveOccurred(), "a port-forward to etcd during the flood")
	// Clients with a certificate other than system:masters' have places of their own.
	someone := keyPair(t, cc.ca, cc.caKey, "someone")
	sc, err := dialListener(t, l, "", &someone, "h2")
	g.Expect(err).NotTo(HaveOccurred())
	defer sc.Close()
	g.Expect(serves(sc)).To(BeTrue(), "an authenticated client during the flood")

	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	grown := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("%d TLS handshakes completed of %d, %d raw sockets; masters listed nodes in %v; heap grew %.1f MiB",
		handshaken, anonymous, raw, took, float64(grown)/(1<<20))
	g.Expect(grown).To(BeNumerically("<", 50<<20), "heap growth during the flood")
}

// TestHandshakeTimeout: a connection that has not completed its TLS handshake within
// handshakeTimeout is closed; one that completed it is not.
func TestHandshakeTimeout(t *testing.T) {
	g := NewWithT(t)
	defer func(d time.Duration) { handshakeTimeout = d }(handshakeTimeout)
	handshakeTimeout = 300 * time.Millisecond
	l, cc := limitedCluster(t, DefaultLimits())
	admin := keyPair(t, cc.ca, cc.caKey, "kubernetes-admin", "system:masters")
	served, err := dialListener(t, l, "", &admin, "h2")
	g.Expect(err).NotTo(HaveOccurred())
	defer served.Close()

	before := refusals(reasonHandshakeTimeout)
	silent, err := net.DialTimeout("tcp", l.HostPort(), 5*time.Second)
	g.Expect(err).NotTo(HaveOccurred())
	defer silent.Close()
	start := time.Now()
	g.Expect(closedByServer(silent, 5*time.Second)).To(BeTrue())
	g.Expect(time.Since(start)).To(BeNumerically("<", 3*time.Second))
	g.Expect(refusals(reasonHandshakeTimeout) - before).To(BeEquivalentTo(1))
	g.Expect(serves(served)).To(BeTrue(), "a connection past its handshake keeps no deadline")

	// As http.Server, a plain HTTP request gets a plain answer.
	plain, err := net.DialTimeout("tcp", l.HostPort(), 5*time.Second)
	g.Expect(err).NotTo(HaveOccurred())
	defer plain.Close()
	_, err = io.WriteString(plain, "GET /healthz HTTP/1.1\r\nHost: listener\r\n\r\n")
	g.Expect(err).NotTo(HaveOccurred())
	_ = plain.SetReadDeadline(time.Now().Add(5 * time.Second))
	answer, _ := io.ReadAll(plain)
	g.Expect(string(answer)).To(HavePrefix("HTTP/1.0 400 Bad Request"))
}

// TestHandshakesInFlight: at most --workload-max-connections-per-listener connections are in their
// TLS handshake at once; one more closes the one that has waited the longest, so that silent
// sockets holding every place do not keep a client from completing its handshake.
func TestHandshakesInFlight(t *testing.T) {
	g := NewWithT(t)
	l, cc := limitedCluster(t, Limits{MaxConnectionsPerListener: 2})
	before := refusals(reasonHandshakes)
	var silent []net.Conn
	for range 3 {
		c, err := net.DialTimeout("tcp", l.HostPort(), 5*time.Second)
		g.Expect(err).NotTo(HaveOccurred())
		defer c.Close()
		silent = append(silent, c)
	}
	g.Expect(closedByServer(silent[0], 5*time.Second)).To(BeTrue(), "the oldest makes room")
	g.Expect(refusals(reasonHandshakes) - before).To(BeEquivalentTo(1))
	g.Expect(closedByServer(silent[2], 200*time.Millisecond)).To(BeFalse(), "the newest waits")

	admin := keyPair(t, cc.ca, cc.caKey, "kubernetes-admin", "system:masters")
	c, err := dialListener(t, l, "", &admin, "h2")
	g.Expect(err).NotTo(HaveOccurred())
	defer c.Close()
	g.Expect(serves(c)).To(BeTrue(), "a client among silent sockets")
	g.Expect(closedByServer(silent[1], 5*time.Second)).To(BeTrue(), "made room for the client")
}

// closedByServer reports whether the server closes c within d (c sends nothing).
func closedByServer(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return false
	}
	return err == io.EOF || err != nil
}
