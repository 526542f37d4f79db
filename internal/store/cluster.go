package store

import (
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Cluster is one workload cluster's store. Every error returned is an *apierrors.StatusError.
type Cluster struct {
	name string

	mu      sync.RWMutex
	version string
}

func newCluster(name string, opts ClusterOptions) (*Cluster, error) {
	return &Cluster{name: name, version: opts.KubernetesVersion}, nil
}

func (c *Cluster) close() {}

// Name returns the cluster name.
func (c *Cluster) Name() string { return c.name }

// KubernetesVersion returns the version served on /version.
func (c *Cluster) KubernetesVersion() string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.version
}

// SetKubernetesVersion changes the version served on /version (e.g. during an upgrade).
func (c *Cluster) SetKubernetesVersion(v string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.version = v
}

var errTODO = apierrors.NewServiceUnavailable("not implemented yet")

// Get returns a deep copy of the named object.
func (c *Cluster) Get(gvr schema.GroupVersionResource, namespace, name string) (runtime.Object, error) {
	return nil, errTODO
}

// List returns a typed *XxxList.
func (c *Cluster) List(gvr schema.GroupVersionResource, namespace string, opts ListOptions) (runtime.Object, error) {
	return nil, errTODO
}

// Create stores a new object.
func (c *Cluster) Create(gvr schema.GroupVersionResource, namespace string, obj runtime.Object, opts CreateOptions) (runtime.Object, error) {
	return nil, errTODO
}

// Update replaces an object.
func (c *Cluster) Update(gvr schema.GroupVersionResource, namespace string, obj runtime.Object, opts UpdateOptions) (runtime.Object, error) {
	return nil, errTODO
}

// Patch patches an object.
func (c *Cluster) Patch(gvr schema.GroupVersionResource, namespace, name string, pt types.PatchType, data []byte, opts PatchOptions) (runtime.Object, error) {
	return nil, errTODO
}

// Delete deletes an object.
func (c *Cluster) Delete(gvr schema.GroupVersionResource, namespace, name string, opts DeleteOptions) (runtime.Object, error) {
	return nil, errTODO
}

// DeleteCollection deletes all matching objects.
func (c *Cluster) DeleteCollection(gvr schema.GroupVersionResource, namespace string, listOpts ListOptions, opts DeleteOptions) (runtime.Object, error) {
	return nil, errTODO
}

// Watch streams changes.
func (c *Cluster) Watch(gvr schema.GroupVersionResource, namespace string, opts ListOptions) (watch.Interface, error) {
	return nil, errTODO
}

// Client returns a controller-runtime client straight on this store.
func (c *Cluster) Client() client.Client {
	return nil
}
