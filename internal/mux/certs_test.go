package mux

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
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

// opaqueSigner is a crypto.Signer that PKCS #8 cannot hold (as an HSM's would be).
type opaqueSigner struct{ crypto.Signer }

// TestHeldCAKeySignsAsGiven: the cluster CA's key (kubeadm's RSA, as CAPI generates it, or any
// other) is held as PKCS #8 DER, not as the parsed key, and what it signs later verifies against
// the CA; a signer PKCS #8 cannot hold is kept as it was given.
func TestHeldCAKeySignsAsGiven(t *testing.T) {
	g := NewWithT(t)
	cc := newClusterCerts(t)
	_, isRSA := cc.caKey.(*rsa.PrivateKey)
	g.Expect(isRSA).To(BeTrue(), "CAPI's cluster CA key is RSA")
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	g.Expect(err).NotTo(HaveOccurred())

	for _, tc := range []struct {
		name    string
		ca      *x509.Certificate
		key     crypto.Signer
		encoded bool
	}{
		{"RSA", cc.ca, cc.caKey, true},
		{"ECDSA", selfSignedCA(t, "ecdsa-ca", ecKey), ecKey, true},
		{"opaque", cc.ca, opaqueSigner{cc.caKey}, false},
	} {
		held := holdKey(tc.key)
		g.Expect(held.der != nil).To(Equal(tc.encoded), tc.name)
		g.Expect(held.opaque == nil).To(Equal(tc.encoded), tc.name)
		signer, err := held.signer()
		g.Expect(err).NotTo(HaveOccurred(), tc.name)
		g.Expect(signer.Public()).To(Equal(tc.key.Public()), tc.name)

		issued, err := newAdminClientCert(tc.ca, signer)
		g.Expect(err).NotTo(HaveOccurred(), tc.name)
		leaf, err := x509.ParseCertificate(issued.Certificate.Certificate[0])
		g.Expect(err).NotTo(HaveOccurred(), tc.name)
		g.Expect(leaf.CheckSignatureFrom(tc.ca)).To(Succeed(), tc.name)
	}
	_, err = heldKey{}.signer()
	g.Expect(err).To(MatchError(ContainSubstring("no CA key")))
}
