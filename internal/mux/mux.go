// Package mux serves many simulated workload clusters from one process. Every workload cluster gets
// one TLS port (a WorkloadClusterListener) that answers both as its kube-apiserver and as its etcd
// members: the TLS server name picks the certificate and the trust root, the content type picks the
// handler (gRPC to the fake etcd, everything else to the API server handler).
package mux

import (
	"cmp"
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"k8s.io/apimachinery/pkg/types"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/goofy-capi/cluster-api-provider-goofy/api/v1alpha1"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/etcd"
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

// ErrPortUnavailable is returned when a workload cluster's own port cannot be bound: another
// process listens on it (one that took it while the manager was down, or while the cluster was
// unreachable). The port stays the cluster's, as its endpoint cannot move (CAPI's
// spec.controlPlaneEndpoint is immutable once set): the caller tries again later.
var ErrPortUnavailable = errors.New("listener port cannot be bound")

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

// WithListenerAddresses spreads the listeners over several IP addresses (ParseListenerAddresses),
// each with the whole port range, so that the mux holds len(addrs) × ports-in-range listeners:
// a listener binds to one of them and advertises it as its host (Host, the endpoint handed to
// CAPI), whatever host NewWorkloadClustersMux was given. The range of the first address is
// handed out first, then the next address's. It excludes WithBindAddress. Without it (or with
// one address, which behaves the same but advertises that address), every listener binds to
// the one bind address and advertises the mux's host, as before.
func WithListenerAddresses(addrs ...string) Option {
	return func(m *WorkloadClustersMux) { m.addresses = addrs }
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
	// addresses are the listener addresses of WithListenerAddresses, canonical, nil without it.
	addresses []string
	isAddress map[string]bool
	portMin   int
	portMax   int
	tls       TLSOptions
	limits    Limits
	log       logr.Logger

	mu        sync.Mutex
	listeners map[string]*WorkloadClusterListener
	ports     map[endpoint]string  // endpoint -> cluster key, of listeners and of reservations
	owners    map[string]types.UID // cluster key -> UID of the object holding it (see ClaimWorkloadClusterListener)
	// reservations are the ports taken for a claim to come (ReserveWorkloadClusterPort), by
	// cluster key: a key has a reservation or a listener, never both.
	reservations map[string]portReservation
	// records are the ports workload clusters' listeners held, by cluster key, kept on disk beside
	// each cluster's objects (see listenerRecord): restored by HotRestart, they decide who may
	// have a port after a restart. recorded is the same by port.
	records  map[string]listenerRecord
	recorded map[endpoint]string
	// creating are the workload clusters whose listener is being set up while the mutex is
	// released (initListenerLocked), each with the channel closed once that ends.
	creating map[string]chan struct{}
	now      func() time.Time // the clock reservations expire by
	nextSlot int              // where allocateLocked looks first, an index of the address × port space
	closed   bool

	// serving counts the listeners serving (each holds its socket's file); places is the
	// process-wide bound on their connections (Limits.MaxConnections), nil for none.
	serving atomic.Int64
	places  *connectionCap

	// etcdGRPC serves the etcd members of every cluster; each call names its cluster's etcd in its
	// context (serveEtcd).
	etcdGRPC *grpc.Server
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
		ports:     map[endpoint]string{},

		reservations: map[string]portReservation{},
		records:      map[string]listenerRecord{},
		recorded:     map[endpoint]string{},
		creating:     map[string]chan struct{}{},
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
	m.places = newConnectionCap(m.limits.MaxConnections, openFileLimit(), &m.serving)
	m.etcdGRPC = grpc.NewServer()
	etcd.RegisterRouted(m.etcdGRPC)
	if len(m.addresses) > 0 {
		if m.bindAddress != "" {
			return nil, errors.New("mux: a bind address and listener addresses exclude each other")
		}
		addrs, err := canonicalAddresses(m.addresses)
		if err != nil {
			return nil, fmt.Errorf("mux: %w", err)
		}
		m.addresses = addrs
		m.isAddress = make(map[string]bool, len(addrs))
		for _, a := range addrs {
			m.isAddress[a] = true
		}
		m.host = addrs[0]
	}
	if m.bindAddress == "" {
		if ip := net.ParseIP(host); ip != nil {
			m.bindAddress = host
		} else {
			m.bindAddress = "0.0.0.0"
		}
	}
	return m, nil
}

// Host is the advertised host of every listener; with listener addresses (WithListenerAddresses),
// the first of them (each listener advertises its own: WorkloadClusterListener.Host).
func (m *WorkloadClustersMux) Host() string { return m.host }

// Addresses are the listener addresses (WithListenerAddresses), nil without them.
func (m *WorkloadClustersMux) Addresses() []string { return slices.Clone(m.addresses) }

// Capacity is how many listeners the mux can hold at most: the ports of the range on every
// listener address.
func (m *WorkloadClustersMux) Capacity() int { return m.slots() }

// MaxConnections is the process-wide bound on the listeners' open connections in force
// (Limits.MaxConnections, its default sized from the open file limit and the listeners serving
// now); 0 for none.
func (m *WorkloadClustersMux) MaxConnections() int {
	if m.places == nil {
		return 0
	}
	return int(max(m.places.limit(), 0))
}

// PortRange is the inclusive range listener ports are taken from (--listener-port-range).
func (m *WorkloadClustersMux) PortRange() (min, max int) { return m.portMin, m.portMax }

// InitWorkloadClusterListener reserves a port for the workload cluster and creates its store (with
// the default namespaces). It does not serve until the first AddAPIServer. Calling it again for the
// same cluster returns the existing listener.
func (m *WorkloadClustersMux) InitWorkloadClusterListener(wclName string) (*WorkloadClusterListener, error) {
	return m.initListener(wclName, "", 0, "")
}

// initListener reserves host:port (or any free endpoint when port is 0) for wclName; an empty host
// is the one of the cluster's reservation or record on that port, else the first address. The
// endpoint reserved for wclName by owner (ReserveWorkloadClusterPort) is free for that claim alone.
func (m *WorkloadClustersMux) initListener(wclName, host string, port int, owner types.UID) (*WorkloadClusterListener, error) {
	l, wait, err := m.initListenerLocked(wclName, host, port, owner)
	if err != nil {
		return nil, err
	}
	// The record on disk says the port is this cluster's before the listener is used: a claim
	// that returned is one a restart keeps.
	if err := wait(); err != nil {
		return nil, err
	}
	return l, nil
}

// initListenerLocked is initListener but for the wait for the record. It holds the mutex but
// while the cluster's store is created (store.Manager.AddCluster), which waits for its first
// write to be on disk: meanwhile other clusters are set up and looked up, wclName's endpoint is
// held for it, and the mux's other calls about wclName wait (awaitCreationLocked).
func (m *WorkloadClustersMux) initListenerLocked(wclName, host string, port int, owner types.UID) (*WorkloadClusterListener, func() error, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.awaitCreationLocked(wclName)
	if m.closed {
		return nil, nil, errors.New("mux is shut down")
	}
	addr := m.addrOf(host)
	if l, ok := m.listeners[wclName]; ok {
		if port != 0 && (l.port != port || addr != "" && addr != l.addr) {
			return nil, nil, fmt.Errorf("%w: workload cluster %s already listens on %s, not %s", ErrPortNotHeld, wclName,
				m.describe(l.endpoint()), m.describe(endpoint{addr: cmp.Or(addr, l.addr), port: port}))
		}
		return l, m.recordLocked(wclName, l.endpoint(), owner), nil
	}
	m.expireReservationsLocked()
	res, reserved := m.reservations[wclName]
	mine := reserved && owner != "" && res.owner == owner && (port == 0 || port == res.ep.port && (addr == "" || addr == res.ep.addr))
	var ep endpoint
	if mine {
		ep = res.ep
		delete(m.ports, ep) // for this claim alone: the mutex is held until it ends
	}
	var err error
	if !mine {
		m.forgetEarlierOwnerLocked(wclName, owner)
		rec, recorded := m.records[wclName]
		switch {
		case port == 0 && recorded:
			ep = rec.endpoint() // the cluster's own endpoint, from before a restart
		case port != 0:
			ep = m.resolve(wclName, addr, port)
		}
		err = m.mayHoldLocked(wclName, ep)
	}
	if err != nil {
		// nothing to allocate
	} else if ep.port == 0 {
		ep, err = m.allocateLocked()
	} else {
		err = m.reserveLocked(ep)
	}
	var cluster *store.Cluster
	if err == nil {
		var ok bool
		if cluster, ok = m.manager.GetCluster(wclName); !ok {
			cluster, err = m.createStoreUnlocked(wclName, ep, owner)
			if err == nil && m.closed {
				err = errors.New("mux is shut down")
			}
			if err != nil && !mine && m.ports[ep] == wclName {
				delete(m.ports, ep)
			}
		}
	}
	if err != nil {
		if mine {
			m.ports[res.ep] = wclName // the reservation waits on, until it expires
		}
		return nil, nil, err
	}
	if reserved {
		// With a listener, the workload cluster's reservation (whoever took it) has no use left.
		m.dropReservationLocked(wclName)
	}
	l := newListener(m, wclName, ep, cluster)
	m.listeners[wclName] = l
	m.ports[ep] = wclName
	m.log.V(2).Info("Reserved workload cluster listener", "cluster", wclName, "address", m.describe(ep))
	return l, m.recordLocked(wclName, ep, owner), nil
}

// createStoreUnlocked creates the store of wclName, whose listener is to hold ep, with the mutex
// released meanwhile (initListenerLocked); ep stays held for wclName until the caller, who
// holds the mutex again, keeps or frees it.
func (m *WorkloadClustersMux) createStoreUnlocked(wclName string, ep endpoint, owner types.UID) (*store.Cluster, error) {
	m.ports[ep] = wclName
	done := make(chan struct{})
	m.creating[wclName] = done
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.creating, wclName)
		close(done)
	}()
	opts := m.clusterOpts
	opts.Owner = owner // state on disk of another UID is not this cluster's (store's identity.go)
	cluster, err := m.manager.AddCluster(wclName, opts)
	if err != nil {
		return nil, fmt.Errorf("creating the store of workload cluster %s: %w", wclName, err)
	}
	return cluster, nil
}

// awaitCreationLocked waits until no listener of wclName is being set up (initListenerLocked),
// releasing the mutex meanwhile: what the caller reads of wclName afterwards is what that set-up
// left. Callers hold m.mu.
func (m *WorkloadClustersMux) awaitCreationLocked(wclName string) {
	for {
		done, ok := m.creating[wclName]
		if !ok {
			return
		}
		m.mu.Unlock()
		<-done
		m.mu.Lock()
	}
}

// allocateLocked hands out the next free, bindable endpoint, cycling through the ports of the
// range on every listener address in turn (the first address's range first), so a freed
// endpoint is reused only after the others: clients that cached an old endpoint fail fast
// instead of reaching a different cluster.
func (m *WorkloadClustersMux) allocateLocked() (endpoint, error) {
	slots := m.slots()
	for range slots {
		ep := m.slot(m.nextSlot)
		m.nextSlot = (m.nextSlot + 1) % slots
		if _, taken := m.ports[ep]; taken {
			continue
		}
		if _, recorded := m.recorded[ep]; recorded {
			continue // another workload cluster's, from before a restart
		}
		if bindError(m.bindAddr(ep), ep.port) == nil {
			return ep, nil
		}
	}
	if len(m.addresses) > 0 {
		return endpoint{}, fmt.Errorf("%w (%d-%d on each of %d listener addresses, %d endpoints)",
			ErrPortRangeExhausted, m.portMin, m.portMax, len(m.addresses), slots)
	}
	return endpoint{}, fmt.Errorf("%w (%d-%d)", ErrPortRangeExhausted, m.portMin, m.portMax)
}

func (m *WorkloadClustersMux) reserveLocked(ep endpoint) error {
	if ep.port < 1 || ep.port > 65535 {
		return fmt.Errorf("invalid port %d", ep.port)
	}
	if owner, taken := m.ports[ep]; taken {
		m.log.V(2).Info("Port is taken", "address", m.describe(ep), "by", owner)
		return fmt.Errorf("%w: %s is held by another workload cluster", ErrPortNotHeld, m.describe(ep))
	}
	if err := bindError(m.bindAddr(ep), ep.port); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrPortUnavailable, m.describe(ep), err)
	}
	return nil
}

// bindError says why the port cannot be bound (nothing else may listen on it); nil when it can.
func bindError(addr string, port int) error {
	ln, err := net.Listen("tcp", net.JoinHostPort(addr, strconv.Itoa(port)))
	if err != nil {
		return err
	}
	_ = ln.Close()
	return nil
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
	m.awaitCreationLocked(wclName)
	l, ok := m.listeners[wclName]
	if ok {
		delete(m.listeners, wclName)
		delete(m.ports, l.endpoint())
	}
	delete(m.owners, wclName)
	m.dropReservationLocked(wclName)
	m.dropRecordLocked(wclName) // on disk, it goes with the cluster's state below
	m.mu.Unlock()
	if ok {
		l.lifecycle.Lock()
		l.retire(context.Background())
		l.lifecycle.Unlock()
	}
	return m.manager.DeleteCluster(wclName)
}

// HotRestart re-creates the listener of every GoofyCluster on the port recorded in its
// spec.controlPlaneEndpoint, so endpoints do not move when the process restarts or leadership
// changes. Each listener is claimed for its GoofyCluster's UID: the caller passes the one
// GoofyCluster per workload cluster that holds it.
//
// A port goes only to the workload cluster that held it: what decides is the record kept on disk
// beside each cluster's objects (listenerRecord), not the spec, which anyone allowed to edit the
// GoofyCluster can point at another cluster's port. Every claim is judged before any listener is
// opened, so the outcome does not depend on the order of the list: a GoofyCluster whose workload
// cluster held another port, whose port another workload cluster held, or (with no record either
// way, as with state in memory only) whose port the GoofyCluster of another workload cluster
// records too, is refused with ErrPortNotHeld, and so is a port outside the range that no record
// holds. A refused or failed cluster fails alone; the others proceed.
func (m *WorkloadClustersMux) HotRestart(clusters *infrav1.GoofyClusterList) error {
	if clusters == nil {
		return nil
	}
	type claim struct {
		gc   *infrav1.GoofyCluster
		key  string
		host string
		port int
	}
	var claims []claim
	var keep []string
	byPort := map[endpoint]map[string]bool{}
	for i := range clusters.Items {
		gc := &clusters.Items[i]
		port := int(gc.Spec.ControlPlaneEndpoint.Port)
		if port == 0 || !gc.DeletionTimestamp.IsZero() && len(gc.Finalizers) == 0 {
			continue
		}
		key := ClusterKey(gc.Namespace, ClusterNameOf(gc))
		keep = append(keep, key)
		host := gc.Spec.ControlPlaneEndpoint.Host
		claims = append(claims, claim{gc: gc, key: key, host: host, port: port})
		ep := endpoint{addr: m.defaultAddr(host), port: port}
		if byPort[ep] == nil {
			byPort[ep] = map[string]bool{}
		}
		byPort[ep][key] = true
	}
	var errs []error
	// State on disk of clusters deleted while the process was down, with their records: first,
	// so that a deleted cluster's port is free for the judgement below.
	deleted, err := m.manager.DeleteStateExcept(keep)
	if len(deleted) > 0 {
		m.log.Info("Deleted the state of workload clusters that no longer exist", "clusters", deleted)
	}
	if err != nil {
		errs = append(errs, err)
	}
	if err := m.loadRecords(); err != nil {
		errs = append(errs, err)
	}
	verdicts := make([]error, len(claims))
	m.mu.Lock()
	for i, c := range claims {
		m.forgetEarlierOwnerLocked(c.key, c.gc.UID)
		ep := m.resolve(c.key, m.addrOf(c.host), c.port)
		verdicts[i] = m.mayHoldLocked(c.key, ep)
		same := byPort[endpoint{addr: m.defaultAddr(c.host), port: c.port}]
		if verdicts[i] == nil && len(same) > 1 {
			if _, ok := m.records[c.key]; !ok {
				verdicts[i] = fmt.Errorf("%w: %s is recorded by the GoofyClusters of %d workload clusters and no record says which held it",
					ErrPortNotHeld, m.describe(ep), len(same))
			}
		}
	}
	m.mu.Unlock()
	for i, c := range claims {
		if verdicts[i] != nil {
			m.log.Info("Refused to restore a workload cluster listener on a port it did not hold", "cluster", c.key, "port", c.port, "reason", verdicts[i].Error())
			errs = append(errs, fmt.Errorf("workload cluster %s: %w", c.key, verdicts[i]))
			continue
		}
		l, err := m.restoreListener(c.key, c.host, c.port, c.gc.UID)
		if err != nil {
			errs = append(errs, fmt.Errorf("workload cluster %s: %w", c.key, err))
			continue
		}
		// Faults hold from the start: an unreachable cluster must not serve while its machines
		// re-add their API servers, before its GoofyCluster is reconciled.
		if err := l.SetFaults(context.Background(), ClusterFaults(c.gc.Spec.Simulation, time.Now()).Faults); err != nil {
			errs = append(errs, fmt.Errorf("workload cluster %s: %w", c.key, err))
		}
		m.log.Info("Restored workload cluster listener", "cluster", c.key, "address", l.HostPort())
	}
	return kerrors.NewAggregate(errs)
}

// Records of the ports workload clusters held. Each workload cluster's listener port, and the UID
// of the object holding it, is kept on disk beside the cluster's objects (store.Manager's cluster
// records) from its claim until its state is deleted; without --state-dir, in memory only.

// listenerRecordName names the record in the store.
const listenerRecordName = "listener"

// listenerRecord is what is kept: the port the workload cluster's listener held, and the listener
// address it held it on (WithListenerAddresses; empty for the one bind address).
type listenerRecord struct {
	Port    int       `json:"port"`
	UID     types.UID `json:"uid,omitempty"`
	Address string    `json:"address,omitempty"`
}

func (r listenerRecord) endpoint() endpoint { return endpoint{addr: r.Address, port: r.Port} }

// ErrPortNotHeld is returned when a workload cluster asks for a port that is not its own: another
// workload cluster's, one other than the port it held, or one outside the listener port range.
var ErrPortNotHeld = errors.New("port not held by this workload cluster")

// loadRecords reads the records on disk of every cluster with state, over those in memory.
func (m *WorkloadClustersMux) loadRecords() error {
	raw, err := m.manager.ClusterRecords(listenerRecordName)
	if err != nil {
		return fmt.Errorf("reading the listener records: %w", err)
	}
	recs := map[string]listenerRecord{}
	byPort := map[endpoint][]string{}
	for key, data := range raw {
		var rec listenerRecord
		if err := json.Unmarshal(data, &rec); err != nil || rec.Port < 1 || rec.Port > 65535 {
			m.log.Error(err, "Ignoring a malformed listener record", "cluster", key, "record", string(data))
			continue
		}
		// A record of the one bind address is the first listener address's, and the other way
		// round: the endpoints of a manager that starts using listener addresses do not move. A
		// record of an address the manager no longer listens on stays so (mayHoldLocked refuses it).
		switch {
		case len(m.addresses) == 0:
			rec.Address = ""
		case rec.Address == "":
			rec.Address = m.addresses[0]
		}
		recs[key] = rec
		byPort[rec.endpoint()] = append(byPort[rec.endpoint()], key)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for key, rec := range recs {
		ep := rec.endpoint()
		if len(byPort[ep]) > 1 {
			// Records of one port for two clusters cannot both be right (the state was tampered
			// with): neither decides, whichever is read first.
			m.log.Info("Workload clusters' records hold the same port; none is trusted", "address", m.describe(ep), "clusters", byPort[ep])
			continue
		}
		if other, ok := m.recorded[ep]; ok && other != key {
			continue // a listener of this process holds it
		}
		if _, ok := m.listeners[key]; !ok {
			m.dropRecordLocked(key)
			m.records[key] = rec
			m.recorded[ep] = key
		}
	}
	return nil
}

// recordLocked records that the workload cluster's listener holds port for owner (an empty owner
// keeps the UID recorded for that port) and returns the wait for the record to be on disk.
func (m *WorkloadClustersMux) recordLocked(wclName string, ep endpoint, owner types.UID) func() error {
	rec, ok := m.records[wclName]
	if owner == "" && ok && rec.endpoint() == ep {
		owner = rec.UID
	}
	next := listenerRecord{Port: ep.port, UID: owner, Address: ep.addr}
	if ok && rec == next {
		return func() error { return nil }
	}
	m.dropRecordLocked(wclName)
	m.records[wclName] = next
	m.recorded[ep] = wclName
	data, err := json.Marshal(next)
	if err != nil {
		return func() error { return err }
	}
	return m.manager.PutClusterRecord(wclName, listenerRecordName, data)
}

// dropRecordLocked forgets the workload cluster's record in memory (on disk, it goes with the
// cluster's state).
func (m *WorkloadClustersMux) dropRecordLocked(wclName string) {
	if rec, ok := m.records[wclName]; ok {
		delete(m.records, wclName)
		if m.recorded[rec.endpoint()] == wclName {
			delete(m.recorded, rec.endpoint())
		}
	}
}

// mayHoldLocked says whether the workload cluster may take ep (port 0: any free one). A cluster
// with a record may take only its recorded endpoint; no cluster may take an endpoint another
// cluster's record holds, nor a port outside the range (or an address that is not a listener
// address) unless its record holds it.
func (m *WorkloadClustersMux) mayHoldLocked(wclName string, ep endpoint) error {
	if ep.port == 0 {
		return nil
	}
	if len(m.addresses) > 0 && !m.isAddress[ep.addr] {
		// A record of an address the manager no longer listens on: the endpoint cannot move.
		return fmt.Errorf("%w: host %s is not one of the listener addresses %s", ErrPortNotHeld, ep.addr, strings.Join(m.addresses, ","))
	}
	rec, ok := m.records[wclName]
	switch {
	case ok && rec.endpoint() == ep:
		return nil
	case ok && rec.Address != ep.addr:
		return fmt.Errorf("%w: workload cluster %s held %s, not %s: set spec.controlPlaneEndpoint back to host %s, port %d",
			ErrPortNotHeld, wclName, m.describe(rec.endpoint()), m.describe(ep), rec.Address, rec.Port)
	case ok:
		return fmt.Errorf("%w: workload cluster %s held port %d, not %d: set spec.controlPlaneEndpoint.port back to %d",
			ErrPortNotHeld, wclName, rec.Port, ep.port, rec.Port)
	}
	if other, held := m.recorded[ep]; held && other != wclName {
		m.log.V(2).Info("Port is recorded for another workload cluster", "cluster", wclName, "address", m.describe(ep), "holder", other)
		return fmt.Errorf("%w: %s is held by another workload cluster", ErrPortNotHeld, m.describe(ep))
	}
	if ep.port < m.portMin || ep.port > m.portMax {
		return fmt.Errorf("%w: port %d is outside the listener port range %d-%d", ErrPortNotHeld, ep.port, m.portMin, m.portMax)
	}
	return nil
}

// forgetEarlierOwnerLocked forgets the port record of a workload cluster whose state is recorded
// for another UID than owner, which claims it: that state, record included, belongs to an earlier
// workload cluster of the same name (its GoofyCluster deleted while the process was down), and
// is deleted when owner's store is created (store.ClusterOptions.Owner). Its port does not bind
// owner's claim, and other clusters may have it once nothing holds it. No owner, a listener (its
// claim was judged), or state without an owner's record: nothing is forgotten.
func (m *WorkloadClustersMux) forgetEarlierOwnerLocked(wclName string, owner types.UID) {
	if owner == "" {
		return
	}
	if _, listening := m.listeners[wclName]; listening {
		return
	}
	rec, recorded := m.records[wclName]
	if !recorded {
		return
	}
	prev, ok := m.manager.ClusterOwner(wclName)
	if !ok || prev == owner {
		return
	}
	m.log.Info("Forgot the port record of an earlier workload cluster of the same name, whose state is deleted",
		"cluster", wclName, "address", m.describe(rec.endpoint()), "previousOwner", prev, "owner", owner)
	m.dropRecordLocked(wclName)
}

// CheckWorkloadClusterState reports why the workload cluster's state on disk could not be loaded
// for owner (store.ErrStateUnreadable), without creating its store or taking a port; nil when it
// can be, when there is none, or when its store exists (store.Manager.CheckState).
func (m *WorkloadClustersMux) CheckWorkloadClusterState(wclName string, owner types.UID) error {
	if err := m.manager.CheckState(wclName, owner); err != nil {
		return fmt.Errorf("the state of workload cluster %s: %w", wclName, err)
	}
	return nil
}

// PortHolder is EndpointHolder on the mux's host (Host): the one bind address, or the first
// listener address.
func (m *WorkloadClustersMux) PortHolder(port int) (wclName string, owner types.UID, held bool) {
	return m.EndpointHolder(m.host, port)
}

// EndpointHolder says which workload cluster holds host:port, and for which UID (empty when
// unowned): its listener, its reservation, or its record from before a restart. Without listener
// addresses the host does not matter: there is one bind address.
func (m *WorkloadClustersMux) EndpointHolder(host string, port int) (wclName string, owner types.UID, held bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.expireReservationsLocked()
	ep := endpoint{addr: m.defaultAddr(host), port: port}
	if key, ok := m.ports[ep]; ok {
		if res, reserved := m.reservations[key]; reserved && res.ep == ep {
			return key, res.owner, true
		}
		return key, m.owners[key], true
	}
	if key, ok := m.recorded[ep]; ok {
		return key, m.records[key].UID, true
	}
	return "", "", false
}

// HeldPort is the port the workload cluster holds (HeldEndpoint).
func (m *WorkloadClustersMux) HeldPort(wclName string) (int, bool) {
	_, port, ok := m.HeldEndpoint(wclName)
	return port, ok
}

// HeldEndpoint is the endpoint the workload cluster holds: its listener's, its reservation's, or
// its record's from before a restart; host is the host it advertises.
func (m *WorkloadClustersMux) HeldEndpoint(wclName string) (host string, port int, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if l, ok := m.listeners[wclName]; ok {
		return l.host, l.port, true
	}
	if res, ok := m.reservations[wclName]; ok && m.now().Before(res.expires) {
		return m.advertised(res.ep), res.ep.port, true
	}
	if rec, ok := m.records[wclName]; ok {
		return m.advertised(rec.endpoint()), rec.Port, true
	}
	return "", 0, false
}

// OtherClustersOnPort returns the GoofyClusters of gcs whose spec.controlPlaneEndpoint records port
// for a workload cluster other than wclName (copies of its GoofyCluster share its endpoint), leaving
// out those deleted already but for their finalizers' removal. The host is not compared: see
// OtherClustersOnEndpoint for a mux with listener addresses.
func OtherClustersOnPort(gcs []infrav1.GoofyCluster, wclName string, port int) []*infrav1.GoofyCluster {
	return otherClustersOn(gcs, wclName, port, func(string) bool { return true })
}

// OtherClustersOnEndpoint is OtherClustersOnPort for host:port: with listener addresses
// (WithListenerAddresses), a GoofyCluster whose endpoint has the same port on another address is
// not on it.
func (m *WorkloadClustersMux) OtherClustersOnEndpoint(gcs []infrav1.GoofyCluster, wclName, host string, port int) []*infrav1.GoofyCluster {
	addr := m.defaultAddr(host)
	return otherClustersOn(gcs, wclName, port, func(h string) bool { return m.defaultAddr(h) == addr })
}

func otherClustersOn(gcs []infrav1.GoofyCluster, wclName string, port int, sameHost func(string) bool) []*infrav1.GoofyCluster {
	var out []*infrav1.GoofyCluster
	for i := range gcs {
		gc := &gcs[i]
		if port == 0 || int(gc.Spec.ControlPlaneEndpoint.Port) != port || !gc.DeletionTimestamp.IsZero() && len(gc.Finalizers) == 0 {
			continue
		}
		if !sameHost(gc.Spec.ControlPlaneEndpoint.Host) {
			continue
		}
		if ClusterKey(gc.Namespace, ClusterNameOf(gc)) != wclName {
			out = append(out, gc)
		}
	}
	return out
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
			l.retire(ctx)
		}()
	}
	wg.Wait()
	m.etcdGRPC.Stop()
	return ctx.Err()
}

// InitWorkloadClusterListenerOnPort is InitWorkloadClusterListener on a given port: the port a
// cluster's endpoint already records. An existing listener on another port is an error.
func (m *WorkloadClustersMux) InitWorkloadClusterListenerOnPort(wclName string, port int) (*WorkloadClusterListener, error) {
	return m.initListener(wclName, "", port, "")
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
	return m.ClaimWorkloadClusterEndpoint(wclName, "", port, owner)
}

// ClaimWorkloadClusterEndpoint is ClaimWorkloadClusterListener on host:port, the endpoint a
// GoofyCluster records. The host matters only with listener addresses (WithListenerAddresses);
// an empty one is that of the cluster's reservation or record on port, else the first address.
func (m *WorkloadClustersMux) ClaimWorkloadClusterEndpoint(wclName, host string, port int, owner types.UID) (*WorkloadClusterListener, error) {
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
	l, err := m.initListener(wclName, host, port, owner)
	if err != nil && !held {
		m.mu.Lock()
		m.awaitCreationLocked(wclName)
		if _, listening := m.listeners[wclName]; !listening && m.owners[wclName] == owner {
			delete(m.owners, wclName)
		}
		m.mu.Unlock()
	}
	return l, err
}

// restoreListener is HotRestart's claim: for owner, or unowned when the object has no UID (one
// built in a test rather than read from the API server).
func (m *WorkloadClustersMux) restoreListener(wclName, host string, port int, owner types.UID) (*WorkloadClusterListener, error) {
	if owner == "" {
		return m.initListener(wclName, host, port, "")
	}
	return m.ClaimWorkloadClusterEndpoint(wclName, host, port, owner)
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
	m.awaitCreationLocked(wclName)
	if cur, held := m.owners[wclName]; !held || cur != from || to == "" {
		return false
	}
	m.owners[wclName] = to
	if l, ok := m.listeners[wclName]; ok {
		m.recordLocked(wclName, l.endpoint(), to) // queued; the next claim by to waits for it
		// The state goes with the workload cluster, kept: it is to's now (store's identity.go).
		m.manager.SetClusterOwner(wclName, to)
	}
	return true
}

// ReleaseWorkloadClusterListener is DeleteWorkloadClusterListener for the object with UID owner:
// it releases nothing, and reports false, while a listener exists that owner does not hold, or
// another UID's reservation waits for its claim. With no listener, the cluster's state (if any)
// and owner's reservation are dropped.
func (m *WorkloadClustersMux) ReleaseWorkloadClusterListener(wclName string, owner types.UID) (bool, error) {
	m.mu.Lock()
	m.awaitCreationLocked(wclName)
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
	ep      endpoint
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
	_, port, err := m.ReserveWorkloadClusterEndpoint(wclName, owner)
	return port, err
}

// ReserveWorkloadClusterEndpoint is ReserveWorkloadClusterPort, returning the host the reserved
// port's listener will advertise too: with listener addresses (WithListenerAddresses), the
// address it is on, which the GoofyCluster's endpoint must record.
func (m *WorkloadClustersMux) ReserveWorkloadClusterEndpoint(wclName string, owner types.UID) (host string, port int, err error) {
	if owner == "" {
		return "", 0, errors.New("mux: reserving a port needs the owner's UID")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.awaitCreationLocked(wclName)
	if m.closed {
		return "", 0, errors.New("mux is shut down")
	}
	m.expireReservationsLocked()
	if res, ok := m.reservations[wclName]; ok {
		if res.owner != owner {
			return "", 0, fmt.Errorf("%w: %s is reserved by UID %s", ErrHeldByAnother, wclName, res.owner)
		}
		res.expires = m.now().Add(PortReservationTTL)
		m.reservations[wclName] = res
		return m.advertised(res.ep), res.ep.port, nil
	}
	if l, ok := m.listeners[wclName]; ok {
		return "", 0, fmt.Errorf("workload cluster %s already listens on %s", wclName, m.describe(l.endpoint()))
	}
	if cur, held := m.owners[wclName]; held && cur != owner {
		return "", 0, fmt.Errorf("%w: %s is held by UID %s", ErrHeldByAnother, wclName, cur)
	}
	var ep endpoint
	m.forgetEarlierOwnerLocked(wclName, owner)
	if rec, ok := m.records[wclName]; ok {
		// The workload cluster held a port before a restart: it gets that one back.
		ep = rec.endpoint()
		if _, taken := m.ports[ep]; taken {
			err = fmt.Errorf("%w: %s is held by another workload cluster", ErrPortNotHeld, m.describe(ep))
		}
	} else {
		ep, err = m.allocateLocked()
	}
	if err != nil {
		return "", 0, err
	}
	m.ports[ep] = wclName
	m.reservations[wclName] = portReservation{ep: ep, owner: owner, expires: m.now().Add(PortReservationTTL)}
	m.log.V(2).Info("Reserved a port for the workload cluster's claim", "cluster", wclName, "address", m.describe(ep))
	return m.advertised(ep), ep.port, nil
}

// CancelWorkloadClusterPort frees the port owner reserved for the workload cluster, if it is not
// claimed yet.
func (m *WorkloadClustersMux) CancelWorkloadClusterPort(wclName string, owner types.UID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.awaitCreationLocked(wclName)
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
	if m.ports[res.ep] == wclName {
		if l, listening := m.listeners[wclName]; !listening || l.endpoint() != res.ep {
			delete(m.ports, res.ep)
		}
	}
}

// expireReservationsLocked frees the reservations PortReservationTTL left unclaimed; it runs
// before a port is handed out, the only use of a free port.
func (m *WorkloadClustersMux) expireReservationsLocked() {
	now := m.now()
	for key, res := range m.reservations {
		if _, setUp := m.creating[key]; setUp {
			continue // the set-up takes it, or gives it back to expire later
		}
		if !now.Before(res.expires) {
			m.log.V(2).Info("Port reservation expired unclaimed", "cluster", key, "address", m.describe(res.ep))
			m.dropReservationLocked(key)
		}
	}
}
