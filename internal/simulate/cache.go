package simulate

import (
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

var (
	podsGR        = corev1.SchemeGroupVersion.WithResource("pods").GroupResource()
	nodesGR       = corev1.SchemeGroupVersion.WithResource("nodes").GroupResource()
	replicaSetsGR = appsv1.SchemeGroupVersion.WithResource("replicasets").GroupResource()
	deploymentsGR = appsv1.SchemeGroupVersion.WithResource("deployments").GroupResource()
	daemonSetsGR  = appsv1.SchemeGroupVersion.WithResource("daemonsets").GroupResource()
	pdbsGR        = policyv1.SchemeGroupVersion.WithResource("poddisruptionbudgets").GroupResource()
)

// cache is a cluster's informer cache, shared by its controllers: the stored objects of the
// watched kinds (the store's own immutable objects, never copies: nobody may modify them), with
// the indexes the controllers look up. The store's informer keeps it, under the store's lock,
// before any controller hears of a change, so a controller's read after its own write sees it.
type cache struct {
	mu   sync.RWMutex
	objs map[schema.GroupResource]map[string]client.Object // by namespace/name
	// podsByNode: pods bound to each node, by key.
	podsByNode map[string]map[string]*corev1.Pod
	// podsByNamespace: every pod, by namespace and key (selectors look there).
	podsByNamespace map[string]map[string]*corev1.Pod
	// byController: the keys of objects by their kind and their controller's UID (an entry is
	// a key and no more: a cluster has one per pod).
	byController map[schema.GroupResource]map[types.UID]map[string]struct{}
}

type objKey struct {
	gr  schema.GroupResource
	key string
}

func newCache() *cache {
	return &cache{
		objs:            map[schema.GroupResource]map[string]client.Object{},
		podsByNode:      map[string]map[string]*corev1.Pod{},
		podsByNamespace: map[string]map[string]*corev1.Pod{},
		byController:    map[schema.GroupResource]map[types.UID]map[string]struct{}{},
	}
}

// changedObject is the object a change is about: the new version, or the last one of a removal.
func changedObject(ch store.Change) client.Object {
	if ch.New != nil {
		return ch.New
	}
	return ch.Old
}

// changedKey is the key of the object a change is about: the store's own string, so that the
// cache and the controllers' indexes keeping it add no copy of it.
func changedKey(ch store.Change) string {
	if ch.Key != "" {
		return ch.Key
	}
	return keyOf(changedObject(ch))
}

func keyOf(obj client.Object) string {
	if ns := obj.GetNamespace(); ns != "" {
		return ns + "/" + obj.GetName()
	}
	return obj.GetName()
}

// apply records a committed change.
func (c *cache) apply(ch store.Change) {
	key := changedKey(ch)
	c.mu.Lock()
	defer c.mu.Unlock()
	if ch.Old != nil {
		c.unindex(ch.Resource, key, ch.Old)
	}
	m := c.objs[ch.Resource]
	if ch.New == nil {
		delete(m, key)
		return
	}
	if m == nil {
		m = map[string]client.Object{}
		c.objs[ch.Resource] = m
	}
	m[key] = ch.New
	c.index(ch.Resource, key, ch.New)
}

// relocated keeps the new memory of a stored version that moved (store.Change.Relocated), so
// that the old one can be freed; the indexes hold keys and pods, and the pod is the same.
func (c *cache) relocated(ch store.Change) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.objs[ch.Resource]
	if m[ch.Key] != ch.Old {
		return
	}
	m[ch.Key] = ch.New
	if pod, ok := ch.New.(*corev1.Pod); ok {
		replaceIn(c.podsByNamespace, pod.Namespace, ch.Key, pod)
		replaceIn(c.podsByNode, pod.Spec.NodeName, ch.Key, pod)
	}
}

func (c *cache) index(gr schema.GroupResource, key string, obj client.Object) {
	if pod, ok := obj.(*corev1.Pod); ok {
		addTo(c.podsByNamespace, pod.Namespace, key, pod)
		if pod.Spec.NodeName != "" {
			addTo(c.podsByNode, pod.Spec.NodeName, key, pod)
		}
	}
	if ref := metav1.GetControllerOfNoCopy(obj); ref != nil {
		byUID := c.byController[gr]
		if byUID == nil {
			byUID = map[types.UID]map[string]struct{}{}
			c.byController[gr] = byUID
		}
		set := byUID[ref.UID]
		if set == nil {
			set = map[string]struct{}{}
			byUID[ref.UID] = set
		}
		set[key] = struct{}{}
	}
}

func (c *cache) unindex(gr schema.GroupResource, key string, obj client.Object) {
	if pod, ok := obj.(*corev1.Pod); ok {
		removeFrom(c.podsByNamespace, pod.Namespace, key)
		if pod.Spec.NodeName != "" {
			removeFrom(c.podsByNode, pod.Spec.NodeName, key)
		}
	}
	if ref := metav1.GetControllerOfNoCopy(obj); ref != nil {
		byUID := c.byController[gr]
		if set := byUID[ref.UID]; set != nil {
			delete(set, key)
			if len(set) == 0 {
				delete(byUID, ref.UID)
				if len(byUID) == 0 {
					delete(c.byController, gr)
				}
			}
		}
	}
}

func addTo[V any](m map[string]map[string]V, outer, key string, v V) {
	inner := m[outer]
	if inner == nil {
		inner = map[string]V{}
		m[outer] = inner
	}
	inner[key] = v
}

// replaceIn replaces what m holds at outer and key, if it holds something there.
func replaceIn[V any](m map[string]map[string]V, outer, key string, v V) {
	if inner := m[outer]; inner != nil {
		if _, ok := inner[key]; ok {
			inner[key] = v
		}
	}
}

func removeFrom[V any](m map[string]map[string]V, outer, key string) {
	if inner := m[outer]; inner != nil {
		delete(inner, key)
		if len(inner) == 0 {
			delete(m, outer)
		}
	}
}

// get returns the cached object, nil when there is none.
func (c *cache) get(gr schema.GroupResource, key string) client.Object {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.objs[gr][key]
}

// list returns every cached object of a kind.
func (c *cache) list(gr schema.GroupResource) []client.Object {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]client.Object, 0, len(c.objs[gr]))
	for _, o := range c.objs[gr] {
		out = append(out, o)
	}
	return out
}

// owned returns the objects of kind gr whose controller has the UID.
func (c *cache) owned(gr schema.GroupResource, uid types.UID) []client.Object {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var out []client.Object
	for key := range c.byController[gr][uid] {
		if o := c.objs[gr][key]; o != nil {
			out = append(out, o)
		}
	}
	return out
}

// podsOn returns the pods bound to a node.
func (c *cache) podsOn(node string) []*corev1.Pod {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]*corev1.Pod, 0, len(c.podsByNode[node]))
	for _, p := range c.podsByNode[node] {
		out = append(out, p)
	}
	return out
}

// podsIn returns the pods of a namespace.
func (c *cache) podsIn(namespace string) []*corev1.Pod {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]*corev1.Pod, 0, len(c.podsByNamespace[namespace]))
	for _, p := range c.podsByNamespace[namespace] {
		out = append(out, p)
	}
	return out
}

// nodes returns every Node.
func (c *cache) nodes() []*corev1.Node {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]*corev1.Node, 0, len(c.objs[nodesGR]))
	for _, o := range c.objs[nodesGR] {
		out = append(out, o.(*corev1.Node))
	}
	return out
}
