package storage

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"

	bolt "go.etcd.io/bbolt"
)

// Values compressed against a dictionary per resource. The objects of one resource are alike from
// one cluster to the next (every cluster runs the same add-ons' pods, the same kind of Nodes and
// Deployments), and alike within a cluster, so an object's value is mostly runs of bytes that
// other objects of its resource hold too. Each resource gets a dictionary, a few KiB of values of
// that resource (the first distinct objects the committer wrote), and a value of 128 bytes or
// more is written as copies from the dictionary (or from itself) and the bytes found in neither:
// LZ77 without entropy coding. A Pod of 1.2 KB takes about 200 bytes, a Node about 250; the state
// file's values shrink by four fifths. Encoding a value costs a few microseconds on the
// committer, decoding it less, where compress/flate with a preset dictionary costs 100 µs a value
// (its writer clears 512 KiB of hash table on every reset).
//
// Dictionaries are kept in their own bucket by id, written (if absent) in the transaction of the
// first value that uses them, read when a cluster with such values is loaded, and swept on open
// once no value uses them. A dictionary never changes once it has an id. A restarted process
// adopts the dictionaries its clusters' values use, so its writes do not need new ones.
//
// A compressed value is 'z', the dictionary's id and the original value's length (uvarints),
// then the operations: uvarint(n<<1) and n bytes to copy as they are, or uvarint(n<<1|1) and
// uvarint(distance) to copy n bytes from that far back in the dictionary followed by the output
// so far. Every compressed value is decoded again and compared before it is written: a value
// the coder does not give back exactly is written as it is.

const (
	encodingCompressed byte = 'z'
	// compressMin is the smallest value compressed: a reference to shared content (65 bytes) or a
	// Lease is not worth it.
	compressMin = 128
	// dictSize is a dictionary's size at most: the last values of the first objects of the
	// resource that fit in it, once dictWrites values of the resource were written. Objects are
	// written more than once as they settle (a pod is created, scheduled, then runs): the
	// dictionary holds what they settled to, which later objects are most alike.
	dictSize   = 8 << 10
	dictWrites = 64
	// maxDicts bounds the dictionaries in use (and the resources sampled for one): the resources
	// beyond it are written as they are.
	maxDicts = 64
	// The coder finds matches of at least lzMinMatch bytes through a hash table of 4-byte
	// sequences.
	lzHashBits = 12
	lzMinMatch = 4
)

// dictBucket holds the dictionaries by id (4 bytes, big-endian); its sequence is the last id given.
var dictBucket = []byte("\x00dicts")

// dictionary is a resource's dictionary: immutable once made, but for its table.
type dictionary struct {
	id   uint32
	data []byte
	// table maps the hash of 4 bytes to their last position in data, plus one; built on first use
	// by the committer, dropped when it is idle (the committer alone touches it).
	table []uint16
}

// dictionaries are the DB's dictionaries, by resource (the one new values are compressed with)
// and by id (every one read or made).
type dictionaries struct {
	mu      sync.Mutex
	byClass map[string]*dictionary
	byID    map[uint32]*dictionary
	samples map[string]*dictSample // resources without a dictionary yet
	next    uint32                 // the next id to give
}

// dictSample is the values collected for a resource's dictionary: the last written of each of
// the first objects written, up to dictSize.
type dictSample struct {
	values map[string][]byte // by bucket and key
	order  []string
	size   int
	writes int
}

func dictKey(id uint32) []byte { return binary.BigEndian.AppendUint32(nil, id) }

// openDictionaries sets the next dictionary id from the file. It runs from Open, before the
// committer starts.
func (db *DB) openDictionaries(tx *bolt.Tx) {
	db.dicts.byClass = map[string]*dictionary{}
	db.dicts.byID = map[uint32]*dictionary{}
	db.dicts.samples = map[string]*dictSample{}
	db.dicts.next = 1
	if b := tx.Bucket(dictBucket); b != nil {
		db.dicts.next = uint32(b.Sequence()) + 1
	}
}

// compress returns value, written to bucket's key, compressed with class's dictionary, and the
// dictionary; value itself and nil when it is short, when the class has no dictionary yet (the
// value may become part of it), or when compressing gains nothing. Only the committer calls it.
func (db *DB) compress(class, bucket, key string, value []byte) ([]byte, *dictionary) {
	if len(value) < compressMin {
		return value, nil
	}
	d := db.dictionaryFor(class, bucket+"\x00"+key, value)
	if d == nil {
		return value, nil
	}
	out := d.compress(value)
	if len(out) >= len(value) {
		return value, nil
	}
	if back, err := d.decompress(nil, out); err != nil || !bytes.Equal(back, value) {
		return value, nil // never expected; the value is written as it is
	}
	return out, d
}

// dictionaryFor returns class's dictionary, nil while there is none: then value, the object's
// latest, joins the sample the dictionary will be made of.
func (db *DB) dictionaryFor(class, object string, value []byte) *dictionary {
	ds := &db.dicts
	ds.mu.Lock()
	defer ds.mu.Unlock()
	if d := ds.byClass[class]; d != nil {
		return d
	}
	s := ds.samples[class]
	if s == nil {
		if len(ds.byClass)+len(ds.samples) >= maxDicts {
			return nil
		}
		s = &dictSample{values: map[string][]byte{}}
		ds.samples[class] = s
	}
	s.writes++
	if old, ok := s.values[object]; ok {
		s.size += len(value) - len(old)
		s.values[object] = value
	} else if s.size < dictSize {
		s.size += len(value)
		s.values[object] = value
		s.order = append(s.order, object)
	}
	if s.writes < dictWrites {
		return nil
	}
	var data []byte
	for _, o := range s.order {
		data = append(data, s.values[o][:min(len(s.values[o]), dictSize-len(data))]...)
	}
	d := &dictionary{id: ds.next, data: data}
	ds.next++
	ds.byClass[class] = d
	ds.byID[d.id] = d
	delete(ds.samples, class)
	return d
}

// dropTables lets the dictionaries' tables go while the committer is idle.
func (db *DB) dropTables() {
	db.dicts.mu.Lock()
	defer db.dicts.mu.Unlock()
	for _, d := range db.dicts.byClass {
		d.table = nil
	}
}

// putDictionary writes d in tx unless it is there already.
func putDictionary(tx *bolt.Tx, d *dictionary) error {
	b, err := tx.CreateBucketIfNotExists(dictBucket)
	if err != nil {
		return fmt.Errorf("dictionaries: %w", err)
	}
	k := dictKey(d.id)
	if have := b.Get(k); have != nil {
		if !bytes.Equal(have, d.data) {
			return fmt.Errorf("dictionary %d on disk is not the one in use", d.id)
		}
		return nil
	}
	if err := b.Put(k, d.data); err != nil {
		return fmt.Errorf("writing dictionary %d: %w", d.id, err)
	}
	if uint64(d.id) > b.Sequence() {
		return b.SetSequence(uint64(d.id))
	}
	return nil
}

// inflate returns the original of value, compressed for the object under key, read in tx; other
// values are returned as they are. buf may be reused for the result.
func (db *DB) inflate(tx *bolt.Tx, key string, value, buf []byte) ([]byte, error) {
	if len(value) == 0 || value[0] != encodingCompressed {
		return value, nil
	}
	id, n := binary.Uvarint(value[1:])
	if n <= 0 || id == 0 || id > 1<<32-1 {
		return nil, errCorrupt
	}
	d, err := db.dictionary(tx, uint32(id), key)
	if err != nil {
		return nil, err
	}
	return d.decompress(buf[:0], value)
}

// dictionary returns dictionary id, read from tx if this process has not yet; the resource of the
// object under key adopts it if it has no dictionary.
func (db *DB) dictionary(tx *bolt.Tx, id uint32, key string) (*dictionary, error) {
	ds := &db.dicts
	ds.mu.Lock()
	defer ds.mu.Unlock()
	d := ds.byID[id]
	if d == nil {
		var data []byte
		if b := tx.Bucket(dictBucket); b != nil {
			data = b.Get(dictKey(id))
		}
		if data == nil {
			return nil, fmt.Errorf("dictionary %d is missing", id)
		}
		d = &dictionary{id: id, data: bytes.Clone(data)}
		ds.byID[id] = d
	}
	if gr, _, ok := parseDiskKey(key); ok {
		class := gr.Group + "/" + gr.Resource
		if ds.byClass[class] == nil && len(ds.byClass) < maxDicts {
			ds.byClass[class] = d
			delete(ds.samples, class)
		}
	}
	return d, nil
}

// dictionaryOf returns the id of the dictionary a compressed value uses; false for another value.
func dictionaryOf(value []byte) (uint32, bool) {
	if len(value) == 0 || value[0] != encodingCompressed {
		return 0, false
	}
	id, n := binary.Uvarint(value[1:])
	return uint32(id), n > 0 && id > 0 && id <= 1<<32-1
}

var errCorrupt = errors.New("malformed compressed value")

func lzHash(b []byte) uint32 {
	return (binary.LittleEndian.Uint32(b) * 2654435761) >> (32 - lzHashBits)
}

// compress returns the compressed value of v.
func (d *dictionary) compress(v []byte) []byte {
	if d.table == nil {
		d.table = make([]uint16, 1<<lzHashBits)
		for i := 0; i+lzMinMatch <= len(d.data); i++ {
			d.table[lzHash(d.data[i:])] = uint16(i + 1)
		}
	}
	out := []byte{encodingCompressed}
	out = binary.AppendUvarint(out, uint64(d.id))
	out = binary.AppendUvarint(out, uint64(len(v)))
	return d.encode(out, v)
}

// encode appends the operations that make v to dst: greedy, the longer of the matches the hash
// of the next 4 bytes finds in the dictionary and in v so far.
func (d *dictionary) encode(dst, v []byte) []byte {
	var self [1 << lzHashBits]int32 // the hash's last position in v, plus one
	lit := 0                        // start of the bytes not yet written
	i := 0
	for i+lzMinMatch <= len(v) {
		h := lzHash(v[i:])
		n, dist := 0, 0
		if p := int(self[h]) - 1; p >= 0 {
			n, dist = matchLen(v[p:], v[i:]), i-p
		}
		if p := int(d.table[h]) - 1; p >= 0 {
			if m := matchLen(d.data[p:], v[i:]); m > n {
				n, dist = m, i+len(d.data)-p
			}
		}
		self[h] = int32(i + 1)
		if n < lzMinMatch {
			i++
			continue
		}
		if lit < i {
			dst = binary.AppendUvarint(dst, uint64(i-lit)<<1)
			dst = append(dst, v[lit:i]...)
		}
		dst = binary.AppendUvarint(dst, uint64(n)<<1|1)
		dst = binary.AppendUvarint(dst, uint64(dist))
		for j := i + 1; j < i+n && j+lzMinMatch <= len(v); j++ {
			self[lzHash(v[j:])] = int32(j + 1)
		}
		i += n
		lit = i
	}
	if lit < len(v) {
		dst = binary.AppendUvarint(dst, uint64(len(v)-lit)<<1)
		dst = append(dst, v[lit:]...)
	}
	return dst
}

// matchLen is the length of the common prefix of a and b.
func matchLen(a, b []byte) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// decompress appends the original of the compressed value (with its 'z' and header) to dst.
func (d *dictionary) decompress(dst, value []byte) ([]byte, error) {
	if len(value) == 0 || value[0] != encodingCompressed {
		return nil, errCorrupt
	}
	src := value[1:]
	id, n := binary.Uvarint(src)
	if n <= 0 || id != uint64(d.id) {
		return nil, errCorrupt
	}
	src = src[n:]
	size, n := binary.Uvarint(src)
	if n <= 0 || size > uint64(len(src))*(1<<16) {
		return nil, errCorrupt
	}
	src = src[n:]
	base := len(dst)
	dst = slices.Grow(dst, int(size))
	for len(src) > 0 {
		op, n := binary.Uvarint(src)
		if n <= 0 || op>>1 == 0 || op>>1 > size-uint64(len(dst)-base) {
			return nil, errCorrupt
		}
		src = src[n:]
		l := int(op >> 1)
		if op&1 == 0 {
			if l > len(src) {
				return nil, errCorrupt
			}
			dst = append(dst, src[:l]...)
			src = src[l:]
			continue
		}
		dist, n := binary.Uvarint(src)
		out := len(dst) - base
		if n <= 0 || dist == 0 || dist > uint64(len(d.data)+out) {
			return nil, errCorrupt
		}
		src = src[n:]
		pos := len(d.data) + out - int(dist) // in the dictionary followed by the output
		if pos < len(d.data) {
			k := min(l, len(d.data)-pos)
			dst = append(dst, d.data[pos:pos+k]...)
			l, pos = l-k, len(d.data)
		}
		for from := base + pos - len(d.data); l > 0; l-- { // may overlap what it writes
			dst = append(dst, dst[from])
			from++
		}
	}
	if uint64(len(dst)-base) != size {
		return nil, errCorrupt
	}
	return dst, nil
}
