package mux

import (
	"container/list"
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"k8s.io/apiserver/pkg/authentication/user"

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
	release func() // frees the connection's place under the listener's limit; called once by Close
	// places is the mux's process-wide bound whose place the connection holds, nil for none;
	// Close frees it.
	places *connectionCap
	once   sync.Once
	// pending is the connection's place among those in their handshake (listenerConns.mu).
	pending *list.Element

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
		if c.places != nil {
			c.places.release()
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

// handshakeTimeout closes a connection that has not completed its TLS handshake by then. A client
// completes it in a few round trips; kube-apiserver gives it its header read timeout (32 s), long
// enough for silent sockets to pile up. A variable for tests.
var handshakeTimeout = 10 * time.Second

// listenerConns accepts a listener's connections: its accept loop is the listener's one
// goroutine. It runs every accepted connection's handshake in a goroutine of its own and hands the
// server (serve) only connections that completed it, each a *tls.Conn over a *conn (the handshake
// records its decision there); that goroutine then serves the connection. What the handshake
// proved decides which of the listener's limits the connection counts against (docs/limits.md):
//
//   - a system:masters client certificate, or any etcd member's connection (its client
//     certificate is from the etcd CA, whose holders read and write the whole store): none, as
//     upstream exempts system:masters from its limits. Port-forward tunnels to etcd are these.
//   - another verified client certificate: max (0: no limit).
//   - no client certificate (anonymous): a quarter of max, counted apart, so that strangers
//     never take the places of authenticated clients.
//
// A connection past its limit is closed once its handshake completed. Before that, at most max
// connections are in their handshake at once: one more closes the one that has waited the
// longest, so silent sockets cannot hold file descriptors without bound, nor keep a client's
// handshake, which takes milliseconds, from completing. Every connection, whoever its client,
// first takes a place under the process-wide bound (places, Limits.MaxConnections), which keeps
// the process's open files for its listeners.
type listenerConns struct {
	net.Listener
	config                   *tls.Config
	max, maxAnonymous        int
	timeout                  time.Duration // handshakeTimeout
	authenticated, anonymous atomic.Int64
	places                   *connectionCap // nil: no process-wide bound
	serve                    func(*tls.Conn)

	done chan struct{} // closed with the listener
	stop sync.Once

	mu          sync.Mutex
	handshaking list.List // of *conn, oldest first
}

// newListenerConns starts accepting ln's connections; serve gets those that completed their
// handshake and were admitted, in a goroutine of their own. The accept loop ends once ln is
// closed (Close), and then closes ended.
func newListenerConns(ln net.Listener, config *tls.Config, limit int, places *connectionCap, serve func(*tls.Conn), ended chan<- struct{}) *listenerConns {
	lc := &listenerConns{Listener: ln, config: config, max: limit, timeout: handshakeTimeout, places: places, serve: serve, done: make(chan struct{})}
	if limit > 0 {
		lc.maxAnonymous = max(limit/4, 1)
	}
	go func() {
		defer close(ended)
		lc.acceptLoop()
	}()
	return lc
}

func (lc *listenerConns) Close() error {
	err := lc.Listener.Close()
	lc.shut()
	return err
}

// shut closes the connections still in their handshake; those that complete it later are closed.
func (lc *listenerConns) shut() {
	lc.stop.Do(func() {
		close(lc.done)
		lc.mu.Lock()
		defer lc.mu.Unlock()
		for e := lc.handshaking.Front(); e != nil; e = e.Next() {
			c := e.Value.(*conn)
			c.pending = nil
			_ = c.Close()
		}
		lc.handshaking.Init()
	})
}

// acceptLoop accepts until the listener is closed; other errors (out of file descriptors) are
// retried after a pause, as http.Server does. A connection waits for its place under the
// process-wide bound here, at most connectionWait (then it is closed), so the listener's next
// connections wait in the kernel's queue meanwhile, as they do while http.Server pauses.
func (lc *listenerConns) acceptLoop() {
	var pause time.Duration
	for {
		nc, err := lc.Listener.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				lc.shut()
				return
			}
			pause = min(max(2*pause, 5*time.Millisecond), time.Second)
			select {
			case <-time.After(pause):
				continue
			case <-lc.done:
				return
			}
		}
		pause = 0
		c := &conn{Conn: nc}
		if lc.places != nil {
			if !lc.places.acquire(connectionWait, lc.done) {
				refused(reasonProcessConnections)
				_ = nc.Close()
				continue
			}
			c.places = lc.places
		}
		if lc.startHandshake(c) {
			go lc.handshake(c)
		}
	}
}

// startHandshake makes room for c among the connections in their handshake.
func (lc *listenerConns) startHandshake(c *conn) bool {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	select {
	case <-lc.done:
		_ = c.Close()
		return false
	default:
	}
	if lc.max > 0 && lc.handshaking.Len() >= lc.max {
		oldest := lc.handshaking.Remove(lc.handshaking.Front()).(*conn)
		oldest.pending = nil
		refused(reasonHandshakes)
		_ = oldest.Close()
	}
	c.pending = lc.handshaking.PushBack(c)
	return true
}

// endHandshake reports whether c was still in its handshake (not closed to make room).
func (lc *listenerConns) endHandshake(c *conn) bool {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if c.pending == nil {
		return false
	}
	lc.handshaking.Remove(c.pending)
	c.pending = nil
	return true
}

func (lc *listenerConns) handshake(c *conn) {
	_ = c.SetDeadline(time.Now().Add(lc.timeout))
	tc := tls.Server(c, lc.config)
	err := tc.Handshake()
	if !lc.endHandshake(c) {
		return // closed meanwhile
	}
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			refused(reasonHandshakeTimeout)
		}
		// As http.Server: a plain HTTP request gets a plain answer.
		var rh tls.RecordHeaderError
		if errors.As(err, &rh) && rh.Conn != nil && looksLikeHTTP(rh.RecordHeader) {
			_, _ = io.WriteString(rh.Conn, "HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n")
		}
		_ = c.Close()
		return
	}
	_ = c.SetDeadline(time.Time{})
	if !lc.admit(c, tc.ConnectionState()) {
		_ = tc.Close()
		return
	}
	select {
	case <-lc.done:
		_ = tc.Close()
	default:
		lc.serve(tc)
	}
}

// serveConn serves tc with srv in a goroutine of srv's, as srv.Serve serves what its listener
// accepts: srv has no listener of its own (the listener's accept loop is listenerConns'), and
// Shutdown and Close end tc as they end any connection of srv's. Once srv is shut down, tc is
// closed instead.
func serveConn(srv *http.Server, tc *tls.Conn) {
	_ = srv.Serve(&oneConnListener{conn: tc, addr: tc.LocalAddr()})
}

// oneConnListener is a listener that accepts one connection, then ends srv.Serve (errServed): Serve
// starts the connection's goroutine and returns. Serve calls its methods from one goroutine.
type oneConnListener struct {
	conn net.Conn
	addr net.Addr
}

var errServed = errors.New("connection handed to the server")

func (o *oneConnListener) Accept() (net.Conn, error) {
	if o.conn == nil {
		return nil, errServed
	}
	c := o.conn
	o.conn = nil
	return c, nil
}

// Close closes the connection if Serve did not take it (the server was shut down).
func (o *oneConnListener) Close() error {
	if o.conn == nil {
		return nil
	}
	c := o.conn
	o.conn = nil
	return c.Close()
}

func (o *oneConnListener) Addr() net.Addr { return o.addr }

// admit takes c's place in the limit its handshake puts it under (listenerConns).
func (lc *listenerConns) admit(c *conn, cs tls.ConnectionState) bool {
	var open *atomic.Int64
	var limit int
	var reason string
	switch {
	case c.etcdMember != "" || isMasters(cs):
		return true
	case len(cs.VerifiedChains) > 0:
		open, limit, reason = &lc.authenticated, lc.max, reasonConnections
	default:
		open, limit, reason = &lc.anonymous, lc.maxAnonymous, reasonAnonymousConnections
	}
	if limit <= 0 {
		return true
	}
	if open.Add(1) > int64(limit) {
		open.Add(-1)
		// Counted first: a client that sees the close finds it counted.
		refused(reason)
		return false
	}
	c.release = func() { open.Add(-1) }
	return true
}

// isMasters reports whether the connection's verified client certificate is in system:masters.
func isMasters(cs tls.ConnectionState) bool {
	return len(cs.VerifiedChains) > 0 && slices.Contains(cs.VerifiedChains[0][0].Subject.Organization, user.SystemPrivilegedGroup)
}

// looksLikeHTTP is http.Server's test of a TLS record header that is the start of an HTTP request.
func looksLikeHTTP(hdr [5]byte) bool {
	switch string(hdr[:]) {
	case "GET /", "HEAD ", "POST ", "PUT /", "OPTIO":
		return true
	}
	return false
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
	etcdSrv := l.etcd
	serving := l.srv != nil
	l.mu.Unlock()
	if !isMember || !current || !serving || etcdSrv == nil {
		// etcd's ErrGRPCStopped, as a trailers-only gRPC response.
		w.Header().Set("Content-Type", "application/grpc")
		w.Header().Set("Grpc-Status", strconv.Itoa(int(codes.Unavailable)))
		w.Header().Set("Grpc-Message", "etcdserver: server stopped")
		w.WriteHeader(http.StatusOK)
		return
	}
	ctx := etcd.ContextWithMember(etcd.ContextWithServer(r.Context(), etcdSrv), c.etcdMember)
	l.mux.etcdGRPC.ServeHTTP(w, r.WithContext(ctx))
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
