package storage

import (
	"encoding/binary"
	"fmt"
	"strings"
	"sync"

	bolt "go.etcd.io/bbolt"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Objects' keys on disk. An object's key is keyCoded, its resource's code (a uvarint) and its
// Key: two bytes of prefix where "rbac.authorization.k8s.io/clusterroles/" took 39. The codes are
// the file's own, kept in resourceBucket (code -> "<group>/<resource>"), given by the process as
// resources are first written, and written (if absent) in the transaction of each write that
// uses them; a code never changes once given.
//
// Files written before the codes hold keys "<group>/<resource>/<Key>" (legacyKey). They load as
// they are, and Objects.Load rewrites each under its coded key (deleting the old one), so a
// cluster's objects have one key on disk once it was loaded.

// keyCoded starts a coded key: no group starts with it, nor does a record's key (NUL).
const keyCoded byte = 0x01

// resourceBucket holds the resources' codes. Cluster names never start with a NUL byte.
var resourceBucket = []byte("\x00resources")

// resourceCodes are the file's resource codes, both ways.
type resourceCodes struct {
	mu     sync.Mutex
	byGR   map[schema.GroupResource]uint64
	byCode map[uint64]schema.GroupResource
	next   uint64
}

// openResourceCodes reads the codes on disk. It runs from Open, before anything else reads or
// writes the file.
func (db *DB) openResourceCodes(tx *bolt.Tx) error {
	rc := &db.codes
	rc.byGR = map[schema.GroupResource]uint64{}
	rc.byCode = map[uint64]schema.GroupResource{}
	rc.next = 1
	b := tx.Bucket(resourceBucket)
	if b == nil {
		return nil
	}
	return b.ForEach(func(k, v []byte) error {
		code, n := binary.Uvarint(k)
		group, resource, ok := strings.Cut(string(v), "/")
		if n != len(k) || code == 0 || !ok || resource == "" {
			return fmt.Errorf("malformed resource code %x: %q", k, v)
		}
		gr := schema.GroupResource{Group: group, Resource: resource}
		rc.byGR[gr] = code
		rc.byCode[code] = gr
		rc.next = max(rc.next, code+1)
		return nil
	})
}

// diskKey is the key on disk of gr's object key: coded, gr given a code if it has none.
func (db *DB) diskKey(gr schema.GroupResource, key string) string {
	rc := &db.codes
	rc.mu.Lock()
	code, ok := rc.byGR[gr]
	if !ok {
		code = rc.next
		rc.next++
		rc.byGR[gr] = code
		rc.byCode[code] = gr
	}
	rc.mu.Unlock()
	b := make([]byte, 0, 1+binary.MaxVarintLen64+len(key))
	b = append(b, keyCoded)
	b = binary.AppendUvarint(b, code)
	return string(append(b, key...))
}

// parseKey returns the resource and Key of an object's key on disk, and whether it is in the
// form written before the codes (legacyKey).
func (db *DB) parseKey(k string) (gr schema.GroupResource, key string, old, ok bool) {
	if k == "" || k[0] != keyCoded {
		gr, key, ok = parseLegacyKey(k)
		return gr, key, true, ok
	}
	code, n := binary.Uvarint([]byte(k[1:min(len(k), 1+binary.MaxVarintLen64)]))
	if n <= 0 || len(k) == 1+n {
		return gr, "", false, false
	}
	db.codes.mu.Lock()
	gr, ok = db.codes.byCode[code]
	db.codes.mu.Unlock()
	return gr, k[1+n:], false, ok
}

// putResourceCode writes, in tx, the code of the object key k unless it is there already.
func (db *DB) putResourceCode(tx *bolt.Tx, k string) error {
	if k == "" || k[0] != keyCoded {
		return nil
	}
	code, n := binary.Uvarint([]byte(k[1:min(len(k), 1+binary.MaxVarintLen64)]))
	if n <= 0 {
		return fmt.Errorf("malformed key %q", k)
	}
	b, err := tx.CreateBucketIfNotExists(resourceBucket)
	if err != nil {
		return fmt.Errorf("resource codes: %w", err)
	}
	ck := []byte(k[1 : 1+n])
	if b.Get(ck) != nil {
		return nil
	}
	db.codes.mu.Lock()
	gr, ok := db.codes.byCode[code]
	db.codes.mu.Unlock()
	if !ok {
		return fmt.Errorf("key %q: resource code %d not given", k, code)
	}
	if err := b.Put(ck, []byte(gr.Group+"/"+gr.Resource)); err != nil {
		return fmt.Errorf("writing resource code %d: %w", code, err)
	}
	return nil
}

// keyName is an object's key on disk as a message shows it: "<group>/<resource>/<Key>".
func (db *DB) keyName(k string) string {
	if gr, key, _, ok := db.parseKey(k); ok {
		return legacyKey(gr, key)
	}
	return fmt.Sprintf("%q", k)
}

// writeName is what messages and InjectFault call a write's key: an object's as keyName shows
// it, any other key (a record's, DB.Put's) as it is.
func (db *DB) writeName(k string) string {
	if k != "" && k[0] == keyCoded {
		return db.keyName(k)
	}
	return k
}
