package mux

import (
	"crypto/tls"
	"testing"

	. "github.com/onsi/gomega"
)

// TestTLSOptions: the listeners serve with the mux's TLSOptions (the manager's --tls-min-version,
// --tls-cipher-suites and --tls-curve-preferences), for the API server and the etcd members alike;
// without them, TLS 1.2 and up with Go's cipher suites and workloadCurves.
func TestTLSOptions(t *testing.T) {
	const wcl = "ns/tls"
	serve := func(t *testing.T, opts ...Option) (*WorkloadClusterListener, clusterCerts) {
		g := NewWithT(t)
		m := newTestMux(t, opts...)
		cc := newClusterCerts(t)
		l, err := m.InitWorkloadClusterListener(wcl)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(m.AddEtcdMember(wcl, "etcd-cp-0", cc.etcdCA, cc.etcdCAKey)).To(Succeed())
		g.Expect(m.AddAPIServer(wcl, "kube-apiserver-cp-0", cc.ca, cc.caKey)).To(Succeed())
		return l, cc
	}
	// handshake dials the listener as the API server (serverName "") or as an etcd member.
	handshake := func(l *WorkloadClusterListener, cc clusterCerts, serverName string, cfg *tls.Config) (tls.ConnectionState, error) {
		cfg.RootCAs, cfg.ServerName = pool(cc.ca), "kubernetes"
		if serverName != "" {
			certPEM, keyPEM := clientCertFrom(t, cc.etcdCA, cc.etcdCAKey, "kube-etcd-healthcheck-client")
			cert, err := tls.X509KeyPair(certPEM, keyPEM)
			if err != nil {
				t.Fatal(err)
			}
			cfg.RootCAs, cfg.ServerName, cfg.Certificates = pool(cc.etcdCA), serverName, []tls.Certificate{cert}
		}
		conn, err := tls.Dial("tcp", l.HostPort(), cfg)
		if err != nil {
			return tls.ConnectionState{}, err
		}
		defer conn.Close()
		return conn.ConnectionState(), nil
	}
	const suite = tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
	const otherSuite = tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256

	t.Run("defaults", func(t *testing.T) {
		g := NewWithT(t)
		l, cc := serve(t)
		for _, sni := range []string{"", "etcd-cp-0"} {
			_, err := handshake(l, cc, sni, &tls.Config{MaxVersion: tls.VersionTLS11})
			g.Expect(err).To(HaveOccurred(), "TLS 1.1 to %q", sni)
			st, err := handshake(l, cc, sni, &tls.Config{MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{otherSuite}})
			g.Expect(err).NotTo(HaveOccurred(), sni)
			g.Expect(st.Version).To(BeEquivalentTo(tls.VersionTLS12))
			st, err = handshake(l, cc, sni, &tls.Config{})
			g.Expect(err).NotTo(HaveOccurred(), sni)
			g.Expect(st.Version).To(BeEquivalentTo(tls.VersionTLS13))
			g.Expect(st.CurveID).To(Equal(tls.X25519))
		}
	})

	t.Run("minimum version, cipher suites and curves from the options", func(t *testing.T) {
		g := NewWithT(t)
		l12, cc12 := serve(t, WithTLSOptions(TLSOptions{CipherSuites: []uint16{suite}, CurvePreferences: []tls.CurveID{tls.CurveP256}}))
		l13, cc13 := serve(t, WithTLSOptions(TLSOptions{MinVersion: tls.VersionTLS13}))
		for _, sni := range []string{"", "etcd-cp-0"} {
			_, err := handshake(l12, cc12, sni, &tls.Config{MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{otherSuite}})
			g.Expect(err).To(HaveOccurred(), "a cipher suite outside --tls-cipher-suites to %q", sni)
			st, err := handshake(l12, cc12, sni, &tls.Config{MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{otherSuite, suite}})
			g.Expect(err).NotTo(HaveOccurred(), sni)
			g.Expect(st.CipherSuite).To(Equal(suite))
			g.Expect(st.CurveID).To(Equal(tls.CurveP256))

			_, err = handshake(l13, cc13, sni, &tls.Config{MaxVersion: tls.VersionTLS12})
			g.Expect(err).To(HaveOccurred(), "TLS 1.2 below --tls-min-version to %q", sni)
			st, err = handshake(l13, cc13, sni, &tls.Config{})
			g.Expect(err).NotTo(HaveOccurred(), sni)
			g.Expect(st.Version).To(BeEquivalentTo(tls.VersionTLS13))
		}
	})
}
