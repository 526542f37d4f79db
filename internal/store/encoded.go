package store

import (
	"bytes"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
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
	maxEncodedEntryBytes = MaxEncodedCacheBytes / 4
)

// encodedObject is the cached encodings of one version of one object.
type encodedObject struct {
	obj     client.Object // the version encoded; a cached encoding is used only while it is stored
	formats []encodedFormat
}

type encodedFormat struct {
	format string
	data   []byte
}

// encodedCache is guarded by Cluster.mu held for writing, or Cluster.mu held for reading plus
// encodedCache.mu (readers serialize among themselves, writers exclude all readers).
type encodedCache struct {
	mu      sync.Mutex
	entries map[objRef]*encodedObject // nil until the first cached GET
	bytes   int
}

// EncodeFunc writes obj in one encoding. obj is the stored object itself, shared by every
// reader: the function must only read it (not even set its TypeMeta, which the stored object
// already carries) and must not keep it.
type EncodeFunc func(obj runtime.Object, w *bytes.Buffer) error

// GetEncoded returns the named object as encoded by encode, from the cache when this version of
// the object was already encoded in this format (format names the encoding, e.g. a media type;
// one format name must always mean the same encode function). The returned bytes are shared:
// callers must not modify them.
func (c *Cluster) GetEncoded(gvr schema.GroupVersionResource, namespace, name, format string, encode EncodeFunc) ([]byte, error) {
	b, err := lookup(gvr)
	if err != nil {
		return nil, err
	}
	if b.storedAs != nil {
		// Cached as the stored object's encoding in the view's kind: a format of its own.
		encodeStored := encode
		encode = func(obj runtime.Object, w *bytes.Buffer) error {
			v, err := b.toView(obj)
			if err != nil {
				return err
			}
			return encodeStored(v, w)
		}
		data, err := c.GetEncoded(b.storedAs.info.GVR, namespace, name, b.info.GVR.GroupVersion().String()+";"+format, encode)
		return data, b.viewError(err)
	}
	if namespace, err = b.requestNamespace(namespace); err != nil {
		return nil, err
	}
	ref := objRef{gr: gvr.GroupResource(), key: objectKey(namespace, name)}
	c.mu.RLock()
	obj := c.getLocked(ref.gr, ref.key)
	var data []byte
	if obj != nil {
		c.enc.mu.Lock()
		data = c.enc.lookup(ref, obj, format)
		c.enc.mu.Unlock()
	}
	c.mu.RUnlock()
	if obj == nil {
		return nil, apierrors.NewNotFound(gvr.GroupResource(), name)
	}
	if data != nil {
		return data, nil
	}

	// Encode outside the lock: stored objects are immutable, so writers need not wait for this.
	var buf bytes.Buffer
	if err := encode(obj, &buf); err != nil {
		return nil, err
	}
	data = buf.Bytes()
	if len(data) <= maxEncodedEntryBytes {
		data = bytes.Clone(data) // keep exactly the bytes, not the buffer's spare capacity
		c.mu.RLock()
		if c.getLocked(ref.gr, ref.key) == obj { // not replaced meanwhile
			c.enc.mu.Lock()
			c.enc.add(ref, obj, format, data)
			c.enc.mu.Unlock()
		}
		c.mu.RUnlock()
	}
	return data, nil
}

func (e *encodedCache) lookup(ref objRef, obj client.Object, format string) []byte {
	ent := e.entries[ref]
	if ent == nil || ent.obj != obj {
		return nil
	}
	for _, f := range ent.formats {
		if f.format == format {
			return f.data
		}
	}
	return nil
}

func (e *encodedCache) add(ref objRef, obj client.Object, format string, data []byte) {
	ent := e.entries[ref]
	if ent != nil && ent.obj != obj {
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
		e.entries = map[objRef]*encodedObject{}
	}
	if ent == nil {
		ent = &encodedObject{obj: obj}
		e.entries[ref] = ent
	}
	ent.formats = append(ent.formats, encodedFormat{format: format, data: data})
	e.bytes += len(data)
}

// drop forgets an object's encodings; writers call it (holding Cluster.mu) when the object
// changes or goes away.
func (e *encodedCache) drop(ref objRef) {
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
