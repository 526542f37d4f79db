// Package etcdtest serves an etcd.Server over real TLS on 127.0.0.1 for tests
// and benchmarks, with certificates made on the fly.
package etcdtest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/etcd"
)

// PKI is a throwaway etcd CA with one serving and one client certificate.
type PKI struct {
	caDER  []byte
	CAPool *x509.CertPool
	Server tls.Certificate
	Client tls.Certificate
}

// NewPKI makes a CA, a serving certificate for the given DNS names (plus
// localhost and 127.0.0.1) and a client certificate, all ECDSA P-256.
func NewPKI(tb testing.TB, dnsNames ...string) *PKI {
	tb.Helper()
	caKey := newKey(tb)
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "etcd-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		tb.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		tb.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)

	leaf := func(serial int64, cn string, usage x509.ExtKeyUsage, dns []string, ips []net.IP) tls.Certificate {
		key := newKey(tb)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: cn},
			NotBefore:    time.Now().Add(-time.Hour),
			NotAfter:     time.Now().Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
			DNSNames:     dns,
			IPAddresses:  ips,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			tb.Fatal(err)
		}
		return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	}
	return &PKI{
		caDER:  caDER,
		CAPool: pool,
		Server: leaf(2, "etcd", x509.ExtKeyUsageServerAuth, append([]string{"localhost"}, dnsNames...), []net.IP{net.IPv4(127, 0, 0, 1)}),
		Client: leaf(3, "kube-etcd-healthcheck-client", x509.ExtKeyUsageClientAuth, nil, nil),
	}
}

func newKey(tb testing.TB) *ecdsa.PrivateKey {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	return key
}

// ServerTLS requires client certificates from the CA, like etcd with
// --client-cert-auth.
func (p *PKI) ServerTLS() *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{p.Server},
		ClientCAs:    p.CAPool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS12,
	}
}

// ClientTLS is what KCP builds from the <cluster>-etcd secret; the server name
// comes from the endpoint the etcd client dials.
func (p *PKI) ClientTLS() *tls.Config {
	return &tls.Config{
		RootCAs:      p.CAPool,
		Certificates: []tls.Certificate{p.Client},
		MinVersion:   tls.VersionTLS12,
	}
}

// WriteClientFiles writes the CA and the client certificate and key as PEM
// files into dir, for etcdctl's --cacert, --cert and --key.
func (p *PKI) WriteClientFiles(tb testing.TB, dir string) (ca, cert, key string) {
	tb.Helper()
	keyDER, err := x509.MarshalPKCS8PrivateKey(p.Client.PrivateKey)
	if err != nil {
		tb.Fatal(err)
	}
	files := map[string][]byte{
		"ca.crt":     pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: p.caDER}),
		"client.crt": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: p.Client.Certificate[0]}),
		"client.key": pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			tb.Fatal(err)
		}
	}
	return filepath.Join(dir, "ca.crt"), filepath.Join(dir, "client.crt"), filepath.Join(dir, "client.key")
}

// ServeMember serves s on a 127.0.0.1 port of its own whose every call is
// answered by the member in pod podName, whatever the TLS server name: how the
// mux routes a connection that arrived through a port-forward to that pod.
func ServeMember(tb testing.TB, s *etcd.Server, p *PKI, podName string) string {
	tb.Helper()
	return serve(tb, s, grpc.Creds(credentials.NewTLS(p.ServerTLS())),
		grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			return h(etcd.ContextWithMember(ctx, podName), req)
		}))
}

// Serve serves s with grpc's own TLS on a 127.0.0.1 port until the test ends
// and returns the address. The answering member is the TLS server name.
func Serve(tb testing.TB, s *etcd.Server, p *PKI) string {
	tb.Helper()
	return serve(tb, s, grpc.Creds(credentials.NewTLS(p.ServerTLS())))
}

func serve(tb testing.TB, s *etcd.Server, opts ...grpc.ServerOption) string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	g := grpc.NewServer(opts...)
	s.Register(g)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = g.Serve(lis)
	}()
	tb.Cleanup(func() {
		g.Stop()
		<-done
	})
	return lis.Addr().String()
}
