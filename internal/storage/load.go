package storage

import (
	"errors"
	"fmt"

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
// ResourceVersions continue above the last one on disk.
func (o *Objects) Load(decode Decoder) (bool, error) {
	type move struct {
		from, to schema.GroupResource
		key      string
		obj      client.Object
	}
	var moves []move
	rv, found, err := o.db.Load(o.bucket, func(k string, v []byte) error {
		gr, key, ok := parseDiskKey(k)
		if !ok {
			return fmt.Errorf("malformed key %q", k)
		}
		to, obj, err := decode(gr, v)
		if err != nil {
			return fmt.Errorf("decoding %s: %w", k, err)
		}
		if got := Key(obj.GetNamespace(), obj.GetName()); got != key {
			return fmt.Errorf("%s holds %s", k, got)
		}
		if to != gr {
			moves = append(moves, move{from: gr, to: to, key: key, obj: obj})
		}
		m := o.objects[to]
		if m == nil {
			m = map[string]client.Object{}
			o.objects[to] = m
		}
		m[key] = obj
		o.bytes += int64(SizeOf(obj))
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("%w: loading %s from %s: %w", ErrUnreadable, o.bucket, o.db.Path(), err)
	}
	o.rv = initialResourceVersion(rv)
	o.hist.floor = o.rv
	for _, m := range moves {
		o.commit = o.db.Delete(o.bucket, diskKey(m.from, m.key), o.rv)
		o.persistPut(m.to, m.key, m.obj)
	}
	return found, nil
}
