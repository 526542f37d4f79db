package mux

import (
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/codes"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/etcd"
)

// conn is one accepted connection of a workload cluster's listener. Its TLS handshake decides,
// once, what it is for: an etcd member (the server name, or the port-forward tunnel it came
// through, named a member that existed then) or the API server. The decision fixes the serving
// certificate, the CA a client certificate must chain to, and where every request on it goes,
// for the connection's lifetime: an etcd connection never reaches the API server, an API server
// connection never reaches etcd, whatever is added or removed meanwhile.
type conn struct {
	net.Conn
	release func() // frees the connection's slot of the listener's limit; called once by Close
	once    sync.Once

	// Set by tlsConfigFor during the handshake, read only by requests, which the server reads
	// after the handshake.
	decided    bool
	config     *tls.Config // what the handshake was given
	etcdMember string      // the member's pod name, "" for the API server
	// caGen is the generation of the CA (the cluster CA, or the etcd CA for a member) the
	// handshake verified the client certificate with. A request after a rotation verifies the
	// certificate again, against the CA of the moment (see currentChains).
	caGen atomic.Uint64
}

func (c *conn) Close() error {
	c.once.Do(func() {
		if c.release != nil {
			c.release()
		}
	})
	return c.Conn.Close()
}

type connKey struct{}

// connContext is the http.Server's ConnContext: requests find their connection's decision in
// their context.
func connContext(ctx context.Context, nc net.Conn) context.Context {
	if tc, ok := nc.(*tls.Conn); ok {
		if c, ok := tc.NetConn().(*conn); ok {
			return context.WithValue(ctx, connKey{}, c)
		}
	}
	return ctx
}

func connFrom(ctx context.Context) *conn {
	c, _ := ctx.Value(connKey{}).(*conn)
	return c
}

// listenerConns wraps the listener's net.Listener so that every accepted connection is a *conn
// (the handshake records its decision there) and at most max are open at once (0: no limit). A
// connection beyond the limit is closed at once, before its handshake costs anything.
type listenerConns struct {
	net.Listener
	max  int
	open atomic.Int64
}

func (ln *listenerConns) Accept() (net.Conn, error) {
	for {
		nc, err := ln.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if ln.max > 0 && ln.open.Add(1) > int64(ln.max) {
			ln.open.Add(-1)
			// Counted first: a client that sees the close finds it counted.
			refused(reasonConnections)
			_ = nc.Close()
			continue
		}
		c := &conn{Conn: nc}
		if ln.max > 0 {
			c.release = func() { ln.open.Add(-1) }
		}
		return c, nil
	}
}

// sharesKey reports whether two CA certificates have the same public key: a certificate signed
// by one verifies against the other whenever their subjects match.
func sharesKey(a, b *x509.Certificate) bool {
	if a == nil || b == nil {
		return false
	}
	pk, ok := a.PublicKey.(interface{ Equal(crypto.PublicKey) bool })
	return ok && pk.Equal(b.PublicKey)
}

// serveEtcd serves a request on an etcd member's connection: gRPC goes to the fake etcd as that
// member; anything else is not found, as on etcd's client port. Once the member is gone or the
// etcd CA rotated, the connection's calls fail as calls to a stopped etcd do.
func (l *WorkloadClusterListener) serveEtcd(c *conn, w http.ResponseWriter, r *http.Request) {
	if r.ProtoMajor != 2 || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
		http.NotFound(w, r)
		return
	}
	l.mu.Lock()
	_, isMember := l.etcdCerts[c.etcdMember]
	current := c.caGen.Load() == l.etcdGen
	grpcSrv := l.grpcSrv
	l.mu.Unlock()
	if !isMember || !current || grpcSrv == nil {
		// etcd's ErrGRPCStopped, as a trailers-only gRPC response.
		w.Header().Set("Content-Type", "application/grpc")
		w.Header().Set("Grpc-Status", strconv.Itoa(int(codes.Unavailable)))
		w.Header().Set("Grpc-Message", "etcdserver: server stopped")
		w.WriteHeader(http.StatusOK)
		return
	}
	grpcSrv.ServeHTTP(w, r.WithContext(etcd.ContextWithMember(r.Context(), c.etcdMember)))
}

// currentChains returns r with the TLS state its client certificate has against the cluster CA
// of the moment. The handshake verified the certificate against the CA of its time; after a
// rotation, a request on an older connection has its certificate verified again, as
// kube-apiserver's x509 authenticator verifies every request against its current CA bundle: one
// that no longer chains loses its verified chain and gets a 401 (authenticate).
func (l *WorkloadClusterListener) currentChains(c *conn, r *http.Request) *http.Request {
	l.mu.Lock()
	gen, roots := l.caGen, l.caPool
	l.mu.Unlock()
	if c.caGen.Load() == gen || r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return r
	}
	state := *r.TLS
	state.VerifiedChains = nil
	intermediates := x509.NewCertPool()
	for _, cert := range state.PeerCertificates[1:] {
		intermediates.AddCert(cert)
	}
	chains, err := state.PeerCertificates[0].Verify(x509.VerifyOptions{
		Roots: roots, Intermediates: intermediates, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err == nil {
		state.VerifiedChains = chains
	}
	r = r.WithContext(r.Context())
	r.TLS = &state
	return r
}
