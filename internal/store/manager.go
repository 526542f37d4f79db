package store

import (
	"sort"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
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
	// PodStopDelay is how long the simulated kubelet takes to stop a gracefully deleted pod's
	// containers (never longer than the pod's grace period); 0 means DefaultPodStopDelay.
	PodStopDelay time.Duration
}

// DefaultPodStopDelay: containers that exit promptly on SIGTERM, as most do.
const DefaultPodStopDelay = time.Second

// DefaultEventHistory is the per-cluster number of retained events when ClusterOptions leaves it 0.
const DefaultEventHistory = 4096

// Manager owns the stores of all workload clusters.
type Manager struct {
	mu       sync.RWMutex
	clusters map[string]*Cluster
}

// NewManager returns an empty manager.
func NewManager() *Manager {
	shared() // build the scheme once up front rather than under the first request
	return &Manager{clusters: map[string]*Cluster{}}
}

// AddCluster creates the store of a workload cluster with the default namespaces
// (default, kube-public, kube-system, kube-node-lease). It fails with AlreadyExists.
func (m *Manager) AddCluster(name string, opts ClusterOptions) (*Cluster, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.clusters[name]; ok {
		return nil, apierrors.NewAlreadyExists(schema.GroupResource{Resource: "clusters"}, name)
	}
	c, err := newCluster(name, opts)
	if err != nil {
		return nil, err
	}
	m.clusters[name] = c
	return c, nil
}

// GetCluster returns the named cluster store.
func (m *Manager) GetCluster(name string) (*Cluster, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	c, ok := m.clusters[name]
	return c, ok
}

// DeleteCluster forgets the named cluster and ends all its watches.
func (m *Manager) DeleteCluster(name string) {
	m.mu.Lock()
	c, ok := m.clusters[name]
	delete(m.clusters, name)
	m.mu.Unlock()
	if ok {
		c.close()
	}
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
