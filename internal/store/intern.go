package store

import (
	"crypto/sha256"
	"encoding/binary"
	"reflect"
	"slices"
	"sync"
	"unique"
	"unsafe"
	"weak"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// One process holds thousands of simulated clusters whose objects carry the same labels,
// annotations and RBAC rules: kube-apiserver's default policy alone is 75 objects per cluster,
// every one labelled and annotated alike, admin, edit and view with long aggregated rule lists.
// Stored objects are never mutated (readers and writers copy them), so equal values can be one
// value: an object about to be stored takes the shared copy of its labels, annotations and, for
// RBAC kinds, its rules and subjects. The tables are weak (weakTable): a value that no stored
// object (nor anything else) uses any more is collected and its entry swept, so a fleet's unique
// values (every node's hostname label, every cluster's own owner references) never fill a table
// and stop what comes after them from being shared.

var (
	internedMaps     weakTable[mapHeader]
	internedRules    weakTable[rbacv1.PolicyRule]
	internedSubjects weakTable[rbacv1.Subject]
)

// internObject points obj, which its caller owns and is about to store, at the shared copies of
// its labels, annotations, and RBAC rules or subjects.
func internObject(obj client.Object) {
	if l := obj.GetLabels(); len(l) > 0 {
		obj.SetLabels(internMap(l))
	}
	if a := obj.GetAnnotations(); len(a) > 0 {
		obj.SetAnnotations(internMap(a))
	}
	switch o := obj.(type) {
	case *rbacv1.ClusterRole:
		o.Rules = internProto(&internedRules, o.Rules)
	case *rbacv1.Role:
		o.Rules = internProto(&internedRules, o.Rules)
	case *rbacv1.ClusterRoleBinding:
		o.Subjects = internProto(&internedSubjects, o.Subjects)
	case *rbacv1.RoleBinding:
		o.Subjects = internProto(&internedSubjects, o.Subjects)
	case *corev1.Pod:
		internPod(o)
	case *corev1.Node:
		internNode(o)
	}
}

// maxInternedMap is the largest label or annotation set interned (bytes of keys and values):
// larger ones, such as last-applied-configuration annotations, are rarely shared.
const maxInternedMap = 1024

func internMap(m map[string]string) map[string]string {
	return internByKey(&internedMaps, m, func(v string) string { return v }, maxInternedMap)
}

// internByKey returns the table's map of the same content as m (its keys and each value's
// canonical form, key order aside), adding m when there is none; a map larger than limit bytes
// (0: no limit) is left as it is.
func internByKey[K ~string, V any](t *weakTable[mapHeader], m map[K]V, canonicalValue func(V) string, limit int) map[K]V {
	if len(m) == 0 {
		return m
	}
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	bp := canonicalBuffers.Get().(*[]byte)
	defer canonicalBuffers.Put(bp)
	canonical := (*bp)[:0]
	for _, k := range keys {
		canonical = append(append(append(append(canonical, k...), 0), canonicalValue(m[k])...), 0)
	}
	*bp = canonical
	if limit > 0 && len(canonical) > limit {
		return m
	}
	header, _ := t.intern(canonical, (*mapHeader)(reflect.ValueOf(m).UnsafePointer()), len(m))
	return *(*map[K]V)(unsafe.Pointer(&header))
}

// mapHeader stands for the runtime's header of a map. A map value is one pointer, to its header
// (reflect.Value.UnsafePointer returns it), so the table's weak pointer to a shared map is one to
// its header, and the map is that pointer again.
type mapHeader struct{}

// Pods are the objects a fleet holds most of, thousands per cluster, and each is written several
// times (created, bound, started). The pods of one template (a ReplicaSet's, a DaemonSet's) have
// the same containers, tolerations, volumes and owner, and the pods a cluster's kubelets start
// in the same second have the same conditions: a pod about to be stored takes the shared copy of
// each, so its versions and its siblings hold them once. These tables are weak: a value no stored
// object (nor anything else) uses any more is collected, and its entry swept, so they bound
// nothing and need no bound.

var (
	internedContainers  weakTable[corev1.Container]
	internedTolerations weakTable[corev1.Toleration]
	internedVolumes     weakTable[corev1.Volume]
	internedOwners      weakTable[metav1.OwnerReference]
	internedConditions  weakTable[corev1.PodCondition]
	internedPodSecurity weakTable[corev1.PodSecurityContext]
	// A node's pods have its host addresses, its host-network pods (static pods, DaemonSets such
	// as kube-proxy) its pod addresses too, and the containers of one template started in the
	// same second without a container ID (the simulated control plane's static pods) report the
	// same status.
	internedContainerStatuses weakTable[corev1.ContainerStatus]
	internedHostIPs           weakTable[corev1.HostIP]
	internedPodIPs            weakTable[corev1.PodIP]
)

// internPod points pod, which its caller owns and is about to store, at the shared copies of its
// parts that its siblings and earlier versions have alike.
func internPod(pod *corev1.Pod) {
	pod.OwnerReferences = internProto(&internedOwners, pod.OwnerReferences)
	pod.Spec.InitContainers = internProto(&internedContainers, pod.Spec.InitContainers)
	pod.Spec.Containers = internProto(&internedContainers, pod.Spec.Containers)
	pod.Spec.Tolerations = internProto(&internedTolerations, pod.Spec.Tolerations)
	pod.Spec.Volumes = internProto(&internedVolumes, pod.Spec.Volumes)
	if len(pod.Spec.NodeSelector) > 0 {
		pod.Spec.NodeSelector = internMap(pod.Spec.NodeSelector)
	}
	if sc := pod.Spec.SecurityContext; sc != nil {
		pod.Spec.SecurityContext = &internProto(&internedPodSecurity, []corev1.PodSecurityContext{*sc})[0]
	}
	pod.Status.Conditions = internProto(&internedConditions, pod.Status.Conditions)
	pod.Status.HostIPs = internProto(&internedHostIPs, pod.Status.HostIPs)
	// Values unique by construction are not looked up: an entry per pod would cost more than it
	// shares. A pod network address is one pod's, and so is a status that names its container.
	if pod.Spec.HostNetwork {
		pod.Status.PodIPs = internProto(&internedPodIPs, pod.Status.PodIPs)
	}
	if !slices.ContainsFunc(pod.Status.ContainerStatuses, func(s corev1.ContainerStatus) bool { return s.ContainerID != "" }) {
		pod.Status.ContainerStatuses = internProto(&internedContainerStatuses, pod.Status.ContainerStatuses)
	}
}

// Nodes are written by their kubelets with the same capacity, conditions (in the same second) and
// system information as their siblings; a fleet holds thousands of them, and the two resource
// lists alone (a map of quantities each) are most of a Node's memory.

var (
	internedNodeConditions weakTable[corev1.NodeCondition]
	internedTaints         weakTable[corev1.Taint]
	internedResourceLists  weakTable[mapHeader]
)

// internNode points node, which its caller owns and is about to store, at the shared copies of
// its parts that its siblings and earlier versions have alike.
func internNode(node *corev1.Node) {
	node.Spec.Taints = internProto(&internedTaints, node.Spec.Taints)
	node.Status.Conditions = internProto(&internedNodeConditions, node.Status.Conditions)
	node.Status.Capacity = internResourceList(node.Status.Capacity)
	node.Status.Allocatable = internResourceList(node.Status.Allocatable)
	info := &node.Status.NodeInfo
	for _, s := range []*string{&info.KernelVersion, &info.OSImage, &info.ContainerRuntimeVersion,
		&info.KubeletVersion, &info.OperatingSystem, &info.Architecture} {
		*s = unique.Make(*s).Value()
	}
}

// internResourceList returns the table's resource list of the same quantities as l (by their
// canonical form, which is what is served), adding l when there is none.
func internResourceList(l corev1.ResourceList) corev1.ResourceList {
	return internByKey(&internedResourceLists, l, func(q resource.Quantity) string { return q.String() }, 0)
}

// protoElem is a pointer to an element of a built-in kind: its protobuf encoding, deterministic
// (maps are encoded in key order), is its content as bytes.
type protoElem[E any] interface {
	*E
	Size() int
	MarshalToSizedBuffer([]byte) (int, error)
}

// canonicalBuffers are the buffers the parts' encodings are hashed from: every pod write encodes
// a few, and none outlives the lookup.
var canonicalBuffers = sync.Pool{New: func() any { return new([]byte) }}

// internProto returns the table's slice of the same content as v, adding v (its spare capacity
// cut, so that appending to a shared slice never writes into it) when there is none.
func internProto[E any, P protoElem[E]](t *weakTable[E], v []E) []E {
	if len(v) == 0 {
		return v
	}
	bp := canonicalBuffers.Get().(*[]byte)
	defer canonicalBuffers.Put(bp)
	canonical := (*bp)[:0]
	for i := range v {
		n := P(&v[i]).Size()
		canonical = binary.AppendUvarint(canonical, uint64(n))
		start := len(canonical)
		canonical = slices.Grow(canonical, n)[:start+n]
		if _, err := P(&v[i]).MarshalToSizedBuffer(canonical[start:]); err != nil {
			return v
		}
	}
	*bp = canonical
	first, n := t.intern(canonical, &v[0], len(v))
	return unsafe.Slice(first, n)
}

// weakTable shares values by content (slices by their first element, maps by their header), for
// as long as something uses them.
type weakTable[T any] struct {
	mu     sync.Mutex
	values map[[sha256.Size]byte]weakValue[T]
	// live is the number of entries after the last sweep of collected ones; the next sweep is
	// due when the table has doubled since, so sweeping costs O(1) per insertion.
	live int
}

// weakValue is a value the table does not keep alive: where it starts, and its length.
type weakValue[T any] struct {
	first weak.Pointer[T]
	n     int
}

// intern returns the table's value of canonical's content, or first and n (a value starting at
// first, of length n) when the table has none or its value was collected.
func (t *weakTable[T]) intern(canonical []byte, first *T, n int) (*T, int) {
	key := sha256.Sum256(canonical)
	t.mu.Lock()
	defer t.mu.Unlock()
	if w, ok := t.values[key]; ok {
		if shared := w.first.Value(); shared != nil {
			return shared, w.n
		}
	}
	if t.values == nil {
		t.values = map[[sha256.Size]byte]weakValue[T]{}
	}
	if len(t.values) >= 2*max(t.live, 512) {
		for k, w := range t.values {
			if w.first.Value() == nil {
				delete(t.values, k)
			}
		}
		t.live = len(t.values)
	}
	t.values[key] = weakValue[T]{first: weak.Make(first), n: n}
	return first, n
}
