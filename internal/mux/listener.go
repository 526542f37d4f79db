package mux

import (
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	genericfilters "k8s.io/apiserver/pkg/endpoints/filters"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/apiserver"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/etcd"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/portforward"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// Well-known ports of the simulated control-plane pods, reachable through port-forward.
const (
	EtcdClientPort    = 2379
	APIServerBindPort = 6443
)

// WorkloadClusterListener is one workload cluster's TLS endpoint.
type WorkloadClusterListener struct {
	mux  *WorkloadClustersMux
	name string
	// addr and port are the listener's endpoint (addr empty: the mux's one bind address), host
	// the host it advertises.
	addr    string
	port    int
	host    string
	cluster *store.Cluster

	// lifecycle serializes the decisions to start and stop serving with their execution: a stop
	// decided when the last API server went away finishes before an AddAPIServer that came
	// meanwhile decides whether to start (else that one saw the old server still up, did not
	// start, and the stop left it registered but never serving). Taken before mu.
	lifecycle   sync.Mutex
	mu          sync.Mutex
	ca          *x509.Certificate
	caKey       heldKey // for the admin and renewed serving certificates; the etcd CA's key is not kept
	caPool      *x509.CertPool
	servingCert *issuedCert
	adminCert   *issuedCert
	etcdCA      *x509.Certificate
	etcdPool    *x509.CertPool
	apiServers  map[string]struct{}
	etcdCerts   map[string]*issuedCert // by etcd pod name (the SNI)
	etcd        *etcd.Server
	// caGen and etcdGen count the cluster and etcd CAs this listener trusted: a connection
	// verified with an older one is checked again (conn.caGen).
	caGen, etcdGen uint64

	// forwarded maps the local address of connections dialSelf opened for a port-forward to
	// an etcd pod to that pod's name: clients such as etcdctl behind `kubectl port-forward` send
	// SNI "localhost" (or none), so the tunnel tells which member they mean.
	forwarded sync.Map

	// watches counts the open watches (Limits.MaxWatchesPerCluster).
	watches atomic.Int64

	// faults is what the API server's fault filter reads: nil unless a fault of its own is set.
	faults atomic.Pointer[Faults]
	// faultsSet are all the faults set (SetFaults), unreachable holds serving off.
	faultsSet   *Faults
	unreachable bool
	// retired: the listener is stopped for good (its workload cluster deleted, the mux shut
	// down); SetFaults does not start it again.
	retired bool

	// Serving state: set while at least one API server is registered and the cluster is not
	// unreachable.
	srv         *http.Server
	conns       *listenerConns
	portForward *portforward.Handler
	serveDone   chan struct{} // closed when the accept loop has ended
}

func newListener(m *WorkloadClustersMux, name string, ep endpoint, cluster *store.Cluster) *WorkloadClusterListener {
	return &WorkloadClusterListener{
		mux:        m,
		name:       name,
		addr:       ep.addr,
		port:       ep.port,
		host:       m.advertised(ep),
		cluster:    cluster,
		apiServers: map[string]struct{}{},
		etcdCerts:  map[string]*issuedCert{},
	}
}

// Host is the advertised host: the listener's address with listener addresses
// (WithListenerAddresses), else the mux's host.
func (l *WorkloadClusterListener) Host() string { return l.host }

// BindAddress is the address the listener binds to.
func (l *WorkloadClusterListener) BindAddress() string { return l.mux.bindAddr(l.endpoint()) }

func (l *WorkloadClusterListener) endpoint() endpoint { return endpoint{addr: l.addr, port: l.port} }

// Port is the listener's port.
func (l *WorkloadClusterListener) Port() int { return l.port }

// HostPort is host:port, as used in the cluster's endpoint.
func (l *WorkloadClusterListener) HostPort() string {
	return net.JoinHostPort(l.host, strconv.Itoa(l.port))
}

// Address is the https URL of the workload cluster's API server.
func (l *WorkloadClusterListener) Address() string { return "https://" + l.HostPort() }

// Store is the workload cluster's object store.
func (l *WorkloadClusterListener) Store() *store.Cluster { return l.cluster }

// GetClient returns a controller-runtime client straight on the workload cluster's store: the
// reconcilers write Nodes and Pods through it without a TLS round trip, and without
// managed-fields tracking (store.WithoutManagedFields): nothing reads ownership of the
// simulator's own writes, and writes over HTTP are still tracked in full.
func (l *WorkloadClusterListener) GetClient() (client.Client, error) {
	return l.cluster.Client(store.WithoutManagedFields(), store.WithoutSyncWait()), nil
}

// RESTConfig returns a client configuration for the listener with an admin (system:masters) client
// certificate signed by the cluster CA. It needs the CA, so it fails before the first AddAPIServer.
func (l *WorkloadClusterListener) RESTConfig() (*rest.Config, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ca == nil {
		return nil, fmt.Errorf("workload cluster %s has no API server yet", l.name)
	}
	if needsRenewal(l.adminCert, time.Now()) {
		caKey, err := l.caKey.signer()
		if err != nil {
			return nil, err
		}
		cert, err := newAdminClientCert(l.ca, caKey)
		if err != nil {
			return nil, err
		}
		l.adminCert = cert
	}
	keyPEM, err := pemKey(l.adminCert.PrivateKey)
	if err != nil {
		return nil, err
	}
	return &rest.Config{
		Host: l.Address(),
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   pemCert(l.ca),
			CertData: pemCertDER(l.adminCert.Certificate.Certificate[0]),
			KeyData:  keyPEM,
		},
		QPS:   -1, // a simulated server needs no client-side throttling
		Burst: -1,
	}, nil
}

func (l *WorkloadClusterListener) info() ListenerInfo {
	l.mu.Lock()
	defer l.mu.Unlock()
	info := ListenerInfo{Cluster: l.name, Address: l.Address(), Serving: l.srv != nil}
	for p := range l.apiServers {
		info.APIServers = append(info.APIServers, p)
	}
	for p := range l.etcdCerts {
		info.EtcdMembers = append(info.EtcdMembers, p)
	}
	sort.Strings(info.APIServers)
	sort.Strings(info.EtcdMembers)
	return info
}

func (l *WorkloadClusterListener) addAPIServer(podName string, ca *x509.Certificate, caKey crypto.Signer) error {
	if ca == nil || caKey == nil {
		return errors.New("AddAPIServer needs the cluster CA certificate and key")
	}
	l.lifecycle.Lock()
	defer l.lifecycle.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	if sharesKey(ca, l.etcdCA) {
		return fmt.Errorf("the cluster CA of %s has the etcd CA's key: certificates of one would be accepted by the other", l.name)
	}
	if l.ca != nil && !sameCA(l.ca, ca) {
		// The CA was rotated (or the cluster re-created): trust the new one, re-issue certificates.
		l.servingCert, l.adminCert = nil, nil
	}
	if !sameCA(l.ca, ca) {
		l.caGen++
	}
	l.ca, l.caKey = ca, holdKey(caKey)
	l.caPool = x509.NewCertPool()
	l.caPool.AddCert(ca)
	if needsRenewal(l.servingCert, time.Now()) {
		cert, err := newAPIServerCert(ca, caKey, l.host)
		if err != nil {
			return fmt.Errorf("issuing the API server certificate of %s: %w", l.name, err)
		}
		l.servingCert = cert
	}
	l.apiServers[podName] = struct{}{}
	if l.srv == nil && !l.unreachable {
		if err := l.startLocked(); err != nil {
			delete(l.apiServers, podName)
			return err
		}
	}
	return nil
}

func (l *WorkloadClusterListener) deleteAPIServer(podName string) {
	l.lifecycle.Lock()
	defer l.lifecycle.Unlock()
	l.mu.Lock()
	delete(l.apiServers, podName)
	last := len(l.apiServers) == 0
	l.mu.Unlock()
	if last {
		if testHookBeforeLastStop != nil {
			testHookBeforeLastStop()
		}
		l.stop(context.Background())
	}
}

// testHookBeforeLastStop runs between deciding to stop and stopping (tests of the race).
var testHookBeforeLastStop func()

func (l *WorkloadClusterListener) hasAPIServer(podName string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.apiServers[podName]
	return ok
}

func (l *WorkloadClusterListener) addEtcdMember(podName string, ca *x509.Certificate, caKey crypto.Signer) error {
	if ca == nil || caKey == nil {
		return errors.New("AddEtcdMember needs the etcd CA certificate and key")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if sharesKey(ca, l.ca) {
		return fmt.Errorf("the etcd CA of %s has the cluster CA's key: certificates of one would be accepted by the other", l.name)
	}
	if l.etcdCA != nil && !sameCA(l.etcdCA, ca) {
		l.etcdCerts = map[string]*issuedCert{}
	}
	if !sameCA(l.etcdCA, ca) {
		l.etcdGen++
	}
	l.etcdCA = ca
	l.etcdPool = x509.NewCertPool()
	l.etcdPool.AddCert(ca)
	if l.etcd == nil {
		srv, err := etcd.NewServer(context.Background(), l.cluster.Client(), l.name)
		if err != nil {
			return fmt.Errorf("starting the etcd of %s: %w", l.name, err)
		}
		l.etcd = srv
		if err := l.applyEtcdFaultsLocked(context.Background()); err != nil {
			return err
		}
	}
	if needsRenewal(l.etcdCerts[podName], time.Now()) {
		cert, err := newEtcdServingCert(ca, caKey, podName)
		if err != nil {
			return fmt.Errorf("issuing the etcd certificate of %s: %w", podName, err)
		}
		l.etcdCerts[podName] = cert
	}
	if _, err := l.etcd.AddMember(context.Background(), podName); err != nil {
		return fmt.Errorf("adding etcd member %s: %w", podName, err)
	}
	return nil
}

func (l *WorkloadClusterListener) deleteEtcdMember(podName string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.etcdCerts, podName)
	if l.etcd == nil {
		return nil
	}
	return l.etcd.RemoveMember(context.Background(), podName)
}

func (l *WorkloadClusterListener) hasEtcdMember(podName string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.etcdCerts[podName]
	return ok && l.etcd != nil && l.etcd.HasMember(podName)
}

// startLocked binds the port and serves. l.mu is held.
func (l *WorkloadClusterListener) startLocked() error {
	ln, err := net.Listen("tcp", net.JoinHostPort(l.BindAddress(), strconv.Itoa(l.port)))
	if err != nil {
		return fmt.Errorf("%w: %s of %s: %w", ErrPortUnavailable, l.mux.describe(l.endpoint()), l.name, err)
	}
	pf, err := portforward.NewHandler(portforward.Options{
		FindPod: l.findPod,
		Lookup:  l.lookupPodPort,
		Dial:    l.dialSelf,

		MaxStreams: l.mux.limits.MaxPortForwardStreams,
		Refused:    func() { refused(reasonPortForwardStreams) },
	})
	if err != nil {
		_ = ln.Close()
		return err
	}
	l.portForward = pf
	if l.etcd == nil {
		srv, err := etcd.NewServer(context.Background(), l.cluster.Client(), l.name)
		if err != nil {
			_ = ln.Close()
			return fmt.Errorf("starting the etcd of %s: %w", l.name, err)
		}
		l.etcd = srv
		if err := l.applyEtcdFaultsLocked(context.Background()); err != nil {
			_ = ln.Close()
			return err
		}
	}
	api := apiserver.NewHandler(l.cluster, apiserver.Options{PortForward: pf, Logger: l.mux.log.WithName("apiserver")})
	l.srv = &http.Server{
		Handler:           l.routes(api),
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       5 * time.Minute,
		ConnContext:       connContext,
		ErrorLog:          discardLog,
		HTTP2:             &http.HTTP2Config{MaxEncoderHeaderTableSize: noHeaderTable},
	}
	done := make(chan struct{})
	l.serveDone = done
	srv := l.srv
	// The accept loop is the listener's one goroutine: each connection is served by a goroutine
	// of its own once its handshake completed (listenerConns).
	l.conns = newListenerConns(ln, &tls.Config{GetConfigForClient: l.tlsConfigFor}, l.mux.limits.MaxConnectionsPerListener,
		l.mux.places, func(tc *tls.Conn) { serveConn(srv, tc) }, done)
	l.mux.serving.Add(1)
	listenersOpen.Inc()
	l.mux.log.V(1).Info("Serving workload cluster", "cluster", l.name, "address", l.HostPort())
	return nil
}

// retire stops the listener for good (see retired), waiting for in-flight requests until ctx
// ends. l.lifecycle is held.
func (l *WorkloadClusterListener) retire(ctx context.Context) {
	l.mu.Lock()
	l.retired = true
	l.mu.Unlock()
	l.stop(ctx)
}

// stop stops serving (if serving), waiting for in-flight requests until ctx ends.
func (l *WorkloadClusterListener) stop(ctx context.Context) {
	l.mu.Lock()
	srv, conns, pf, done := l.srv, l.conns, l.portForward, l.serveDone
	l.srv, l.conns, l.portForward, l.serveDone = nil, nil, nil, nil
	l.mu.Unlock()
	if srv == nil {
		return
	}
	// No new connection: the server has no listener of its own to close (listenerConns).
	_ = conns.Close()
	// Long-lived requests (watches, port-forwards) would hold a graceful shutdown until ctx ends:
	// give them a short grace period, then close connections.
	shutdownCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
	if err := srv.Shutdown(shutdownCtx); err != nil {
		_ = srv.Close()
	}
	cancel()
	pf.Close()
	<-done
	l.mux.serving.Add(-1)
	listenersOpen.Dec()
	l.mux.log.V(1).Info("Stopped serving workload cluster", "cluster", l.name)
}

// workloadCurves are the key exchanges the simulated endpoints offer unless TLSOptions say
// otherwise: classic ECDHE only. Go's default puts the post-quantum hybrid X25519MLKEM768 first,
// whose ML-KEM half was a fifth of every handshake's CPU at scale (KCP opens two TLS connections
// per etcd health check); a simulated cluster's traffic needs no protection against future
// quantum computers.
var workloadCurves = []tls.CurveID{tls.X25519, tls.CurveP256}

// tlsConfigFor decides what a connection is for, once (conn): a port-forward tunnel dialSelf
// opened to an etcd pod, or a server name that names an etcd member, is that member's
// connection: its serving certificate, a client certificate from the etcd CA required, and
// only etcd behind it. A tunnel to an etcd pod whose member is gone is refused. Anything else is
// the API server's connection: its certificate, client certificates from the cluster CA accepted
// (none makes the request anonymous, as on kubeadm's kube-apiserver; one from another CA fails
// the handshake), and never etcd. Versions, cipher suites and key exchanges are the mux's
// TLSOptions.
func (l *WorkloadClusterListener) tlsConfigFor(hello *tls.ClientHelloInfo) (*tls.Config, error) {
	c, _ := hello.Conn.(*conn)
	if c == nil {
		return nil, errors.New("connection without a listener's decision")
	}
	if c.config != nil {
		return c.config, nil // decided once, for the connection's lifetime
	}
	cfg, err := l.decide(c, hello)
	c.config = cfg
	return cfg, err
}

// decide makes tlsConfigFor's decision for c.
func (l *WorkloadClusterListener) decide(c *conn, hello *tls.ClientHelloInfo) (*tls.Config, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	member := ""
	if pod, ok := l.forwarded.Load(hello.Conn.RemoteAddr().String()); ok {
		member = pod.(string)
	} else if _, ok := l.etcdCerts[hello.ServerName]; ok {
		member = hello.ServerName
	}
	if member != "" {
		cert, ok := l.etcdCerts[member]
		if !ok {
			return nil, fmt.Errorf("etcd member %s of %s is gone", member, l.name)
		}
		c.decided, c.etcdMember = true, member
		c.caGen.Store(l.etcdGen)
		return l.mux.tls.apply(&tls.Config{
			Certificates: []tls.Certificate{cert.Certificate},
			ClientAuth:   tls.RequireAndVerifyClientCert,
			ClientCAs:    l.etcdPool,
			NextProtos:   []string{"h2"},
		}), nil
	}
	if l.servingCert == nil {
		return nil, fmt.Errorf("workload cluster %s has no API server", l.name)
	}
	if needsRenewal(l.servingCert, time.Now()) {
		if caKey, err := l.caKey.signer(); err == nil {
			if cert, err := newAPIServerCert(l.ca, caKey, l.host); err == nil {
				l.servingCert = cert
			}
		}
	}
	c.decided = true
	c.caGen.Store(l.caGen)
	return l.mux.tls.apply(&tls.Config{
		Certificates: []tls.Certificate{l.servingCert.Certificate},
		ClientAuth:   tls.VerifyClientCertIfGiven,
		ClientCAs:    l.caPool,
		NextProtos:   []string{"h2", "http/1.1"},
	}), nil
}

// routes sends every request to what its connection's handshake decided (tlsConfigFor): an etcd
// member's connection to the fake etcd, the API server's to the API server's filter chain.
func (l *WorkloadClusterListener) routes(api http.Handler) http.Handler {
	// kube-apiserver's order: the request is parsed once (genericfilters.WithRequestInfo), then
	// authenticated, impersonation applied and authorized (auth.go); metrics and the API server
	// read the parsed RequestInfo from the context. The limits (limits.go) come behind
	// authorization, as kube-apiserver's max-in-flight does (system:masters is exempt), and in
	// front of the faults, whose latency holds a request's slot and counts against its timeout.
	authenticated := genericfilters.WithRequestInfo(authenticate(l.cluster, instrument(l.withLimits(l.withFaults, api))), requestInfoFactory)
	authenticated = genericfilters.WithRequestReceivedTimestamp(authenticated)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := connFrom(r.Context())
		w = smallFrames(w, r)
		switch {
		case c == nil || !c.decided:
			http.Error(w, "connection without a listener's decision", http.StatusInternalServerError)
		case c.etcdMember != "":
			l.serveEtcd(c, w, r)
		default:
			authenticated.ServeHTTP(w, l.currentChains(c, r))
		}
	})
}

var podsGVR = corev1.SchemeGroupVersion.WithResource("pods")

func (l *WorkloadClusterListener) findPod(_ context.Context, namespace, name string) error {
	_, err := l.cluster.Get(podsGVR, namespace, name)
	return err
}

// lookupPodPort accepts a forward when the pod runs and serves the port: a declared container
// port, or the well-known port of a registered etcd member or API server (static pods of kubeadm
// use host networking and declare no ports).
func (l *WorkloadClusterListener) lookupPodPort(_ context.Context, namespace, name string, port int32) error {
	obj, err := l.cluster.Get(podsGVR, namespace, name)
	if err != nil {
		return err
	}
	pod := obj.(*corev1.Pod)
	if pod.Status.Phase != corev1.PodRunning {
		return fmt.Errorf("pod %s/%s is not running (phase %q)", namespace, name, pod.Status.Phase)
	}
	switch {
	case port == EtcdClientPort && l.hasEtcdMember(name):
		return nil
	case port == APIServerBindPort && l.hasAPIServer(name):
		return nil
	}
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			if p.ContainerPort == port {
				return nil
			}
		}
	}
	return apierrors.NewBadRequest(fmt.Sprintf("pod %s/%s does not serve port %d", namespace, name, port))
}

// dialSelf connects a forwarded stream back into this listener; the client's TLS (with the pod
// name as server name) flows through it unchanged and picks the member's certificate.
func (l *WorkloadClusterListener) dialSelf(ctx context.Context, _, pod string, port int32) (net.Conn, error) {
	host := l.BindAddress()
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(l.port)))
	if err != nil || port != EtcdClientPort {
		return conn, err
	}
	key := conn.LocalAddr().String()
	l.forwarded.Store(key, pod)
	return &forwardedConn{Conn: conn, release: func() { l.forwarded.Delete(key) }}, nil
}

// forwardedConn forgets its port-forward tag when closed.
type forwardedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *forwardedConn) Close() error {
	c.once.Do(c.release)
	return c.Conn.Close()
}
