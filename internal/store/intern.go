package store

import (
	"crypto/sha256"
	"encoding/json"
	"slices"
	"sync"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// One process holds thousands of simulated clusters whose objects carry the same labels,
// annotations and RBAC rules: kube-apiserver's default policy alone is 75 objects per cluster,
// every one labelled and annotated alike, admin, edit and view with long aggregated rule lists.
// Stored objects are never mutated (readers and writers copy them), so equal values can be one
// value: an object about to be stored takes the shared copy of its labels, annotations and, for
// RBAC kinds, its rules and subjects. Each table is bounded; values beyond it stay as they are.

// maxInterned bounds the values one table keeps (they are never dropped: a bound, not a cache).
const maxInterned = 4096

type internTable[T any] struct {
	mu     sync.Mutex
	values map[[sha256.Size]byte]T
}

// intern returns the table's value of the same content as v (canonical is v's content as bytes),
// adding v if the table has room.
func (t *internTable[T]) intern(v T, canonical []byte) T {
	key := sha256.Sum256(canonical)
	t.mu.Lock()
	defer t.mu.Unlock()
	if shared, ok := t.values[key]; ok {
		return shared
	}
	if t.values == nil {
		t.values = map[[sha256.Size]byte]T{}
	}
	if len(t.values) < maxInterned {
		t.values[key] = v
	}
	return v
}

var (
	internedMaps     internTable[map[string]string]
	internedRules    internTable[[]rbacv1.PolicyRule]
	internedSubjects internTable[[]rbacv1.Subject]
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
		o.Rules = internJSON(&internedRules, o.Rules)
	case *rbacv1.Role:
		o.Rules = internJSON(&internedRules, o.Rules)
	case *rbacv1.ClusterRoleBinding:
		o.Subjects = internJSON(&internedSubjects, o.Subjects)
	case *rbacv1.RoleBinding:
		o.Subjects = internJSON(&internedSubjects, o.Subjects)
	}
}

// maxInternedMap is the largest label or annotation set interned (bytes of keys and values):
// larger ones, such as last-applied-configuration annotations, are rarely shared.
const maxInternedMap = 1024

func internMap(m map[string]string) map[string]string {
	keys := make([]string, 0, len(m))
	size := 0
	for k, v := range m {
		keys = append(keys, k)
		size += len(k) + len(v) + 2
	}
	if size > maxInternedMap {
		return m
	}
	slices.Sort(keys)
	canonical := make([]byte, 0, size)
	for _, k := range keys {
		canonical = append(append(append(append(canonical, k...), 0), m[k]...), 0)
	}
	return internedMaps.intern(m, canonical)
}

func internJSON[T any](t *internTable[[]T], v []T) []T {
	if len(v) == 0 {
		return v
	}
	canonical, err := json.Marshal(v)
	if err != nil {
		return v
	}
	return t.intern(v, canonical)
}
