package mux

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// BenchmarkListenerGET is one GET of a namespace through a listener's whole filter chain (request
// info, authentication, authorization, limits, metrics, faults, handler) in process, without TLS
// or network: what the filters cost on the hot path when no fault is set.
func BenchmarkListenerGET(b *testing.B) {
	m, err := NewWorkloadClustersMux(store.NewManager(), benchHost, WithListenerAddresses(benchHost), WithPortRange(3990, 3999))
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = m.Shutdown(context.Background()) }()
	cc := newClusterCerts(b)
	l, _ := m.InitWorkloadClusterListener("ns/get")
	if err := m.AddAPIServer("ns/get", "kube-apiserver-n", cc.ca, cc.caKey); err != nil {
		b.Fatal(err)
	}
	certPEM, keyPEM := clientCert(b, cc, "kubernetes-admin", []string{"system:masters"}, time.Hour)
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		b.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		b.Fatal(err)
	}
	// The connection's handshake decision, as tlsConfigFor records it for the API server.
	apiConn := &conn{decided: true}
	l.mu.Lock()
	h := l.srv.Handler
	apiConn.caGen.Store(l.caGen)
	l.mu.Unlock()
	ctx := context.WithValue(context.Background(), connKey{}, apiConn)
	state := &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{leaf, cc.ca}}}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r := httptest.NewRequestWithContext(ctx, http.MethodGet, "/api/v1/namespaces/default", nil)
		r.TLS = state
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			b.Fatalf("GET: %d %s", w.Code, w.Body.String())
		}
	}
}
