package store

import (
	"fmt"
	"sort"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/storage/storagebackend"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/storage"
)

// ClusterOptions configure a new cluster store.
type ClusterOptions struct {
	// KubernetesVersion is served on /version, e.g. "v1.36.3".
	KubernetesVersion string
	// EventHistory bounds how many past events the cluster keeps for watch resume and paginated
	// snapshots; 0 means DefaultEventHistory.
	EventHistory int
	// EventHistoryTTL drops events older than this; 0 means DefaultEventHistoryTTL.
	EventHistoryTTL time.Duration
	// EventHistoryBytes bounds the size of the retained events (their objects' protobuf size);
	// 0 means DefaultEventHistoryBytes.
	EventHistoryBytes int
	// StorageQuota bounds the size of the cluster's objects: writes beyond it answer as
	// kube-apiserver does when etcd's quota is exhausted. 0 means DefaultStorageQuota; negative: none.
	StorageQuota int64
	// Owner is the UID of the object the cluster's state belongs to (its GoofyCluster): state on
	// disk recorded for another UID is not this cluster's and is deleted (see identity.go). Empty:
	// the state of that name is taken as it is, whoever it was recorded for.
	Owner types.UID
}

// DefaultEventHistory is the per-cluster number of retained events when ClusterOptions leaves it 0.
const DefaultEventHistory = 4096

// DefaultEventHistoryTTL bounds how long events are kept when ClusterOptions leaves it 0:
// kube-apiserver's watch cache window (its EventsHistoryWindow, 75 s: the bookmark a watch gets
// every minute, plus a margin), beyond which it answers a watch from an older resourceVersion
// "too old resource version", as the history does. Versions a write superseded are held only
// that long: they were more than a third of an idle cluster's heap while a 5-minute window held
// them.
const DefaultEventHistoryTTL = storagebackend.DefaultEventsHistoryWindow

// DefaultEventHistoryBytes is the per-cluster size of retained events when ClusterOptions leaves
// it 0: 4096 events of a typical 1-2 KiB object fit, a few versions of a multi-MiB CRD do too.
const DefaultEventHistoryBytes = 8 << 20

// Manager owns the stores of all workload clusters.
type Manager struct {
	mu       sync.RWMutex
	clusters map[string]*Cluster
	// adding are the clusters AddCluster is adding with mu released, each with the channel
	// closed once it has ended.
	adding map[string]chan struct{}
	db     *storage.DB // nil: memory only
	sim    Simulator   // nil: nothing runs in the clusters besides the store's own reactions
	// owners is the recorded owner of each cluster's state (identity.go), read from disk on first
	// use; nil until then.
	owners map[string]types.UID
	// checked holds what CheckState found in the state of clusters not loaded: nil (readable) or
	// why not. Forgotten when the cluster is added or its state deleted.
	checked map[string]error
}

// Simulator starts the simulated components of a workload cluster (package simulate): they
// follow the cluster through Inform and write through its Client, as controllers would through
// an API server. Start is called once the cluster's objects are created or loaded, the stop it
// returns when the cluster is deleted.
type Simulator interface {
	Start(c *Cluster) (stop func())
}

// WithSimulator runs sim's components in every cluster of the manager.
func WithSimulator(sim Simulator) ManagerOption { return func(m *Manager) { m.sim = sim } }

// ManagerOption configures a Manager.
type ManagerOption func(*Manager)

// WithStorage keeps every cluster's objects in db: a write is answered once it is on disk, and a
// cluster added again after a restart starts from what db holds.
func WithStorage(db *storage.DB) ManagerOption { return func(m *Manager) { m.db = db } }

// NewManager returns an empty manager; without WithStorage its state lives in memory only.
func NewManager(opts ...ManagerOption) *Manager {
	shared() // build the scheme once up front rather than under the first request
	m := &Manager{clusters: map[string]*Cluster{}, adding: map[string]chan struct{}{}}
	for _, o := range opts {
		o(m)
	}
	return m
}

// Durable reports whether the manager keeps state on disk.
func (m *Manager) Durable() bool { return m.db != nil }

// AddCluster creates the store of a workload cluster: from its state on disk when there is one
// that belongs to opts.Owner (or to no recorded owner), else with the default namespaces
// (default, kube-public, kube-system, kube-node-lease); state recorded for another owner is
// deleted first. It fails with AlreadyExists, or with the reason the state on disk cannot be read.
//
// The state is loaded, or the new cluster's first writes wait to be on disk, with the manager's
// lock released: other clusters are added and looked up meanwhile, and the manager's other calls
// about this cluster wait for the addition to end (awaitAddLocked).
func (m *Manager) AddCluster(name string, opts ClusterOptions) (*Cluster, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.awaitAddLocked(name)
	if _, ok := m.clusters[name]; ok {
		return nil, apierrors.NewAlreadyExists(schema.GroupResource{Resource: "clusters"}, name)
	}
	if err := m.claimStateLocked(name, opts.Owner); err != nil {
		return nil, err
	}
	record, err := m.needsOwnerRecordLocked(name, opts.Owner)
	if err != nil {
		return nil, err
	}
	done := make(chan struct{})
	m.adding[name] = done
	m.mu.Unlock()
	c, err := newCluster(name, opts, m.db)
	var recordErr error
	if err == nil && record {
		recordErr = m.recordOwner(name, opts.Owner)
	}
	m.mu.Lock()
	delete(m.adding, name)
	close(done)
	if err != nil {
		m.noteCheckedLocked(name, err)
		return nil, err
	}
	delete(m.checked, name)
	if recordErr != nil {
		c.close()
		return nil, recordErr
	}
	if record {
		m.owners[name] = opts.Owner
	}
	m.clusters[name] = c
	if m.sim != nil {
		c.stopSimulator = m.sim.Start(c)
	}
	return c, nil
}

// awaitAddLocked waits until the named cluster is not being added (AddCluster), releasing m.mu
// meanwhile. Callers hold m.mu for writing.
func (m *Manager) awaitAddLocked(name string) {
	for {
		done, ok := m.adding[name]
		if !ok {
			return
		}
		m.mu.Unlock()
		<-done
		m.mu.Lock()
	}
}

// GetCluster returns the named cluster store.
func (m *Manager) GetCluster(name string) (*Cluster, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	c, ok := m.clusters[name]
	return c, ok
}

// DeleteCluster forgets the named cluster, ends all its watches and deletes its state on disk.
func (m *Manager) DeleteCluster(name string) error {
	m.mu.Lock()
	m.awaitAddLocked(name)
	c, ok := m.clusters[name]
	delete(m.clusters, name)
	m.mu.Unlock()
	if ok {
		if c.stopSimulator != nil {
			c.stopSimulator()
		}
		c.close()
	}
	return m.dropState(name)
}

func (m *Manager) dropState(name string) error {
	m.mu.Lock()
	wait := m.queueDropLocked(name)
	m.mu.Unlock()
	return wait() // outside the lock: deletions of many clusters share one commit
}

// queueDropLocked queues the deletion of the cluster's state on disk, with its records, and
// forgets what is known of it; it returns the wait for the deletion. Callers hold m.mu: queued
// under it, the deletion keeps its order with AddCluster's writes.
func (m *Manager) queueDropLocked(name string) (wait func() error) {
	delete(m.checked, name)
	delete(m.owners, name)
	if m.db == nil {
		return func() error { return nil }
	}
	c := m.db.DropBucket(name)
	return func() error {
		if err := c.Wait(); err != nil {
			return fmt.Errorf("deleting the state of workload cluster %s: %w", name, err)
		}
		return nil
	}
}

// DeleteStateExcept deletes the state on disk of every cluster not named in keep and not loaded:
// clusters deleted while the process was down. It returns the names it deleted.
func (m *Manager) DeleteStateExcept(keep []string) ([]string, error) {
	if m.db == nil {
		return nil, nil
	}
	names, err := m.db.Buckets()
	if err != nil {
		return nil, err
	}
	wanted := map[string]bool{}
	for _, k := range keep {
		wanted[k] = true
	}
	var deleted []string
	for _, n := range names {
		if wanted[n] || m.loadedOrAdded(n) {
			continue
		}
		if err := m.dropState(n); err != nil {
			return deleted, err
		}
		deleted = append(deleted, n)
	}
	return deleted, nil
}

// loadedOrAdded reports whether the named cluster is loaded or being added.
func (m *Manager) loadedOrAdded(name string) bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	_, loaded := m.clusters[name]
	_, adding := m.adding[name]
	return loaded || adding
}

// ClusterNames returns the names of all clusters, sorted.
func (m *Manager) ClusterNames() []string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	names := make([]string, 0, len(m.clusters))
	for n := range m.clusters {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Close stops every cluster's simulated components and ends its watches, keeping its state on
// disk: what a process's end does, for tests that restart a manager on the same storage.
func (m *Manager) Close() {
	m.mu.Lock()
	for name := range m.adding {
		m.awaitAddLocked(name)
	}
	clusters := m.clusters
	m.clusters = map[string]*Cluster{}
	m.mu.Unlock()
	for _, c := range clusters {
		if c.stopSimulator != nil {
			c.stopSimulator()
		}
		c.close()
	}
}
