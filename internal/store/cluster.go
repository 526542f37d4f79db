package store

import (
	"fmt"
	"reflect"
	"strconv"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/storage"
)

// Cluster is one workload cluster's store. Every error returned is an *apierrors.StatusError.
//
// Stored objects are never mutated: every write stores a fresh object, so readers copy them
// outside the lock and events can share them with the history.
type Cluster struct {
	name string

	mu      clusterLock
	version string
	objs    *storage.Objects // the objects, their resourceVersions, history and disk copy
	// custom is the resources CRDs define in this cluster (customresources.go).
	custom atomic.Pointer[customKinds]
	// readHooks run before reads of their resources (readhook.go); nil while there are none.
	readHooks atomic.Pointer[[]*readHook]
	watchers  map[*Watcher]struct{} // nil while nobody watches
	// rvWaiters are reads waiting for a resourceVersion the cluster has not reached (fresh.go).
	rvWaiters []rvWaiter
	// informers receive every committed change of their resources (inform.go); nil when none.
	informers []*informer
	// stopSimulator ends the simulated components attached by the manager's Simulator; nil when none.
	stopSimulator func()
	// expiry fires when the oldest event outlives the history's ttl, so an idle cluster does not keep
	// old object versions alive; nil while the history is empty (no cost when idle for long).
	expiry *time.Timer
	closed bool
	// quota bounds the size of the stored objects (0: none).
	quota int64
}

// defaultNamespaces are created in every new cluster, as a real control plane does.
var defaultNamespaces = []string{metav1.NamespaceDefault, "kube-node-lease", metav1.NamespacePublic, metav1.NamespaceSystem}

var namespacesGVR = corev1.SchemeGroupVersion.WithResource("namespaces")

// sharedResources are the resources whose objects every cluster holds alike: the default
// namespaces, kube-apiserver's default RBAC policy, kubeadm's roles, bindings, ConfigMaps and
// ServiceAccounts. Their objects are stored as references to content held once for all clusters
// (storage's shared.go): a cluster keeps only their identity. Objects written often (pods, nodes,
// leases) are not worth the hashing of every version; services are the endpoint controller's to
// cache.
var sharedResources = []schema.GroupResource{
	{Resource: "namespaces"},
	{Resource: "configmaps"},
	{Resource: "serviceaccounts"},
	{Group: rbacv1.GroupName, Resource: "clusterroles"},
	{Group: rbacv1.GroupName, Resource: "clusterrolebindings"},
	{Group: rbacv1.GroupName, Resource: "roles"},
	{Group: rbacv1.GroupName, Resource: "rolebindings"},
}

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
	maxBytes := opts.EventHistoryBytes
	if maxBytes <= 0 {
		maxBytes = DefaultEventHistoryBytes
	}
	c := &Cluster{
		name:    name,
		version: opts.KubernetesVersion,
		objs:    storage.NewObjects(name, storage.HistoryOptions{Limit: limit, TTL: ttl, MaxBytes: maxBytes}, db),
		quota:   opts.StorageQuota,
	}
	c.objs.Share(sharedResources...)
	c.objs.OnRelocate(c.informRelocatedLocked)
	if c.quota == 0 {
		c.quota = DefaultStorageQuota
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	loaded := false
	if db != nil {
		var err error
		if loaded, err = c.loadLocked(); err != nil {
			return nil, err
		}
	}
	if loaded {
		c.loadCustomKindsLocked()
		return c, nil
	}
	b, _ := behaviorFor(namespacesGVR)
	for _, ns := range defaultNamespaces {
		obj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
		if _, err := c.createLocked(b, obj, false, "kube-apiserver", false); err != nil {
			return nil, err
		}
	}
	if err := c.objs.LastCommit().Wait(); err != nil {
		return nil, fmt.Errorf("storing the new workload cluster %s: %w", name, err)
	}
	return c, nil
}

// close ends all watches of a deleted cluster.
func (c *Cluster) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	c.objs.Close()
	c.releaseCustomKindsLocked()
	if c.expiry != nil {
		c.expiry.Stop()
		c.expiry = nil
	}
	for w := range c.watchers {
		w.stopLocked() // also ends watches whose client stopped reading
	}
	c.wakeRVWaitersLocked(c.objs.ResourceVersion())
}

// deletedError answers a write to a cluster that was deleted (a client or simulator still holding
// it): its state is gone from disk and must not come back under its name.
func (c *Cluster) deletedError() error {
	return apierrors.NewServiceUnavailable(fmt.Sprintf("workload cluster %s has been deleted", c.name))
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
	if u, ok := obj.(*unstructured.Unstructured); ok && b.custom {
		if u.GetKind() != b.info.Kind || (u.GetAPIVersion() != "" && u.GetAPIVersion() != b.info.GVR.GroupVersion().String()) {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("object kind %v does not match resource kind %v", u.GroupVersionKind(), b.info.GVK()))
		}
		out := u.DeepCopy()
		out.SetGroupVersionKind(b.info.GVK())
		return out, nil
	}
	if b.custom {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("object of type %T is not a %s", obj, b.info.Kind))
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

func (c *Cluster) getLocked(gr schema.GroupResource, key string) client.Object {
	return c.objs.Get(gr, key)
}

func now() metav1.Time { return metav1.NewTime(time.Now().Truncate(time.Second)) }

func formatRV(rv uint64) string { return strconv.FormatUint(rv, 10) }

// Get returns a deep copy of the named object.
func (c *Cluster) Get(gvr schema.GroupVersionResource, namespace, name string) (runtime.Object, error) {
	return c.get(gvr, namespace, name, true)
}

// get is Get; without settle it answers from memory at once (ListOptions.SkipSyncWait).
func (c *Cluster) get(gvr schema.GroupVersionResource, namespace, name string, settle bool) (runtime.Object, error) {
	b, err := c.lookup(gvr)
	if err != nil {
		return nil, err
	}
	if b.storedAs != nil {
		return c.getView(b, namespace, name)
	}
	if namespace, err = b.requestNamespace(namespace); err != nil {
		return nil, err
	}
	c.beforeRead(gvr.GroupResource(), namespace)
	c.mu.RLock()
	obj := c.getLocked(gvr.GroupResource(), storage.Key(namespace, name))
	commit := c.objs.LastCommit()
	c.mu.RUnlock()
	if settle && !c.settled(commit) {
		return c.get(gvr, namespace, name, settle) // what it read was undone: read again
	}
	if obj == nil {
		return nil, apierrors.NewNotFound(gvr.GroupResource(), name)
	}
	return obj.DeepCopyObject(), nil
}

// emitted wakes the watchers of a committed change's kind. Callers hold c.mu.
func (c *Cluster) emitted(e *storage.Event) {
	if c.expiry == nil && !c.closed {
		c.armExpiry()
	}
	for w := range c.watchers {
		if w.gr == e.GroupResource() {
			w.wake()
		}
	}
	if c.rvWaiters != nil {
		c.wakeRVWaitersLocked(e.RV)
	}
}

// armExpiry schedules expireHistory for when the oldest event outlives the history's ttl. Callers hold c.mu.
func (c *Cluster) armExpiry() {
	at, ok := c.objs.NextExpiry()
	if !ok {
		return
	}
	// A millisecond of slack makes the oldest event certainly expired when the timer fires.
	c.expiry = time.AfterFunc(time.Until(at)+time.Millisecond, c.expireHistory)
}

func (c *Cluster) expireHistory() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.expiry = nil
	if c.closed {
		return
	}
	c.objs.ExpireEvents(time.Now().UnixNano())
	c.armExpiry()
}

// storeLocked commits obj as the new version of an object (old: the version it replaces, nil for
// a new object): a fresh resourceVersion, the disk and the watch history (storage), the
// watchers and informers. The registry then serves what a CRD change defines.
func (c *Cluster) storeLocked(gr schema.GroupResource, obj, old client.Object) {
	e := c.objs.Put(gr, obj, old)
	c.emitted(e)
	c.informLocked(gr, e.Key, old, obj)
	c.reactLocked(gr, old, obj)
}

// eraseLocked commits the removal of old (last is a private copy of its final state, which the
// watch event carries).
func (c *Cluster) eraseLocked(gr schema.GroupResource, old, last client.Object) {
	e := c.objs.Delete(gr, old, last)
	c.emitted(e)
	c.informLocked(gr, e.Key, old, nil)
	c.reactLocked(gr, old, nil)
}
