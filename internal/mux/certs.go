package mux

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"slices"
	"time"

	"sigs.k8s.io/cluster-api/util/certs"
)

// renewBefore is how long before expiry a serving certificate is replaced.
const renewBefore = 30 * 24 * time.Hour

// newLeaf issues a certificate signed by ca. Leaf keys are ECDSA P-256: RSA key generation costs
// tens of milliseconds per key, which adds up to minutes when thousands of clusters start.
func newLeaf(ca *x509.Certificate, caKey crypto.Signer, cfg certs.Config) (*issuedCert, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating key: %w", err)
	}
	cert, err := cfg.NewSignedCert(key, ca, caKey)
	if err != nil {
		return nil, err
	}
	return &issuedCert{Certificate: tls.Certificate{Certificate: [][]byte{cert.Raw}, PrivateKey: key}, notAfter: cert.NotAfter}, nil
}

// issuedCert is a certificate a listener issued: what crypto/tls serves (the DER and the key) and
// the expiry its renewal reads. The parsed certificate is not kept (tls.Certificate.Leaf stays
// nil; crypto/tls needs it only to choose among several certificates): with its names and
// extensions it was about 3 KiB per certificate, 12 KiB per cluster of a fleet's live heap.
type issuedCert struct {
	tls.Certificate
	notAfter time.Time
}

// heldKey is a CA's private key as a listener keeps it between the certificates it issues, which
// is rarely (the admin certificate, a serving certificate's renewal): PKCS #8 DER, parsed again
// for each. A parsed RSA key holds its precomputed values beside it, 4.5 KB of heap per key
// against 1.2 KB of DER. A key PKCS #8 cannot hold (a crypto.Signer of an HSM's) is kept as given.
type heldKey struct {
	der    []byte
	opaque crypto.Signer
}

func holdKey(key crypto.Signer) heldKey {
	if der, err := x509.MarshalPKCS8PrivateKey(key); err == nil {
		return heldKey{der: der}
	}
	return heldKey{opaque: key}
}

// signer returns the key to sign with.
func (k heldKey) signer() (crypto.Signer, error) {
	if k.der == nil {
		if k.opaque == nil {
			return nil, fmt.Errorf("no CA key")
		}
		return k.opaque, nil
	}
	key, err := x509.ParsePKCS8PrivateKey(k.der)
	if err != nil {
		return nil, fmt.Errorf("parsing the CA key: %w", err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("the CA key (%T) cannot sign", key)
	}
	return signer, nil
}

// newAPIServerCert issues the API server's serving certificate (CN kube-apiserver).
func newAPIServerCert(ca *x509.Certificate, caKey crypto.Signer, advertisedHost string) (*issuedCert, error) {
	alt := certs.AltNames{
		DNSNames: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		IPs:      []net.IP{net.ParseIP("127.0.0.1"), net.IPv6loopback},
	}
	if ip := net.ParseIP(advertisedHost); ip != nil {
		// Loopback addresses other than 127.0.0.1 too: listener addresses (WithListenerAddresses)
		// are often 127.0.0.2 and on.
		if !slices.ContainsFunc(alt.IPs, ip.Equal) {
			alt.IPs = append(alt.IPs, ip)
		}
	} else if advertisedHost != "" && advertisedHost != "localhost" {
		alt.DNSNames = append(alt.DNSNames, advertisedHost)
	}
	return newLeaf(ca, caKey, certs.Config{
		CommonName: "kube-apiserver",
		AltNames:   alt,
		Usages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
}

// newEtcdServingCert issues an etcd member's serving certificate: CN and SAN are the pod name, the
// SNI clients use through port-forward.
func newEtcdServingCert(ca *x509.Certificate, caKey crypto.Signer, podName string) (*issuedCert, error) {
	return newLeaf(ca, caKey, certs.Config{
		CommonName: podName,
		AltNames: certs.AltNames{
			DNSNames: []string{podName, "localhost"},
			IPs:      []net.IP{net.ParseIP("127.0.0.1"), net.IPv6loopback},
		},
		Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	})
}

// newAdminClientCert issues a client certificate in system:masters, used by RESTConfig.
func newAdminClientCert(ca *x509.Certificate, caKey crypto.Signer) (*issuedCert, error) {
	return newLeaf(ca, caKey, certs.Config{
		CommonName:   "goofy-admin",
		Organization: []string{"system:masters"},
		Usages:       []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
}

// needsRenewal reports whether cert is missing or expires soon.
func needsRenewal(cert *issuedCert, now time.Time) bool {
	return cert == nil || now.Add(renewBefore).After(cert.notAfter)
}

// sameCA reports whether two CA certificates are the same certificate.
func sameCA(a, b *x509.Certificate) bool {
	return a != nil && b != nil && a.Equal(b)
}
