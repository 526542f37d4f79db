package storage

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"reflect"
	"strconv"
	"sync"
	"weak"

	"github.com/google/uuid"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Shared objects, copy-on-write. Every simulated cluster holds the same bootstrap objects: the
// default RBAC policy and kubeadm's roles, bindings, ConfigMaps and ServiceAccounts, identical
// from one cluster to the next but for their identity (uid, creationTimestamp, resourceVersion).
// An object of a shared resource (Objects.Share) is stored as a reference: its content, the object
// without its identity, is held once in the process (and once in the state file) for every
// cluster that stores it unchanged, and the cluster keeps only its identity. Reads see the object
// exactly as it was written: it is made again, a shallow copy of the content with the cluster's
// identity, whenever it is read. A write that changes the object stores the new version the same
// way: unless another cluster holds that content too, it is content of its own.

// sharedContent is an object's content, held once for every cluster that stores it.
type sharedContent struct {
	gr  schema.GroupResource
	key string        // the object's Key: every cluster's map shares the string
	obj client.Object // uid, creationTimestamp and resourceVersion empty; never modified
	id  [sha256.Size]byte
}

// sharedRef is one cluster's stored version of shared content: the content and the identity.
// It is immutable.
type sharedRef struct {
	content *sharedContent
	uid     uuid.UUID
	created int64 // creationTimestamp, unix seconds
	rv      uint64
}

// Value is a stored version of an object: the object itself, or a reference to shared content
// (one interface value: a map of them and the history's events stay small). The zero Value is
// no object.
type Value struct {
	x any // client.Object or *sharedRef
}

func fullValue(obj client.Object) Value {
	if obj == nil {
		return Value{}
	}
	return Value{x: obj}
}

func refValue(r *sharedRef) Value { return Value{x: r} }

// ref returns the reference v is, nil if it is none.
func (v Value) ref() *sharedRef {
	r, _ := v.x.(*sharedRef)
	return r
}

// Exists reports whether v is an object.
func (v Value) Exists() bool { return v.x != nil }

// Shared reports whether v is a reference to shared content.
func (v Value) Shared() bool { return v.ref() != nil }

// Object returns the stored object (shared with every reader: it must not be modified), nil for
// the zero Value. A reference is made into an object again on every call.
func (v Value) Object() client.Object {
	switch x := v.x.(type) {
	case *sharedRef:
		return x.object()
	case client.Object:
		return x
	}
	return nil
}

// Is reports whether obj is this stored version (as Object returned it).
func (v Value) Is(obj client.Object) bool {
	r := v.ref()
	if r == nil {
		return v.Object() == obj
	}
	return obj != nil && obj.GetResourceVersion() == strconv.FormatUint(r.rv, 10) && string(obj.GetUID()) == r.uid.String()
}

// object makes the stored object: a shallow copy of the content (its maps and slices are the
// content's own) with the cluster's identity.
func (r *sharedRef) object() client.Object {
	obj := shallowCopy(r.content.obj)
	obj.SetUID(types.UID(r.uid.String()))
	obj.SetCreationTimestamp(metav1.Unix(r.created, 0))
	obj.SetResourceVersion(strconv.FormatUint(r.rv, 10))
	return obj
}

// contents are the shared contents of the process by id. The table does not keep them alive:
// the clusters' references do, and an entry whose content is gone is swept.
var contents struct {
	mu     sync.Mutex
	values map[[sha256.Size]byte]weak.Pointer[sharedContent]
	live   int // entries after the last sweep; the next is due when the table has doubled
}

// withoutIdentity returns a shallow copy of obj without uid, creationTimestamp and
// resourceVersion.
func withoutIdentity(obj client.Object) client.Object {
	out := shallowCopy(obj)
	out.SetUID("")
	out.SetCreationTimestamp(metav1.Time{})
	out.SetResourceVersion("")
	return out
}

// shallowCopy returns a new object of obj's type whose fields are obj's (maps and slices shared).
func shallowCopy(obj client.Object) client.Object {
	v := reflect.New(reflect.TypeOf(obj).Elem())
	v.Elem().Set(reflect.ValueOf(obj).Elem())
	return v.Interface().(client.Object)
}

// share returns obj, a version of gr's object key with its resourceVersion rv, as a reference to
// shared content, or false when it cannot be one: not a built-in kind (protobuf), or an identity
// that a reference would not give back exactly (a uid that is not a canonical UUID, a creation
// time finer than a second). held reports whether the content was already held (by another
// cluster, or another version): only then is the reference worth writing to disk as one.
func share(gr schema.GroupResource, key string, obj client.Object, rv uint64) (ref *sharedRef, held, ok bool) {
	rt := reflect.TypeOf(obj)
	if rt.Kind() != reflect.Pointer || rt.Elem().Kind() != reflect.Struct {
		return nil, false, false
	}
	if _, ok := obj.(protoMessage); !ok {
		return nil, false, false
	}
	uid, err := uuid.Parse(string(obj.GetUID()))
	if err != nil || uid.String() != string(obj.GetUID()) {
		return nil, false, false
	}
	ts := obj.GetCreationTimestamp()
	if ts.IsZero() || ts.Nanosecond() != 0 || obj.GetResourceVersion() != strconv.FormatUint(rv, 10) {
		return nil, false, false
	}
	content := withoutIdentity(obj)
	data, err := content.(protoMessage).Marshal()
	if err != nil {
		return nil, false, false
	}
	h := sha256.New()
	h.Write([]byte(gr.Group + "\x00" + gr.Resource + "\x00" + key + "\x00"))
	h.Write(data)
	var id [sha256.Size]byte
	h.Sum(id[:0])
	c, held := intern(&sharedContent{gr: gr, key: key, obj: content, id: id})
	return &sharedRef{content: c, uid: uid, created: ts.Unix(), rv: rv}, held, true
}

// intern returns the table's content of c's id, adding c when there is none; held reports
// whether there was one.
func intern(c *sharedContent) (_ *sharedContent, held bool) {
	contents.mu.Lock()
	defer contents.mu.Unlock()
	if w, ok := contents.values[c.id]; ok {
		if have := w.Value(); have != nil {
			return have, true
		}
	}
	if contents.values == nil {
		contents.values = map[[sha256.Size]byte]weak.Pointer[sharedContent]{}
	}
	if len(contents.values) >= 2*max(contents.live, 512) {
		for id, w := range contents.values {
			if w.Value() == nil {
				delete(contents.values, id)
			}
		}
		contents.live = len(contents.values)
	}
	contents.values[c.id] = weak.Make(c)
	return c, false
}

// lookupContent returns the process's content of id, nil if it holds none.
func lookupContent(id [sha256.Size]byte) *sharedContent {
	contents.mu.Lock()
	defer contents.mu.Unlock()
	return contents.values[id].Value()
}

// On disk a reference is its content's id and the identity; the content is in the shared bucket
// under its id, written (if absent) in the same transaction as the reference.
const refLen = 1 + sha256.Size + 16 + 8 + 8

func (r *sharedRef) encode() []byte {
	b := make([]byte, 0, refLen)
	b = append(b, encodingShared)
	b = append(b, r.content.id[:]...)
	b = append(b, r.uid[:]...)
	b = binary.BigEndian.AppendUint64(b, uint64(r.created))
	return binary.BigEndian.AppendUint64(b, r.rv)
}

// parsedRef is a reference read from disk, its content not yet found.
type parsedRef struct {
	id      [sha256.Size]byte
	uid     uuid.UUID
	created int64
	rv      uint64
}

func parseRef(v []byte) (parsedRef, error) {
	var p parsedRef
	if len(v) != refLen || v[0] != encodingShared {
		return p, fmt.Errorf("malformed reference to shared content")
	}
	v = v[1:]
	copy(p.id[:], v)
	v = v[sha256.Size:]
	copy(p.uid[:], v)
	v = v[16:]
	p.created = int64(binary.BigEndian.Uint64(v))
	p.rv = binary.BigEndian.Uint64(v[8:])
	return p, nil
}
