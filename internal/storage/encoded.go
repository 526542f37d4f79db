package storage

import (
	"bytes"
	"sync"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Serialization cache: a GET of an unchanged object returns the bytes encoded for an earlier
// GET, the way the real API server's watch cache keeps serialized objects. Encoding dominates
// the cost of serving a GET, and most GETs (controllers polling a Node or Pod) read objects that
// did not change since the last read.
//
// Memory stays bounded: entries exist only for objects somebody read (an idle cluster holds
// none), an entry is dropped as soon as its object changes or goes away, and a cluster keeps at
// most MaxEncodedCacheBytes of encodings (random entries are evicted to make room; larger
// encodings are not kept). 64 KiB holds a dozen kubelet-like Nodes in JSON and protobuf; 1,000
// clusters that all serve GETs keep at most 62.5 MiB.
const (
	MaxEncodedCacheBytes = 64 << 10
	MaxEncodedEntryBytes = MaxEncodedCacheBytes / 4
)

// encodedObject is the cached encodings of one version of one object.
type encodedObject struct {
	v       Value // the version encoded; a cached encoding is used only while it is stored
	formats []encodedFormat
}

type encodedFormat struct {
	format string
	data   []byte
}

// objectRef locates a stored object.
type objectRef struct {
	gr  schema.GroupResource
	key string
}

// encodedCache is guarded by the owner's lock held for writing, or held for reading plus
// encodedCache.mu (readers serialize among themselves, writers exclude all readers).
type encodedCache struct {
	mu      sync.Mutex
	entries map[objectRef]*encodedObject // nil until the first cached GET
	bytes   int
}

// Encoding returns the cached encoding of obj, the stored version of gr's object key, in format
// (a name for one encoding, e.g. a media type; one format name must always mean the same
// encoding), nil if it is not cached. The bytes are shared: callers must not modify them.
// Callers hold the owner's lock, for reading at least.
func (o *Objects) Encoding(gr schema.GroupResource, key string, obj client.Object, format string) []byte {
	o.enc.mu.Lock()
	defer o.enc.mu.Unlock()
	return o.enc.lookup(objectRef{gr: gr, key: key}, obj, format)
}

// KeepEncoding caches data as obj's encoding in format, if obj is still the stored version and
// data is small enough to keep (a copy is kept: data's spare capacity is not pinned). Callers
// hold the owner's lock, for reading at least.
func (o *Objects) KeepEncoding(gr schema.GroupResource, key string, obj client.Object, format string, data []byte) {
	cur := o.Value(gr, key)
	if len(data) > MaxEncodedEntryBytes || !cur.Is(obj) {
		return
	}
	data = bytes.Clone(data)
	o.enc.mu.Lock()
	defer o.enc.mu.Unlock()
	o.enc.add(objectRef{gr: gr, key: key}, cur, format, data)
}

// CachedEncodings is the number of objects with cached encodings and the bytes they take.
// Callers hold the owner's lock, for reading at least.
func (o *Objects) CachedEncodings() (objects, bytes int) {
	o.enc.mu.Lock()
	defer o.enc.mu.Unlock()
	return len(o.enc.entries), o.enc.bytes
}

func (e *encodedCache) lookup(ref objectRef, obj client.Object, format string) []byte {
	ent := e.entries[ref]
	if ent == nil || !ent.v.Is(obj) {
		return nil
	}
	for _, f := range ent.formats {
		if f.format == format {
			return f.data
		}
	}
	return nil
}

func (e *encodedCache) add(ref objectRef, v Value, format string, data []byte) {
	ent := e.entries[ref]
	if ent != nil && ent.v != v {
		e.drop(ref) // an older version: its encodings are useless now
		ent = nil
	}
	if ent != nil {
		for _, f := range ent.formats {
			if f.format == format {
				return // another reader cached it first
			}
		}
	}
	for e.bytes+len(data) > MaxEncodedCacheBytes {
		victim, other := ref, false
		for k := range e.entries { // map order is random: a random victim
			if k != ref {
				victim, other = k, true
				break
			}
		}
		e.drop(victim)
		if !other { // only this object's other formats were left
			ent = nil
			break
		}
	}
	if e.entries == nil {
		e.entries = map[objectRef]*encodedObject{}
	}
	if ent == nil {
		ent = &encodedObject{v: v}
		e.entries[ref] = ent
	}
	ent.formats = append(ent.formats, encodedFormat{format: format, data: data})
	e.bytes += len(data)
}

// drop forgets an object's encodings, when the object changes or goes away.
func (e *encodedCache) drop(ref objectRef) {
	ent := e.entries[ref]
	if ent == nil {
		return
	}
	for _, f := range ent.formats {
		e.bytes -= len(f.data)
	}
	delete(e.entries, ref)
	if len(e.entries) == 0 {
		e.entries = nil // an idle cluster keeps no empty map
	}
}
