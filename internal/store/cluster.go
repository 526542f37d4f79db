package store

import (
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/storage"
)

// Cluster is one workload cluster's store. Every error returned is an *apierrors.StatusError.
//
// Stored objects are never mutated: every write stores a fresh object, so readers copy them
// outside the lock and events can share them with the history.
type Cluster struct {
	name string

	mu      sync.RWMutex
	version string
	rv      uint64                                            // last assigned resourceVersion
	objects map[schema.GroupResource]map[string]client.Object // per-kind maps, created lazily
	hist    history
	// deps indexes dependents by owner UID for garbage collection; nil until an object has owners.
	deps     map[types.UID]map[objRef]struct{}
	watchers map[*Watcher]struct{} // nil while nobody watches
	// expiry fires when the oldest event outlives the history's ttl, so an idle cluster does not keep
	// old object versions alive; nil while the history is empty (no cost when idle for long).
	expiry *time.Timer
	closed bool
	enc    encodedCache // encodings of recently read objects (see GetEncoded)
	// podStopDelay: see ClusterOptions.PodStopDelay.
	podStopDelay time.Duration
	// bytes is the size of the stored objects (sizeOf), quota its bound (0: none).
	bytes, quota int64
	// db keeps the cluster's objects on disk; nil for a memory-only store.
	db *storage.DB
	// commit is the last write queued to db: a write method waits for it before answering.
	commit storage.Commit
}

// objRef locates a stored object.
type objRef struct {
	gr  schema.GroupResource
	key string
}

// defaultNamespaces are created in every new cluster, as a real control plane does.
var defaultNamespaces = []string{metav1.NamespaceDefault, "kube-node-lease", metav1.NamespacePublic, metav1.NamespaceSystem}

var namespacesGVR = corev1.SchemeGroupVersion.WithResource("namespaces")

// newCluster creates a cluster store, loading its objects from db when db holds some.
func newCluster(name string, opts ClusterOptions, db *storage.DB) (*Cluster, error) {
	limit := opts.EventHistory
	if limit <= 0 {
		limit = DefaultEventHistory
	}
	ttl := opts.EventHistoryTTL
	if ttl <= 0 {
		ttl = DefaultEventHistoryTTL
	}
	c := &Cluster{
		name:    name,
		version: opts.KubernetesVersion,
		objects: map[schema.GroupResource]map[string]client.Object{},
		hist:    history{limit: limit, ttl: ttl, maxBytes: opts.EventHistoryBytes},
		quota:   opts.StorageQuota,

		podStopDelay: opts.PodStopDelay,
		db:           db,
	}
	if c.podStopDelay <= 0 {
		c.podStopDelay = DefaultPodStopDelay
	}
	if c.hist.maxBytes <= 0 {
		c.hist.maxBytes = DefaultEventHistoryBytes
	}
	if c.quota == 0 {
		c.quota = DefaultStorageQuota
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rv = initialResourceVersion(0)
	loaded := false
	if db != nil {
		var err error
		if loaded, err = c.loadLocked(); err != nil {
			return nil, err
		}
	}
	// Nothing before this point can be replayed: clients holding older resourceVersions (from an
	// earlier life of this cluster) get 410 Gone and relist, as after an etcd compaction.
	c.hist.floor = c.rv
	if loaded {
		return c, nil
	}
	b, _ := behaviorFor(namespacesGVR)
	for _, ns := range defaultNamespaces {
		obj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
		if _, err := c.createLocked(b, obj, false, "kube-apiserver", false); err != nil {
			return nil, err
		}
	}
	if err := c.commit.Wait(); err != nil {
		return nil, fmt.Errorf("storing the new workload cluster %s: %w", name, err)
	}
	return c, nil
}

// close ends all watches of a deleted cluster.
func (c *Cluster) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	c.enc.entries, c.enc.bytes = nil, 0
	if c.expiry != nil {
		c.expiry.Stop()
		c.expiry = nil
	}
	for w := range c.watchers {
		w.stopLocked() // also ends watches whose client stopped reading
	}
}

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

// objectKey is the storage key: "namespace/name" or "name", ordered like the real API server's
// etcd keys so pagination walks objects in the same order.
func objectKey(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}

// lookup resolves a served resource or answers 404 like the API server does for unknown paths.
func lookup(gvr schema.GroupVersionResource) (*servedResource, error) {
	b, ok := behaviorFor(gvr)
	if !ok {
		return nil, apierrors.NewNotFound(gvr.GroupResource(), "")
	}
	return b, nil
}

// requestNamespace normalises the namespace of a request for the kind.
func (b *servedResource) requestNamespace(namespace string) (string, error) {
	if !b.info.Namespaced {
		return "", nil
	}
	if namespace == "" {
		return "", apierrors.NewBadRequest("namespace is required for namespaced resource " + b.info.GVR.Resource)
	}
	return namespace, nil
}

// typedCopy returns a private typed copy of a request object, converting unstructured input.
func (b *servedResource) typedCopy(obj runtime.Object) (client.Object, error) {
	if obj == nil || reflect.ValueOf(obj).IsNil() {
		return nil, apierrors.NewBadRequest("no object provided")
	}
	if u, ok := obj.(*unstructured.Unstructured); ok {
		if gvk := u.GroupVersionKind(); !gvk.Empty() && gvk != b.info.GVK() {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("object kind %v does not match resource kind %v", gvk, b.info.GVK()))
		}
		out := reflect.New(b.goType).Interface().(client.Object)
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, out); err != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("invalid object: %v", err))
		}
		out.GetObjectKind().SetGroupVersionKind(b.info.GVK())
		return out, nil
	}
	if reflect.TypeOf(obj) != reflect.PointerTo(b.goType) {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("object of type %T is not a %s", obj, b.info.Kind))
	}
	out := obj.DeepCopyObject().(client.Object)
	out.GetObjectKind().SetGroupVersionKind(b.info.GVK())
	return out, nil
}

func (c *Cluster) kindMap(gr schema.GroupResource) map[string]client.Object {
	m := c.objects[gr]
	if m == nil {
		m = map[string]client.Object{}
		c.objects[gr] = m
	}
	return m
}

func (c *Cluster) getLocked(gr schema.GroupResource, key string) client.Object {
	return c.objects[gr][key]
}

func now() metav1.Time { return metav1.NewTime(time.Now().Truncate(time.Second)) }

func formatRV(rv uint64) string { return fmt.Sprintf("%d", rv) }

// Get returns a deep copy of the named object.
func (c *Cluster) Get(gvr schema.GroupVersionResource, namespace, name string) (runtime.Object, error) {
	b, err := lookup(gvr)
	if err != nil {
		return nil, err
	}
	if b.storedAs != nil {
		return c.getView(b, namespace, name)
	}
	if namespace, err = b.requestNamespace(namespace); err != nil {
		return nil, err
	}
	c.mu.RLock()
	obj := c.getLocked(gvr.GroupResource(), objectKey(namespace, name))
	c.mu.RUnlock()
	if obj == nil {
		return nil, apierrors.NewNotFound(gvr.GroupResource(), name)
	}
	return obj.DeepCopyObject(), nil
}

// emit records a change in the history and wakes the watchers of its kind. Callers hold c.mu.
func (c *Cluster) emit(typ watch.EventType, gr schema.GroupResource, key string, obj, old client.Object, rv uint64, size int) {
	c.hist.add(&event{typ: typ, rv: rv, at: time.Now().UnixNano(), gr: gr, key: key, obj: obj, old: old, size: size})
	if c.expiry == nil && !c.closed {
		c.armExpiry()
	}
	for w := range c.watchers {
		if w.gr == gr {
			w.wake()
		}
	}
}

// armExpiry schedules expireHistory for when the oldest event outlives the history's ttl. Callers hold c.mu.
func (c *Cluster) armExpiry() {
	at, ok := c.hist.oldest()
	if !ok {
		return
	}
	// A millisecond of slack makes the oldest event certainly expired when the timer fires.
	c.expiry = time.AfterFunc(time.Duration(at+int64(c.hist.ttl)-time.Now().UnixNano())+time.Millisecond, c.expireHistory)
}

func (c *Cluster) expireHistory() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.expiry = nil
	if c.closed {
		return
	}
	c.hist.expire(time.Now().UnixNano())
	c.armExpiry()
}

// storeLocked commits obj as the new version of an object (old: the version it replaces, nil for
// a new object): a fresh resourceVersion, the owner index, the disk, the watch history. The
// simulated control plane then reacts to the change.
func (c *Cluster) storeLocked(gr schema.GroupResource, obj, old client.Object) {
	c.rv++
	obj.SetResourceVersion(formatRV(c.rv))
	key := objectKey(obj.GetNamespace(), obj.GetName())
	c.kindMap(gr)[key] = obj
	c.enc.drop(objRef{gr: gr, key: key})
	if old != nil {
		c.unindexOwners(gr, key, old)
	}
	c.indexOwners(gr, key, obj)
	c.persistPutLocked(gr, key, obj)
	size := sizeOf(obj)
	c.bytes += int64(size)
	typ := watch.Added
	if old != nil {
		typ = watch.Modified
		c.bytes -= int64(sizeOf(old))
	}
	c.emit(typ, gr, key, obj, old, c.rv, size)
	c.reactLocked(gr, old, obj)
}

// eraseLocked commits the removal of old (last is a private copy of its final state, which the
// watch event carries). The simulated control plane then reacts to it.
func (c *Cluster) eraseLocked(gr schema.GroupResource, old, last client.Object) {
	c.rv++
	last.SetResourceVersion(formatRV(c.rv))
	key := objectKey(old.GetNamespace(), old.GetName())
	delete(c.objects[gr], key)
	c.enc.drop(objRef{gr: gr, key: key})
	c.unindexOwners(gr, key, old)
	c.persistDeleteLocked(gr, key)
	size := sizeOf(old)
	c.bytes -= int64(size)
	c.emit(watch.Deleted, gr, key, last, old, c.rv, size)
	c.reactLocked(gr, old, nil)
}

// namespacedKeys returns the sorted keys of the kind's objects, limited to a namespace if given.
func namespacedKeys(m map[string]client.Object, namespace string) []string {
	keys := make([]string, 0, len(m))
	prefix := namespace + "/"
	for k := range m {
		if namespace == "" || strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}
