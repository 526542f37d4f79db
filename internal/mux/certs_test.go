package mux

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"net"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// TestIssuedCertKeepsNoParsedLeaf: a listener's certificates hold the DER and the key that
// crypto/tls serves and their expiry, not the parsed certificate (about 3 KiB each, for the
// listener's life); a real TLS client still verifies the served chain, and the renewal check reads
// the expiry that was issued.
func TestIssuedCertKeepsNoParsedLeaf(t *testing.T) {
	g := NewWithT(t)
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	g.Expect(err).NotTo(HaveOccurred())
	ca := selfSignedCA(t, "kubernetes", caKey)

	cert, err := newAPIServerCert(ca, caKey, "127.0.0.1")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cert.Leaf).To(BeNil(), "the parsed certificate is kept")
	parsed, err := x509.ParseCertificate(cert.Certificate.Certificate[0])
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cert.notAfter).To(Equal(parsed.NotAfter))
	g.Expect(needsRenewal(cert, time.Now())).To(BeFalse())
	g.Expect(needsRenewal(cert, parsed.NotAfter.Add(-renewBefore).Add(time.Second))).To(BeTrue())
	g.Expect(needsRenewal(nil, time.Now())).To(BeTrue())

	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert.Certificate}, MinVersion: tls.VersionTLS12})
	g.Expect(err).NotTo(HaveOccurred())
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			_ = c.(*tls.Conn).Handshake()
			_ = c.Close()
		}
	}()
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", ln.Addr().String(),
		&tls.Config{RootCAs: roots, ServerName: "kubernetes.default.svc", MinVersion: tls.VersionTLS12})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(conn.ConnectionState().PeerCertificates[0].Subject.CommonName).To(Equal("kube-apiserver"))
	g.Expect(conn.Close()).To(Succeed())
}
