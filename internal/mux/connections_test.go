package mux

import (
	"crypto/tls"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// TestMaxConnections: past --workload-max-connections (across all listeners) a connection waits
// for a place, before its handshake, at most connectionWait, then is closed, whoever its client
// (system:masters too: the bound keeps the process's files); one that waits gets in as soon as
// another closes; a closed connection frees its place.
func TestMaxConnections(t *testing.T) {
	g := NewWithT(t)
	defer func(d time.Duration) { connectionWait = d }(connectionWait)
	connectionWait = 300 * time.Millisecond
	l, cc := limitedCluster(t, Limits{MaxConnections: 2})
	m := l.mux
	g.Expect(m.MaxConnections()).To(Equal(2))
	admin := keyPair(t, cc.ca, cc.caKey, "kubernetes-admin", "system:masters")
	dial := func() (*tls.Conn, error) {
		c, err := dialListener(t, l, "", &admin, "h2")
		if err == nil {
			t.Cleanup(func() { _ = c.Close() })
		}
		return c, err
	}
	var open []*tls.Conn
	for range 2 {
		c, err := dial()
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(serves(c)).To(BeTrue())
		open = append(open, c)
	}

	before := refusals(reasonProcessConnections)
	start := time.Now()
	_, err := dial()
	g.Expect(err).To(HaveOccurred(), "a third connection is closed before its handshake")
	g.Expect(time.Since(start)).To(And(BeNumerically(">=", 250*time.Millisecond), BeNumerically("<", 5*time.Second)), "after waiting connectionWait")
	g.Expect(refusals(reasonProcessConnections) - before).To(BeEquivalentTo(1))

	// One that waits gets the place of one that closes meanwhile.
	connectionWait = 5 * time.Second
	type result struct {
		c   *tls.Conn
		err error
	}
	waited := make(chan result, 1)
	go func() {
		c, err := dial()
		waited <- result{c, err}
	}()
	time.Sleep(200 * time.Millisecond)
	_ = open[0].Close()
	r := <-waited
	g.Expect(r.err).NotTo(HaveOccurred(), "the waiting connection takes the freed place")
	g.Expect(serves(r.c)).To(BeTrue())
	g.Expect(m.places.open.Load()).To(BeEquivalentTo(2))

	// Closed connections free their places, refused ones never took one.
	_ = open[1].Close()
	_ = r.c.Close()
	g.Eventually(func() int64 { return m.places.open.Load() }, 5*time.Second, 10*time.Millisecond).Should(BeZero())
}

// TestMaxConnectionsDefault: the default process-wide bound is the open file limit less one file
// per serving listener and reservedFiles; a negative value, or no known limit, turns it off.
func TestMaxConnectionsDefault(t *testing.T) {
	g := NewWithT(t)
	var serving atomic.Int64
	serving.Store(10000)
	g.Expect(newConnectionCap(0, 20000, &serving).limit()).To(BeEquivalentTo(20000 - 10000 - reservedFiles))
	serving.Store(2000)
	g.Expect(newConnectionCap(0, 20000, &serving).limit()).To(BeEquivalentTo(20000 - 2000 - reservedFiles))
	g.Expect(newConnectionCap(5, 20000, &serving).limit()).To(BeEquivalentTo(5))
	g.Expect(newConnectionCap(-1, 20000, &serving)).To(BeNil())
	g.Expect(newConnectionCap(0, 0, &serving)).To(BeNil())

	m := newTestMux(t)
	g.Expect(m.MaxConnections()).To(BeEquivalentTo(int(openFileLimit()) - reservedFiles))
}

// TestOneGoroutinePerListener: a serving listener with no connection costs one goroutine, its
// accept loop (its HTTP server has no listener, and so no goroutine, of its own).
func TestOneGoroutinePerListener(t *testing.T) {
	g := NewWithT(t)
	const clusters = 20
	m := newTestMux(t, WithPortRange(12970, 12999))
	cc := newClusterCerts(t)
	runtime.GC()
	before := runtime.NumGoroutine()
	for i := range clusters {
		name := fmt.Sprintf("ns/g%d", i)
		_, err := m.InitWorkloadClusterListener(name)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(m.AddAPIServer(name, "kube-apiserver-0", cc.ca, cc.caKey)).To(Succeed())
	}
	time.Sleep(100 * time.Millisecond)
	grown := runtime.NumGoroutine() - before
	t.Logf("%d goroutines for %d serving listeners", grown, clusters)
	g.Expect(grown).To(BeNumerically("<=", clusters+2))
	g.Expect(m.serving.Load()).To(BeEquivalentTo(clusters))
	g.Expect(m.Shutdown(t.Context())).To(Succeed())
	g.Expect(m.serving.Load()).To(BeZero())
}
