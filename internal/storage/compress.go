package storage

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/klauspost/compress/s2"
	bolt "go.etcd.io/bbolt"
)

// Values compressed against a dictionary per resource. The objects of one resource are alike from
// one cluster to the next (every cluster runs the same add-ons' pods, the same kind of Nodes and
// Deployments), and alike within a cluster, so an object's value is mostly runs of bytes that
// other objects of its resource hold too. Each resource gets a dictionary, a few KiB of values of
// that resource (the first distinct objects the committer wrote), and a value of 128 bytes or
// more is written as an S2 block (github.com/klauspost/compress/s2, Snappy's format extended with
// dictionaries) against that dictionary: copies from the dictionary or the value itself, and the
// bytes found in neither. A Pod of 1.2 KB takes about 360 bytes, a Node about 165; encoding a
// value costs the committer about 3 µs, decoding it 1 µs, and a dictionary's table is 32 KiB.
// zstd with the dictionary as raw content gives values a sixth smaller, for 10 µs a value and an
// encoder of 700 KiB per dictionary (300 µs to build): see docs/performance.md.
//
// Dictionaries are kept in their own bucket by id, written (if absent) in the transaction of the
// first value that uses them, read when a cluster with such values is loaded, and swept on open
// once no value uses them. A dictionary never changes once it has an id. A restarted process
// adopts the dictionaries its clusters' values use, so its writes do not need new ones.
//
// A compressed value is 'z', its codec (codecS2), the dictionary's id (uvarint), then the codec's
// bytes: for codecS2, the S2 block. Another codec would get another codec byte, the id staying
// where it is (the sweep reads it from every value). Every compressed value is decoded again and
// compared before it is written: a value the coder does not give back exactly is written as it
// is.

const (
	encodingCompressed byte = 'z'
	codecS2            byte = 1
	// compressMin is the smallest value compressed: a reference to shared content or a small
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
	// maxValue bounds what a damaged value may claim to decode to (etcd's own limit on a value is
	// 1.5 MiB): a larger value fails the check before its write, and is written as it is.
	maxValue = 16 << 20
)

// dictBucket holds the dictionaries by id (4 bytes, big-endian); its sequence is the last id given.
var dictBucket = []byte("\x00dicts")

// dictionary is a resource's dictionary: immutable once made.
type dictionary struct {
	id   uint32
	data []byte
	// s2 is data as S2 takes it, made on first use; nil when data is too short for one. Its
	// table, built on its first Encode, stays with it.
	once sync.Once
	s2   *s2.Dict
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
	out, err := d.compress(value)
	if err != nil || len(out) >= len(value) {
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
	id, ok := dictionaryOf(value)
	if !ok {
		return nil, errCorrupt
	}
	d, err := db.dictionary(tx, id, key)
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
	if gr, _, _, ok := db.parseKey(key); ok {
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
	if len(value) < 2 || value[0] != encodingCompressed {
		return 0, false
	}
	id, n := binary.Uvarint(value[2:])
	return uint32(id), n > 0 && id > 0 && id <= 1<<32-1
}

var errCorrupt = errors.New("malformed compressed value")

// s2Dict returns d's data as S2 takes it, nil when it is too short.
func (d *dictionary) s2Dict() *s2.Dict {
	d.once.Do(func() { d.s2 = s2.MakeDict(d.data, nil) })
	return d.s2
}

// compress returns the compressed value of v.
func (d *dictionary) compress(v []byte) ([]byte, error) {
	sd := d.s2Dict()
	if sd == nil {
		return nil, errors.New("dictionary too short")
	}
	out := []byte{encodingCompressed, codecS2}
	out = binary.AppendUvarint(out, uint64(d.id))
	head := len(out)
	block := sd.Encode(nil, v)
	return append(slices.Grow(out, len(block))[:head], block...), nil
}

// decompress returns the original of the compressed value (with its 'z' and header); buf's
// storage may be reused for it.
func (d *dictionary) decompress(buf, value []byte) ([]byte, error) {
	if len(value) < 2 || value[0] != encodingCompressed {
		return nil, errCorrupt
	}
	if value[1] != codecS2 {
		return nil, fmt.Errorf("%w: unknown codec %d", errCorrupt, value[1])
	}
	id, n := binary.Uvarint(value[2:])
	if n <= 0 || id != uint64(d.id) {
		return nil, errCorrupt
	}
	block := value[2+n:]
	sd := d.s2Dict()
	if size, err := s2.DecodedLen(block); sd == nil || err != nil || size > maxValue {
		return nil, errCorrupt
	}
	out, err := sd.Decode(buf[:0], block)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errCorrupt, err)
	}
	return out, nil
}
