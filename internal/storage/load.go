package storage

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"strconv"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ErrUnreadable wraps why a cluster's objects on disk cannot be loaded.
var ErrUnreadable = errors.New("workload cluster state on disk is unreadable")

// Decoder turns the value of an object stored under resource gr into an object (DecodeValue
// does the decoding), and names the resource it belongs to now: an object that moved to another
// resource (a kind that became a view of another's objects) is rewritten there.
type Decoder func(gr schema.GroupResource, value []byte) (schema.GroupResource, client.Object, error)

// Load restores the cluster's objects from disk and reports whether there were any. One object
// that cannot be read fails the whole cluster: serving it without would be silent data loss.
// ResourceVersions continue above the last one on disk. The objects of shared resources (Share)
// are held as references to shared content, whichever way they are on disk.
func (o *Objects) Load(decode Decoder) (bool, error) {
	// move is an object to write again: under another resource, or under its coded key.
	type move struct {
		from string // its key on disk
		to   schema.GroupResource
		key  string
		obj  client.Object // nil: a reference, written again once loaded
	}
	type reference struct {
		gr  schema.GroupResource
		key string
		ref parsedRef
	}
	var moves []move
	var refs []reference
	rv, found, err := o.db.load(o.bucket, true, func(k string, v []byte) error {
		gr, key, old, ok := o.db.parseKey(k)
		if !ok {
			return fmt.Errorf("malformed key %q", k)
		}
		if len(v) > 0 && v[0] == encodingShared {
			p, err := parseRef(v)
			if err != nil {
				return fmt.Errorf("decoding %s: %w", legacyKey(gr, key), err)
			}
			refs = append(refs, reference{gr: gr, key: key, ref: p})
			if old {
				moves = append(moves, move{from: k, to: gr, key: key})
			}
			return nil
		}
		to, obj, err := decode(gr, v)
		if err != nil {
			return fmt.Errorf("decoding %s: %w", legacyKey(gr, key), err)
		}
		if got := Key(obj.GetNamespace(), obj.GetName()); got != key {
			return fmt.Errorf("%s holds %s", legacyKey(gr, key), got)
		}
		if to != gr || old {
			moves = append(moves, move{from: k, to: to, key: key, obj: obj})
		}
		o.keepLoaded(to, key, obj)
		return nil
	})
	if err == nil {
		err = o.loadRefs(len(refs), func(i int) (schema.GroupResource, string, parsedRef) {
			return refs[i].gr, refs[i].key, refs[i].ref
		}, decode)
	}
	if err != nil {
		return false, fmt.Errorf("%w: loading %s from %s: %w", ErrUnreadable, o.bucket, o.db.Path(), err)
	}
	o.rv = initialResourceVersion(rv)
	o.hist.floor = o.rv
	for _, m := range moves {
		v := fullValue(m.obj)
		if m.obj == nil {
			v = o.objects[m.to][m.key]
		}
		o.commit = o.db.Delete(o.bucket, m.from, o.rv)
		o.persistPut(m.to, m.key, v)
	}
	return found, nil
}

// keepLoaded holds obj, read from disk in full, as gr's object key: as a reference to shared
// content when gr is shared.
func (o *Objects) keepLoaded(gr schema.GroupResource, key string, obj client.Object) {
	m := o.objects[gr]
	if m == nil {
		m = map[string]Value{}
		o.objects[gr] = m
	}
	v := fullValue(obj)
	if rv, err := strconv.ParseUint(obj.GetResourceVersion(), 10, 64); err == nil && o.shared[gr] {
		if ref, _, ok := share(gr, key, obj, rv); ok {
			v, key = refValue(ref), ref.content.key
		}
	}
	m[key] = v
	o.bytes += int64(SizeOf(obj))
}

// loadRefs holds the n references read from disk (ref(i) is the i-th), their content found in
// the process or else read from the shared bucket and decoded.
func (o *Objects) loadRefs(n int, ref func(i int) (schema.GroupResource, string, parsedRef), decode Decoder) error {
	held := map[[sha256.Size]byte]*sharedContent{} // kept here: the process's table is weak
	var missing [][sha256.Size]byte
	for i := range n {
		_, _, p := ref(i)
		if _, ok := held[p.id]; ok {
			continue
		}
		if held[p.id] = lookupContent(p.id); held[p.id] == nil {
			missing = append(missing, p.id)
		}
	}
	var values map[[sha256.Size]byte][]byte
	if len(missing) > 0 {
		var err error
		if values, err = o.db.sharedValues(missing); err != nil {
			return err
		}
	}
	for i := range n {
		gr, key, p := ref(i)
		c := held[p.id]
		if c == nil {
			value, ok := values[p.id]
			if !ok {
				return fmt.Errorf("%s: shared content %x is missing", legacyKey(gr, key), p.id)
			}
			to, obj, err := decode(gr, value)
			if err != nil {
				return fmt.Errorf("decoding the shared content of %s: %w", legacyKey(gr, key), err)
			}
			if got := Key(obj.GetNamespace(), obj.GetName()); to != gr || got != key {
				return fmt.Errorf("%s: shared content %x holds %s %s", legacyKey(gr, key), p.id, to, got)
			}
			c, _ = intern(&sharedContent{gr: gr, key: key, obj: obj, id: p.id})
			held[p.id] = c
		}
		r := &sharedRef{content: c, uid: p.uid, created: p.created, rv: p.rv}
		m := o.objects[gr]
		if m == nil {
			m = map[string]Value{}
			o.objects[gr] = m
		}
		m[c.key] = refValue(r)
		o.bytes += int64(SizeOf(r.object()))
	}
	return nil
}
