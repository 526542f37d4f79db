package storage

import (
	"iter"
	"sort"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Objects is one workload cluster's objects: the current version of each, keyed by resource
// and Key, the cluster's resourceVersion counter, the bounded history of changes that watches
// resume from, the cache of encoded objects, and (with a DB) their copy on disk. It knows nothing
// of kinds, validation or HTTP.
//
// Objects has no lock of its own: its owner guards it with one lock (readers may share it;
// Put, Delete, Load and ExpireEvents need it exclusively). Stored objects are never mutated: a
// write stores a fresh object, so readers use them after the lock is released and events share
// them with the history.
type Objects struct {
	bucket  string                                    // the cluster's name on disk
	objects map[schema.GroupResource]map[string]Value // per resource, created lazily
	rv      uint64                                    // last assigned resourceVersion
	bytes   int64                                     // SizeOf the stored objects
	// shared are the resources whose objects are stored as references to shared content
	// (shared.go); nil: none.
	shared map[schema.GroupResource]bool
	hist   history
	enc    encodedCache
	db     *DB    // nil: memory only
	commit Commit // the last write queued to db
	// unsettled are the changes not yet seen on disk, oldest first (rollback.go); with a db only.
	unsettled []unsettledChange
	// relocated hears of each stored version moved to fresh memory (relocate.go); nil: nobody.
	relocated func(Relocation)
}

// HistoryOptions bound the history of changes kept for watches.
type HistoryOptions struct {
	Limit    int           // events
	TTL      time.Duration // age of the oldest event
	MaxBytes int           // SizeOf the objects the events keep alive (the newest is always kept)
}

// NewObjects returns an empty set of objects whose resourceVersions start above any a client may
// hold from an earlier life of the cluster (see initialResourceVersion). db may be nil; with a
// db, call Load before anything else.
func NewObjects(bucket string, opts HistoryOptions, db *DB) *Objects {
	o := &Objects{
		bucket:  bucket,
		objects: map[schema.GroupResource]map[string]Value{},
		hist:    history{limit: opts.Limit, ttl: opts.TTL, maxBytes: opts.MaxBytes},
		db:      db,
	}
	o.rv = initialResourceVersion(0)
	// Nothing before this point can be replayed: clients holding older resourceVersions get
	// 410 Gone and relist, as after an etcd compaction.
	o.hist.floor = o.rv
	return o
}

// initialResourceVersion is where a cluster's resourceVersions continue after a (re)start: above
// the last one on disk, and above any a client may hold from an earlier life of the store (also
// when nothing was on disk): resourceVersions count microseconds of wall time at start and then
// one per write, and no cluster writes a million times a second for long.
func initialResourceVersion(onDisk uint64) uint64 {
	return max(onDisk, uint64(time.Now().UnixMicro()))
}

// Key is an object's key within its resource: "namespace/name", or "name" when cluster-scoped,
// ordered like kube-apiserver's etcd keys so that pagination walks objects in the same order.
func Key(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}

// Share stores the objects of the resources from now on as references to content shared with
// every cluster that stores the same (shared.go). Call it before Load.
func (o *Objects) Share(resources ...schema.GroupResource) {
	if o.shared == nil {
		o.shared = map[schema.GroupResource]bool{}
	}
	for _, gr := range resources {
		o.shared[gr] = true
	}
}

// Get returns the stored object (shared: callers must not modify it), nil if there is none.
func (o *Objects) Get(gr schema.GroupResource, key string) client.Object {
	return o.objects[gr][key].Object()
}

// Value returns the stored version of an object; the zero Value if there is none.
func (o *Objects) Value(gr schema.GroupResource, key string) Value {
	return o.objects[gr][key]
}

// IsCurrent reports whether obj (nil: no object) is the stored version of gr's object key.
func (o *Objects) IsCurrent(gr schema.GroupResource, key string, obj client.Object) bool {
	return o.objects[gr][key].Is(obj)
}

// Resource returns the stored objects of a resource by key; the map is the store's own: callers
// must not modify it, nor use it once they release the owner's lock.
func (o *Objects) Resource(gr schema.GroupResource) map[string]Value {
	return o.objects[gr]
}

// All iterates the resources that hold objects, as Resource would return them.
func (o *Objects) All() iter.Seq2[schema.GroupResource, map[string]Value] {
	return func(yield func(schema.GroupResource, map[string]Value) bool) {
		for gr, m := range o.objects {
			if !yield(gr, m) {
				return
			}
		}
	}
}

// Keys returns the sorted keys of a resource's objects, limited to a namespace if given.
func Keys[V any](m map[string]V, namespace string) []string {
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

// ResourceVersion is the last assigned resourceVersion.
func (o *Objects) ResourceVersion() uint64 { return o.rv }

// Bytes is the size of the stored objects (SizeOf each).
func (o *Objects) Bytes() int64 { return o.bytes }

// LastCommit is the last write queued to disk; once it is on disk, so are all earlier ones.
func (o *Objects) LastCommit() Commit { return o.commit }

// Put commits obj as the new version of its object (old: the version it replaces, nil for a new
// object): a fresh resourceVersion set on obj, the disk, the history. It returns the event.
func (o *Objects) Put(gr schema.GroupResource, obj, old client.Object) *Event {
	o.rv++
	obj.SetResourceVersion(strconv.FormatUint(o.rv, 10))
	key := Key(obj.GetNamespace(), obj.GetName())
	m := o.objects[gr]
	if m == nil {
		m = map[string]Value{}
		o.objects[gr] = m
	}
	prev := m[key]
	v, onDisk := fullValue(obj), fullValue(obj)
	if o.shared[gr] {
		if ref, held, ok := share(gr, key, obj, o.rv); ok {
			v = refValue(ref)
			key = ref.content.key // one string for every cluster
			if held {
				// Content another cluster holds goes to disk once too; content of this
				// cluster's own (kubeadm-config) stays in its bucket, and goes with it.
				onDisk = v
			}
		}
	}
	m[key] = v // (an existing string key is replaced too: the map holds the shared one)
	o.enc.drop(objectRef{gr: gr, key: key})
	o.persistPut(gr, key, onDisk)
	size := SizeOf(obj)
	o.bytes += int64(size)
	typ := watch.Added
	if old != nil {
		typ = watch.Modified
		o.bytes -= int64(SizeOf(old))
	}
	if !prev.Is(old) {
		prev = fullValue(old) // not what the map held: the caller's word is the event's
	}
	e := o.record(typ, gr, key, v, prev, size)
	o.keepUnsettled(e)
	return e
}

// Delete commits the removal of old; last is a private copy of its final state, which gets the
// deletion's resourceVersion and which the event carries. It returns the event.
func (o *Objects) Delete(gr schema.GroupResource, old, last client.Object) *Event {
	o.rv++
	last.SetResourceVersion(strconv.FormatUint(o.rv, 10))
	key := Key(old.GetNamespace(), old.GetName())
	prev := o.objects[gr][key]
	if !prev.Is(old) {
		prev = fullValue(old)
	}
	delete(o.objects[gr], key)
	o.enc.drop(objectRef{gr: gr, key: key})
	if o.db != nil {
		o.commit = o.db.Delete(o.bucket, o.db.diskKey(gr, key), o.rv)
	}
	size := SizeOf(old)
	o.bytes -= int64(size)
	e := o.record(watch.Deleted, gr, key, fullValue(last), prev, size)
	o.keepUnsettled(e)
	return e
}

func (o *Objects) persistPut(gr schema.GroupResource, key string, v Value) {
	if o.db == nil {
		return
	}
	ref := v.ref()
	if ref == nil {
		o.commit = o.db.putObject(o.bucket, o.db.diskKey(gr, key), gr.Group+"/"+gr.Resource, o.rv, encodeValue(v.Object()))
		return
	}
	o.commit = o.db.putShared(o.bucket, o.db.diskKey(gr, key), o.rv, ref.encode(), ref.content.id[:], encodeValue(ref.content.obj))
}

func (o *Objects) record(typ watch.EventType, gr schema.GroupResource, key string, obj, old Value, size int) *Event {
	e := &Event{Type: typ, RV: o.rv, At: time.Now().UnixNano(), gr: resourceOf(gr), Key: key, Obj: obj, Old: old, Size: size}
	o.hist.add(e, o.expired)
	return e
}

// Close forgets the cached encodings of a cluster that is going away.
func (o *Objects) Close() {
	o.enc.entries, o.enc.bytes = nil, 0
	// Nothing reaches the disk any more: the cluster's bucket is dropped after this, and a late
	// write must not create it again.
	o.db = nil
	o.unsettled = nil
}
