package mux

import (
	"net"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// An AddAPIServer that comes while the last API server's removal is stopping the listener is not
// lost: once both are done, the cluster has an API server and serves.
func TestAddAPIServerDuringTheLastRemoval(t *testing.T) {
	g := NewWithT(t)
	m := newTestMux(t)
	cc := newClusterCerts(t)
	l, err := m.InitWorkloadClusterListener("ns/race")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(m.AddAPIServer("ns/race", "kube-apiserver-old", cc.ca, cc.caKey)).To(Succeed())

	added := make(chan error, 1)
	testHookBeforeLastStop = func() {
		// The new machine's API server registers between the decision to stop and the stop.
		go func() { added <- m.AddAPIServer("ns/race", "kube-apiserver-new", cc.ca, cc.caKey) }()
		time.Sleep(100 * time.Millisecond)
	}
	t.Cleanup(func() { testHookBeforeLastStop = nil })
	g.Expect(m.DeleteAPIServer("ns/race", "kube-apiserver-old")).To(Succeed())
	g.Expect(<-added).To(Succeed())
	testHookBeforeLastStop = nil

	g.Expect(m.HasAPIServer("ns/race", "kube-apiserver-new")).To(BeTrue())
	g.Eventually(func() error {
		c, err := net.DialTimeout("tcp", l.HostPort(), time.Second)
		if err == nil {
			_ = c.Close()
		}
		return err
	}, 5*time.Second, 50*time.Millisecond).Should(Succeed(), "registered but not serving")
}
