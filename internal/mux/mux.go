// Package mux serves many simulated workload clusters from one process. Every workload cluster gets
// one TLS port (a WorkloadClusterListener) that answers both as its kube-apiserver and as its etcd
// members: the TLS server name picks the certificate and the trust root, the content type picks the
// handler (gRPC to the fake etcd, everything else to the API server handler).
package mux

import (
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/goofy-capi/cluster-api-provider-goofy/api/v1alpha1"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// Default port range for workload cluster listeners. CAPD's in-memory backend uses 20000-30000;
// run both side by side with distinct ranges.
const (
	DefaultPortMin = 20000
	DefaultPortMax = 29999
)

// ErrPortRangeExhausted is returned when every port of the range is in use or not bindable.
var ErrPortRangeExhausted = errors.New("no free port left in the listener port range")

// ClusterKey names a workload cluster in the mux and the store: "<namespace>/<cluster name>".
func ClusterKey(namespace, clusterName string) string { return namespace + "/" + clusterName }

// Option configures a WorkloadClustersMux.
type Option func(*WorkloadClustersMux)

// WithPortRange sets the inclusive range ports are taken from.
func WithPortRange(min, max int) Option {
	return func(m *WorkloadClustersMux) { m.portMin, m.portMax = min, max }
}

// WithBindAddress sets the address listeners bind to (default: the advertised host when it is an
// IP address, else all interfaces).
func WithBindAddress(addr string) Option {
	return func(m *WorkloadClustersMux) { m.bindAddress = addr }
}

// WithClusterOptions sets the options of every workload cluster's store (quota, history, ...).
func WithClusterOptions(opts store.ClusterOptions) Option {
	return func(m *WorkloadClustersMux) { m.clusterOpts = opts }
}

// WithLogger sets the logger.
func WithLogger(log logr.Logger) Option { return func(m *WorkloadClustersMux) { m.log = log } }

// TLSOptions are the TLS settings every workload cluster listener serves with, for the API
// server and the etcd members alike. The manager fills them from the same --tls-min-version,
// --tls-cipher-suites and --tls-curve-preferences flags as its diagnostics endpoint.
type TLSOptions struct {
	// MinVersion is the lowest TLS version accepted; zero means TLS 1.2.
	MinVersion uint16
	// CipherSuites are the TLS 1.2 cipher suites offered (Go does not make TLS 1.3's
	// configurable); empty means Go's defaults.
	CipherSuites []uint16
	// CurvePreferences are the key exchanges offered; empty means workloadCurves.
	CurvePreferences []tls.CurveID
}

// WithTLSOptions sets the listeners' TLS settings.
func WithTLSOptions(o TLSOptions) Option { return func(m *WorkloadClustersMux) { m.tls = o } }

// apply sets o's settings on a listener's TLS configuration.
func (o TLSOptions) apply(cfg *tls.Config) *tls.Config {
	cfg.MinVersion = tls.VersionTLS12
	if o.MinVersion != 0 {
		cfg.MinVersion = o.MinVersion
	}
	cfg.CipherSuites = o.CipherSuites
	cfg.CurvePreferences = workloadCurves
	if len(o.CurvePreferences) > 0 {
		cfg.CurvePreferences = o.CurvePreferences
	}
	return cfg
}

// WorkloadClustersMux owns the listeners of all workload clusters.
type WorkloadClustersMux struct {
	manager     *store.Manager
	clusterOpts store.ClusterOptions
	host        string
	bindAddress string
	portMin     int
	portMax     int
	tls         TLSOptions
	limits      Limits
	log         logr.Logger

	mu        sync.Mutex
	listeners map[string]*WorkloadClusterListener
	ports     map[int]string       // port -> cluster key, of listeners and of reservations
	owners    map[string]types.UID // cluster key -> UID of the object holding it (see ClaimWorkloadClusterListener)
	// reservations are the ports taken for a claim to come (ReserveWorkloadClusterPort), by
	// cluster key: a key has a reservation or a listener, never both.
	reservations map[string]portReservation
	now          func() time.Time // the clock reservations expire by
	nextPort     int
	closed       bool
}

// NewWorkloadClustersMux returns a mux whose listeners advertise host and keep their objects in
// manager's stores.
func NewWorkloadClustersMux(manager *store.Manager, host string, opts ...Option) (*WorkloadClustersMux, error) {
	m := &WorkloadClustersMux{
		manager:   manager,
		host:      host,
		portMin:   DefaultPortMin,
		portMax:   DefaultPortMax,
		limits:    DefaultLimits(),
		log:       logr.Discard(),
		listeners: map[string]*WorkloadClusterListener{},
		ports:     map[int]string{},

		reservations: map[string]portReservation{},
		now:          time.Now,
	}
	for _, o := range opts {
		o(m)
	}
	if manager == nil {
		return nil, errors.New("mux: a store manager is required")
	}
	if host == "" {
		return nil, errors.New("mux: an advertised host is required")
	}
	if m.portMin < 1 || m.portMax > 65535 || m.portMin > m.portMax {
		return nil, fmt.Errorf("mux: invalid port range %d-%d", m.portMin, m.portMax)
	}
	if m.bindAddress == "" {
		if ip := net.ParseIP(host); ip != nil {
			m.bindAddress = host
		} else {
			m.bindAddress = "0.0.0.0"
		}
	}
	m.nextPort = m.portMin
	return m, nil
}

// Host is the advertised host of every listener.
func (m *WorkloadClustersMux) Host() string { return m.host }

// InitWorkloadClusterListener reserves a port for the workload cluster and creates its store (with
// the default namespaces). It does not serve until the first AddAPIServer. Calling it again for the
// same cluster returns the existing listener.
func (m *WorkloadClustersMux) InitWorkloadClusterListener(wclName string) (*WorkloadClusterListener, error) {
	return m.initListener(wclName, 0, "")
}

// initListener reserves port (or any free port when 0) for wclName. The port reserved for
// wclName by owner (ReserveWorkloadClusterPort) is free for that claim alone.
func (m *WorkloadClustersMux) initListener(wclName string, port int, owner types.UID) (*WorkloadClusterListener, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, errors.New("mux is shut down")
	}
	if l, ok := m.listeners[wclName]; ok {
		if port != 0 && l.port != port {
			return nil, fmt.Errorf("workload cluster %s already listens on port %d, not %d", wclName, l.port, port)
		}
		return l, nil
	}
	m.expireReservationsLocked()
	res, reserved := m.reservations[wclName]
	mine := reserved && owner != "" && res.owner == owner && (port == 0 || port == res.port)
	if mine {
		port = res.port
		delete(m.ports, port) // for this claim alone: the mutex is held until it ends
	}
	var err error
	if port == 0 {
		port, err = m.allocatePortLocked()
	} else {
		err = m.reservePortLocked(port)
	}
	var cluster *store.Cluster
	if err == nil {
		var ok bool
		if cluster, ok = m.manager.GetCluster(wclName); !ok {
			if cluster, err = m.manager.AddCluster(wclName, m.clusterOpts); err != nil {
				err = fmt.Errorf("creating the store of workload cluster %s: %w", wclName, err)
			}
		}
	}
	if err != nil {
		if mine {
			m.ports[res.port] = wclName // the reservation waits on, until it expires
		}
		return nil, err
	}
	if reserved {
		// With a listener, the workload cluster's reservation (whoever took it) has no use left.
		m.dropReservationLocked(wclName)
	}
	l := newListener(m, wclName, port, cluster)
	m.listeners[wclName] = l
	m.ports[port] = wclName
	m.log.V(2).Info("Reserved workload cluster listener", "cluster", wclName, "port", port)
	return l, nil
}

// allocatePortLocked hands out the next free, bindable port, cycling through the range so a freed
// port is reused only after the others: clients that cached an old endpoint fail fast instead of
// reaching a different cluster.
func (m *WorkloadClustersMux) allocatePortLocked() (int, error) {
	size := m.portMax - m.portMin + 1
	for i := 0; i < size; i++ {
		p := m.nextPort
		m.nextPort++
		if m.nextPort > m.portMax {
			m.nextPort = m.portMin
		}
		if _, taken := m.ports[p]; taken {
			continue
		}
		if bindable(m.bindAddress, p) {
			return p, nil
		}
	}
	return 0, fmt.Errorf("%w (%d-%d)", ErrPortRangeExhausted, m.portMin, m.portMax)
}

func (m *WorkloadClustersMux) reservePortLocked(port int) error {
	if port < 1 || port > 65535 {
		return fmt.Errorf("invalid port %d", port)
	}
	if owner, taken := m.ports[port]; taken {
		return fmt.Errorf("port %d is already used by workload cluster %s", port, owner)
	}
	if !bindable(m.bindAddress, port) {
		return fmt.Errorf("port %d is not bindable on %s", port, m.bindAddress)
	}
	return nil
}

// bindable checks that nothing else listens on the port.
func bindable(addr string, port int) bool {
	ln, err := net.Listen("tcp", net.JoinHostPort(addr, strconv.Itoa(port)))
	if err != nil {
		return false
	}
	_ = ln.Close()
	return true
}

// Listener returns the listener of a workload cluster.
func (m *WorkloadClustersMux) Listener(wclName string) (*WorkloadClusterListener, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l, ok := m.listeners[wclName]
	return l, ok
}

func (m *WorkloadClustersMux) mustListener(wclName string) (*WorkloadClusterListener, error) {
	l, ok := m.Listener(wclName)
	if !ok {
		return nil, fmt.Errorf("workload cluster %s has no listener; call InitWorkloadClusterListener first", wclName)
	}
	return l, nil
}

// ListListeners returns the address (https://host:port) of every workload cluster's listener by
// cluster name, the name InitWorkloadClusterListener was given, whether it serves yet or not (see
// Describe for that).
func (m *WorkloadClustersMux) ListListeners() map[string]string {
	ls := m.Listeners()
	out := make(map[string]string, len(ls))
	for k, l := range ls {
		out[k] = l.Address()
	}
	return out
}

// Listeners returns every workload cluster's listener by cluster name.
func (m *WorkloadClustersMux) Listeners() map[string]*WorkloadClusterListener {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]*WorkloadClusterListener, len(m.listeners))
	for k, v := range m.listeners {
		out[k] = v
	}
	return out
}

// ListenerInfo is a printable summary of a listener, for the debug endpoint.
type ListenerInfo struct {
	Cluster     string   `json:"cluster"`
	Address     string   `json:"address"`
	Serving     bool     `json:"serving"`
	APIServers  []string `json:"apiServers"`
	EtcdMembers []string `json:"etcdMembers"`
}

// Describe returns a summary of every listener sorted by cluster.
func (m *WorkloadClustersMux) Describe() []ListenerInfo {
	ls := m.Listeners()
	out := make([]ListenerInfo, 0, len(ls))
	for _, l := range ls {
		out = append(out, l.info())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Cluster < out[j].Cluster })
	return out
}

// DeleteWorkloadClusterListener stops serving, frees the port for reuse and drops the cluster's store.
func (m *WorkloadClustersMux) DeleteWorkloadClusterListener(wclName string) error {
	m.mu.Lock()
	l, ok := m.listeners[wclName]
	if ok {
		delete(m.listeners, wclName)
		delete(m.ports, l.port)
	}
	delete(m.owners, wclName)
	m.dropReservationLocked(wclName)
	m.mu.Unlock()
	if ok {
		l.lifecycle.Lock()
		l.stop(context.Background())
		l.lifecycle.Unlock()
	}
	return m.manager.DeleteCluster(wclName)
}

// HotRestart re-creates the listener of every GoofyCluster on the port recorded in its
// spec.controlPlaneEndpoint, so endpoints do not move when the process restarts or leadership
// changes. A cluster whose port is taken or duplicated fails alone; the others proceed. Each
// listener is claimed for its GoofyCluster's UID: the caller passes the one GoofyCluster per
// workload cluster that holds it.
func (m *WorkloadClustersMux) HotRestart(clusters *infrav1.GoofyClusterList) error {
	if clusters == nil {
		return nil
	}
	var errs []error
	var keep []string
	for i := range clusters.Items {
		gc := &clusters.Items[i]
		port := int(gc.Spec.ControlPlaneEndpoint.Port)
		if port == 0 || !gc.DeletionTimestamp.IsZero() && len(gc.Finalizers) == 0 {
			continue
		}
		key := ClusterKey(gc.Namespace, ClusterNameOf(gc))
		keep = append(keep, key)
		l, err := m.restoreListener(key, port, gc.UID)
		if err != nil {
			errs = append(errs, fmt.Errorf("workload cluster %s: %w", key, err))
			continue
		}
		// Faults hold from the start: an unreachable cluster must not serve while its machines
		// re-add their API servers, before its GoofyCluster is reconciled.
		if err := l.SetFaults(context.Background(), ClusterFaults(gc.Spec.Simulation, time.Now()).Faults); err != nil {
			errs = append(errs, fmt.Errorf("workload cluster %s: %w", key, err))
		}
		m.log.Info("Restored workload cluster listener", "cluster", key, "port", port)
	}
	// State on disk of clusters deleted while the process was down.
	deleted, err := m.manager.DeleteStateExcept(keep)
	if len(deleted) > 0 {
		m.log.Info("Deleted the state of workload clusters that no longer exist", "clusters", deleted)
	}
	if err != nil {
		errs = append(errs, err)
	}
	return kerrors.NewAggregate(errs)
}

// ClusterNameOf is the name of the CAPI Cluster a GoofyCluster belongs to: the cluster-name label
// CAPI sets, else the GoofyCluster's own name.
func ClusterNameOf(gc *infrav1.GoofyCluster) string {
	if name := gc.Labels[clusterv1.ClusterNameLabel]; name != "" {
		return name
	}
	return gc.Name
}

// AddAPIServer registers an API server pod; the first one starts serving. caCert/caKey are the
// cluster CA (<cluster>-ca): the serving certificate chains to it and clients must present a
// certificate signed by it.
func (m *WorkloadClustersMux) AddAPIServer(wclName, podName string, caCert *x509.Certificate, caKey crypto.Signer) error {
	l, err := m.mustListener(wclName)
	if err != nil {
		return err
	}
	return l.addAPIServer(podName, caCert, caKey)
}

// DeleteAPIServer unregisters an API server pod; removing the last one stops serving and closes
// open connections (the port stays reserved).
func (m *WorkloadClustersMux) DeleteAPIServer(wclName, podName string) error {
	l, ok := m.Listener(wclName)
	if !ok {
		return nil
	}
	l.deleteAPIServer(podName)
	return nil
}

// HasAPIServer reports whether the API server pod is registered.
func (m *WorkloadClustersMux) HasAPIServer(wclName, podName string) bool {
	l, ok := m.Listener(wclName)
	return ok && l.hasAPIServer(podName)
}

// AddEtcdMember registers an etcd member pod (etcd-<node>) with a serving certificate signed by
// the etcd CA (<cluster>-etcd) and adds it to the fake etcd cluster.
func (m *WorkloadClustersMux) AddEtcdMember(wclName, podName string, caCert *x509.Certificate, caKey crypto.Signer) error {
	l, err := m.mustListener(wclName)
	if err != nil {
		return err
	}
	return l.addEtcdMember(podName, caCert, caKey)
}

// DeleteEtcdMember removes an etcd member; leadership moves if it led.
func (m *WorkloadClustersMux) DeleteEtcdMember(wclName, podName string) error {
	l, ok := m.Listener(wclName)
	if !ok {
		return nil
	}
	return l.deleteEtcdMember(podName)
}

// HasEtcdMember reports whether the etcd member pod is registered.
func (m *WorkloadClustersMux) HasEtcdMember(wclName, podName string) bool {
	l, ok := m.Listener(wclName)
	return ok && l.hasEtcdMember(podName)
}

// Shutdown stops every listener, waiting for in-flight requests until ctx ends, then closes what
// is left. The stores are kept (the manager owns them).
func (m *WorkloadClustersMux) Shutdown(ctx context.Context) error {
	m.mu.Lock()
	m.closed = true
	ls := make([]*WorkloadClusterListener, 0, len(m.listeners))
	for _, l := range m.listeners {
		ls = append(ls, l)
	}
	m.mu.Unlock()
	var wg sync.WaitGroup
	for _, l := range ls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.lifecycle.Lock()
			defer l.lifecycle.Unlock()
			l.stop(ctx)
		}()
	}
	wg.Wait()
	return ctx.Err()
}

// InitWorkloadClusterListenerOnPort is InitWorkloadClusterListener on a given port: the port a
// cluster's endpoint already records. An existing listener on another port is an error.
func (m *WorkloadClustersMux) InitWorkloadClusterListenerOnPort(wclName string, port int) (*WorkloadClusterListener, error) {
	return m.initListener(wclName, port, "")
}

// Ownership: which object holds a workload cluster. A workload cluster is keyed by
// "<namespace>/<cluster name>", which any copy of its GoofyCluster shares; the UID of the one
// object that claimed it decides who may release it.

// ErrHeldByAnother is returned when another object's UID holds the workload cluster.
var ErrHeldByAnother = errors.New("workload cluster is held by another object")

// ClaimWorkloadClusterListener is InitWorkloadClusterListener (on port, unless 0) for the object
// with UID owner, which holds the workload cluster from then on. It fails with ErrHeldByAnother
// while another UID holds it.
func (m *WorkloadClustersMux) ClaimWorkloadClusterListener(wclName string, port int, owner types.UID) (*WorkloadClusterListener, error) {
	if owner == "" {
		return nil, errors.New("mux: claiming a workload cluster needs the owner's UID")
	}
	m.mu.Lock()
	cur, held := m.owners[wclName]
	if held && cur != owner {
		m.mu.Unlock()
		return nil, fmt.Errorf("%w: %s is held by UID %s", ErrHeldByAnother, wclName, cur)
	}
	if m.owners == nil {
		m.owners = map[string]types.UID{}
	}
	m.owners[wclName] = owner
	m.mu.Unlock()
	l, err := m.initListener(wclName, port, owner)
	if err != nil && !held {
		m.mu.Lock()
		if _, listening := m.listeners[wclName]; !listening && m.owners[wclName] == owner {
			delete(m.owners, wclName)
		}
		m.mu.Unlock()
	}
	return l, err
}

// restoreListener is HotRestart's claim: for owner, or unowned when the object has no UID (one
// built in a test rather than read from the API server).
func (m *WorkloadClustersMux) restoreListener(wclName string, port int, owner types.UID) (*WorkloadClusterListener, error) {
	if owner == "" {
		return m.initListener(wclName, port, "")
	}
	return m.ClaimWorkloadClusterListener(wclName, port, owner)
}

// OwnerOf returns the UID holding the workload cluster.
func (m *WorkloadClustersMux) OwnerOf(wclName string) (types.UID, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	uid, ok := m.owners[wclName]
	return uid, ok
}

// TransferWorkloadClusterListener hands the workload cluster from UID from to UID to, if from
// still holds it (the caller has checked that from's object is gone).
func (m *WorkloadClustersMux) TransferWorkloadClusterListener(wclName string, from, to types.UID) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if cur, held := m.owners[wclName]; !held || cur != from || to == "" {
		return false
	}
	m.owners[wclName] = to
	return true
}

// ReleaseWorkloadClusterListener is DeleteWorkloadClusterListener for the object with UID owner:
// it releases nothing, and reports false, while a listener exists that owner does not hold, or
// another UID's reservation waits for its claim. With no listener, the cluster's state (if any)
// and owner's reservation are dropped.
func (m *WorkloadClustersMux) ReleaseWorkloadClusterListener(wclName string, owner types.UID) (bool, error) {
	m.mu.Lock()
	m.expireReservationsLocked()
	cur, held := m.owners[wclName]
	_, listening := m.listeners[wclName]
	res, reserved := m.reservations[wclName]
	m.mu.Unlock()
	if held && cur != owner || !held && listening || !held && reserved && res.owner != owner {
		return false, nil
	}
	return true, m.DeleteWorkloadClusterListener(wclName)
}

// Port reservations: a port taken for a workload cluster's claim to come, in memory only (no
// listener, no store, no state on disk), so that the object can record its endpoint in the same
// write as its finalizer, before anything that deletion must free exists.

// PortReservationTTL is how long a reservation waits for its claim: one never claimed (its
// object's reconcile did not come back) must not keep its port from the range for good.
const PortReservationTTL = time.Minute

type portReservation struct {
	port    int
	owner   types.UID
	expires time.Time
}

// ReserveWorkloadClusterPort takes a free port of the range for the workload cluster, for the
// object with UID owner, in memory only. ClaimWorkloadClusterListener for that port (or port 0)
// by owner turns it into the listener; no other claim nor allocation gets the port meanwhile.
// CancelWorkloadClusterPort frees it, and so does PortReservationTTL passing without a claim.
// Reserving again for the same owner returns the same port and renews the reservation. It fails
// when the workload cluster has a listener already, or another UID holds it or reserved it.
func (m *WorkloadClustersMux) ReserveWorkloadClusterPort(wclName string, owner types.UID) (int, error) {
	if owner == "" {
		return 0, errors.New("mux: reserving a port needs the owner's UID")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return 0, errors.New("mux is shut down")
	}
	m.expireReservationsLocked()
	if res, ok := m.reservations[wclName]; ok {
		if res.owner != owner {
			return 0, fmt.Errorf("%w: %s is reserved by UID %s", ErrHeldByAnother, wclName, res.owner)
		}
		res.expires = m.now().Add(PortReservationTTL)
		m.reservations[wclName] = res
		return res.port, nil
	}
	if l, ok := m.listeners[wclName]; ok {
		return 0, fmt.Errorf("workload cluster %s already listens on port %d", wclName, l.port)
	}
	if cur, held := m.owners[wclName]; held && cur != owner {
		return 0, fmt.Errorf("%w: %s is held by UID %s", ErrHeldByAnother, wclName, cur)
	}
	port, err := m.allocatePortLocked()
	if err != nil {
		return 0, err
	}
	m.ports[port] = wclName
	m.reservations[wclName] = portReservation{port: port, owner: owner, expires: m.now().Add(PortReservationTTL)}
	m.log.V(2).Info("Reserved a port for the workload cluster's claim", "cluster", wclName, "port", port)
	return port, nil
}

// CancelWorkloadClusterPort frees the port owner reserved for the workload cluster, if it is not
// claimed yet.
func (m *WorkloadClustersMux) CancelWorkloadClusterPort(wclName string, owner types.UID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if res, ok := m.reservations[wclName]; ok && res.owner == owner {
		m.dropReservationLocked(wclName)
	}
}

// dropReservationLocked frees the workload cluster's reservation, if any.
func (m *WorkloadClustersMux) dropReservationLocked(wclName string) {
	res, ok := m.reservations[wclName]
	if !ok {
		return
	}
	delete(m.reservations, wclName)
	if m.ports[res.port] == wclName {
		if l, listening := m.listeners[wclName]; !listening || l.port != res.port {
			delete(m.ports, res.port)
		}
	}
}

// expireReservationsLocked frees the reservations PortReservationTTL left unclaimed; it runs
// before a port is handed out, the only use of a free port.
func (m *WorkloadClustersMux) expireReservationsLocked() {
	now := m.now()
	for key, res := range m.reservations {
		if !now.Before(res.expires) {
			m.log.V(2).Info("Port reservation expired unclaimed", "cluster", key, "port", res.port)
			m.dropReservationLocked(key)
		}
	}
}
