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
	bucket  string                                            // the cluster's name on disk
	objects map[schema.GroupResource]map[string]client.Object // per resource, created lazily
	rv      uint64                                            // last assigned resourceVersion
	bytes   int64                                             // SizeOf the stored objects
	hist    history
	enc     encodedCache
	db      *DB    // nil: memory only
	commit  Commit // the last write queued to db
	// unsettled are the changes not yet seen on disk, oldest first (rollback.go); with a db only.
	unsettled []unsettledChange
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
		objects: map[schema.GroupResource]map[string]client.Object{},
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

// Get returns the stored object (shared: callers must not modify it), nil if there is none.
func (o *Objects) Get(gr schema.GroupResource, key string) client.Object {
	return o.objects[gr][key]
}

// Resource returns the stored objects of a resource by key; the map is the store's own: callers
// must not modify it, nor use it once they release the owner's lock.
func (o *Objects) Resource(gr schema.GroupResource) map[string]client.Object {
	return o.objects[gr]
}

// All iterates the resources that hold objects, as Resource would return them.
func (o *Objects) All() iter.Seq2[schema.GroupResource, map[string]client.Object] {
	return func(yield func(schema.GroupResource, map[string]client.Object) bool) {
		for gr, m := range o.objects {
			if !yield(gr, m) {
				return
			}
		}
	}
}

// Keys returns the sorted keys of a resource's objects, limited to a namespace if given.
func Keys(m map[string]client.Object, namespace string) []string {
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
		m = map[string]client.Object{}
		o.objects[gr] = m
	}
	m[key] = obj
	o.enc.drop(objectRef{gr: gr, key: key})
	o.persistPut(gr, key, obj)
	size := SizeOf(obj)
	o.bytes += int64(size)
	typ := watch.Added
	if old != nil {
		typ = watch.Modified
		o.bytes -= int64(SizeOf(old))
	}
	e := o.record(typ, gr, key, obj, old, size)
	o.keepUnsettled(e)
	return e
}

// Delete commits the removal of old; last is a private copy of its final state, which gets the
// deletion's resourceVersion and which the event carries. It returns the event.
func (o *Objects) Delete(gr schema.GroupResource, old, last client.Object) *Event {
	o.rv++
	last.SetResourceVersion(strconv.FormatUint(o.rv, 10))
	key := Key(old.GetNamespace(), old.GetName())
	delete(o.objects[gr], key)
	o.enc.drop(objectRef{gr: gr, key: key})
	if o.db != nil {
		o.commit = o.db.Delete(o.bucket, diskKey(gr, key), o.rv)
	}
	size := SizeOf(old)
	o.bytes -= int64(size)
	e := o.record(watch.Deleted, gr, key, last, old, size)
	o.keepUnsettled(e)
	return e
}

func (o *Objects) persistPut(gr schema.GroupResource, key string, obj client.Object) {
	if o.db != nil {
		o.commit = o.db.Put(o.bucket, diskKey(gr, key), o.rv, encodeValue(obj))
	}
}

func (o *Objects) record(typ watch.EventType, gr schema.GroupResource, key string, obj, old client.Object, size int) *Event {
	e := &Event{Type: typ, RV: o.rv, At: time.Now().UnixNano(), GR: gr, Key: key, Obj: obj, Old: old, Size: size}
	o.hist.add(e)
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
