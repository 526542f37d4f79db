package store

import (
	"bytes"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/storage"
)

// EncodeFunc writes obj in one encoding. obj is the stored object itself, shared by every
// reader: the function must only read it (not even set its TypeMeta, which the stored object
// already carries) and must not keep it.
type EncodeFunc func(obj runtime.Object, w *bytes.Buffer) error

// GetEncoded returns the named object as encoded by encode, from the storage's cache of
// encodings when this version of the object was already encoded in this format (format names
// the encoding, e.g. a media type; one format name must always mean the same encode function),
// the way kube-apiserver's watch cache keeps serialized objects: encoding dominates the cost of
// a GET, and most GETs read objects that did not change since the last read. The returned bytes
// are shared: callers must not modify them.
func (c *Cluster) GetEncoded(gvr schema.GroupVersionResource, namespace, name, format string, encode EncodeFunc) ([]byte, error) {
	b, err := c.lookup(gvr)
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
	gr, key := gvr.GroupResource(), storage.Key(namespace, name)
	c.beforeRead(gr, namespace)
	c.mu.RLock()
	obj := c.getLocked(gr, key)
	var data []byte
	if obj != nil {
		data = c.objs.Encoding(gr, key, obj, format)
	}
	commit := c.objs.LastCommit()
	c.mu.RUnlock()
	if !c.settled(commit) {
		return c.GetEncoded(gvr, namespace, name, format, encode) // what it read was undone
	}
	if obj == nil {
		return nil, apierrors.NewNotFound(gr, name)
	}
	if data != nil {
		return data, nil
	}

	// Encode outside the lock: stored objects are immutable, so writers need not wait for this.
	var buf bytes.Buffer
	if err := encode(obj, &buf); err != nil {
		return nil, err
	}
	c.mu.RLock()
	c.objs.KeepEncoding(gr, key, obj, format, buf.Bytes())
	c.mu.RUnlock()
	return buf.Bytes(), nil
}
