package storage

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// FileName is the database file inside the state directory.
const FileName = "goofy.db"

// rvKey holds a bucket's last resourceVersion. Callers' keys never start with a NUL byte: keys that
// do are the DB's own (rvKey, the records of PutRecord), which Load skips.
var rvKey = []byte("\x00resourceVersion")

// allocSize is the step the file grows by. bbolt's default grows it to the next power of two up
// to 16 MiB (a file whose pages hold 4.2 MiB is 8 MiB); the file's size follows its data instead,
// for one truncate and fsync per 256 KiB it grows.
const allocSize = 256 << 10

// ErrClosed is returned for writes queued after Close.
var ErrClosed = errors.New("storage is closed")

// DB is the state directory's database. Its methods are safe for concurrent use.
//
// Each bucket is one workload cluster's state, and its writes depend on each other: a write may
// carry what an earlier one changed. So when a bucket's write fails, every later write of that
// bucket fails too (the bucket is fenced) until its owner has undone them in memory and calls
// Recover; other buckets' writes in the same batch still commit.
type DB struct {
	bolt *bolt.DB

	mu      sync.Mutex
	pending *batch // writes queued since the committer last took them; nil when none
	closed  bool
	kick    chan struct{} // capacity 1: "something is pending"
	hurry   chan struct{} // capacity 1: "somebody waits for what is pending" (see gatherWrites)
	gather  time.Duration // how long a batch gathers writes nobody waits for (gatherFor)
	stopped chan struct{} // closed when the committer has flushed everything and exited
	seq     uint64        // queue position of the next write
	// fences holds, per bucket whose write failed, the queue position from which its writes may
	// commit again: everything queued before it fails. failedFence until Recover.
	fences map[string]uint64
	fault  func(bucket, key string) error // InjectFault's
	dicts  dictionaries                   // compress.go
	codes  resourceCodes                  // keys.go

	stats Stats
}

// failedFence fences every write of a bucket, whenever queued.
const failedFence = math.MaxUint64

// ErrEarlierWriteFailed is the error of a write queued after a failed write of its bucket and
// before the bucket's Recover.
var ErrEarlierWriteFailed = errors.New("an earlier write of the same workload cluster failed")

// Stats counts the committer's work since Open.
type Stats struct {
	Batches uint64 // transactions committed (bbolt syncs each twice: its pages, then its meta page)
	Writes  uint64 // writes in them
	Bytes   uint64 // value bytes written
}

// batch is a group of writes committed together: in one transaction, or in one per bucket when
// the batch's transaction failed.
type batch struct {
	writes []write
	done   chan struct{}
	hurry  chan struct{} // the DB's
	errs   []error       // per write, once done; nil when every write committed
}

type write struct {
	bucket string
	key    string
	encode func() ([]byte, error) // nil: delete key
	rv     uint64                 // the bucket's resourceVersion once this write is applied; 0: unchanged
	drop   bool                   // delete the whole bucket
	seq    uint64                 // queue position
	// shared is the content a reference (the value) points at, put in the shared bucket in the
	// same transaction unless it is there already; nil for other writes.
	shared *sharedPut
	// class is the resource of an object's value, which may be compressed with its dictionary
	// (compress.go); "" for a value written as it is.
	class string
}

// sharedPut is shared content to be on disk: its id and its encoding.
type sharedPut struct {
	id     []byte
	encode func() ([]byte, error)
}

// sharedBucket holds shared content by id (shared.go). Cluster names never start with a NUL byte.
var sharedBucket = []byte("\x00shared")

// record reports whether w writes a record (PutRecord) rather than an object.
func (w write) record() bool { return strings.HasPrefix(w.key, recordPrefix) }

// Open opens (or creates) the database in dir and starts its committer. It fails rather than
// waits when another process holds the file.
func Open(dir string) (*DB, error) { return open(dir, gatherFor) }

// open is Open with the committer's gathering time (gatherWrites).
func open(dir string, gather time.Duration) (*DB, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating state directory: %w", err)
	}
	path := filepath.Join(dir, FileName)
	b, err := bolt.Open(path, 0o600, &bolt.Options{
		Timeout: 2 * time.Second, // another manager holds the file lock
		// The freelist is rebuilt from the file on open instead of written on every commit:
		// cheaper commits, as etcd configures it.
		NoFreelistSync: true,
		FreelistType:   bolt.FreelistMapType,
	})
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	b.AllocSize = allocSize
	db := &DB{bolt: b, kick: make(chan struct{}, 1), hurry: make(chan struct{}, 1), gather: gather, stopped: make(chan struct{})}
	if err := db.sweepShared(); err != nil {
		_ = b.Close()
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	go db.commitLoop()
	return db, nil
}

// Path is the database file.
func (db *DB) Path() string { return db.bolt.Path() }

// Close commits what is queued and closes the file.
func (db *DB) Close() error {
	db.mu.Lock()
	if db.closed {
		db.mu.Unlock()
		return nil
	}
	db.closed = true
	db.mu.Unlock()
	close(db.kick)
	<-db.stopped
	return db.bolt.Close()
}

// Commit is the handle of a queued write.
type Commit struct {
	b *batch
	i int // the write's index in the batch
}

// Wait blocks until the write is on disk, or returns why it is not. The zero Commit is done.
// A write somebody waits for is committed without gathering more (see gatherWrites).
func (c Commit) Wait() error {
	if c.b == nil {
		return nil
	}
	select {
	case <-c.b.done:
	default:
		select {
		case c.b.hurry <- struct{}{}:
		default:
		}
		<-c.b.done
	}
	if c.b.errs == nil {
		return nil
	}
	return c.b.errs[c.i]
}

// Done reports whether Wait would return at once.
func (c Commit) Done() bool {
	if c.b == nil {
		return true
	}
	select {
	case <-c.b.done:
		return true
	default:
		return false
	}
}

// InjectFault makes every later commit of a write for which f returns an error fail with it, as a
// failed transaction would (for tests: a full disk, an I/O error); nil ends it. f gets an object's
// key as "<group>/<resource>/<Key>", whatever its form on disk.
func (db *DB) InjectFault(f func(bucket, key string) error) {
	db.mu.Lock()
	defer db.mu.Unlock()
	db.fault = f
}

// Recover lets bucket's writes queued from now on commit again after one of its writes failed;
// its owner calls it once it has undone, in memory, every write of the bucket it had queued.
func (db *DB) Recover(bucket string) {
	db.mu.Lock()
	defer db.mu.Unlock()
	if _, ok := db.fences[bucket]; ok {
		db.fences[bucket] = db.seq
	}
}

// Put queues bucket[key] = encode(), and records rv as the bucket's resourceVersion. encode is
// called later, by the committer, so callers may queue under their own locks and encode outside
// them; it must return the same bytes whenever it is called.
func (db *DB) Put(bucket, key string, rv uint64, encode func() ([]byte, error)) Commit {
	return db.enqueue(write{bucket: bucket, key: key, encode: encode, rv: rv})
}

// Delete queues the removal of bucket[key] and records rv as the bucket's resourceVersion.
func (db *DB) Delete(bucket, key string, rv uint64) Commit {
	return db.enqueue(write{bucket: bucket, key: key, rv: rv})
}

// putObject queues bucket[key] = encode(), an object's value of resource class, compressed with
// the class's dictionary when that makes it smaller; Objects.Load gives it back as it was.
func (db *DB) putObject(bucket, key, class string, rv uint64, encode func() ([]byte, error)) Commit {
	return db.enqueue(write{bucket: bucket, key: key, encode: encode, rv: rv, class: class})
}

// putShared queues bucket[key] = ref, a reference to shared content id whose encoding content
// returns: the content is put in the shared bucket in the same transaction if it is not there.
func (db *DB) putShared(bucket, key string, rv uint64, ref, id []byte, content func() ([]byte, error)) Commit {
	return db.enqueue(write{bucket: bucket, key: key, rv: rv,
		encode: func() ([]byte, error) { return ref, nil },
		shared: &sharedPut{id: id, encode: content}})
}

// DropBucket queues the removal of a bucket and everything in it.
func (db *DB) DropBucket(bucket string) Commit {
	return db.enqueue(write{bucket: bucket, drop: true})
}

func (db *DB) enqueue(w write) Commit {
	db.mu.Lock()
	defer db.mu.Unlock()
	if db.closed {
		b := &batch{done: make(chan struct{}), errs: []error{ErrClosed}}
		close(b.done)
		return Commit{b: b}
	}
	if db.pending == nil {
		db.pending = &batch{done: make(chan struct{}), hurry: db.hurry}
	}
	w.seq = db.seq
	db.seq++
	db.pending.writes = append(db.pending.writes, w)
	select {
	case db.kick <- struct{}{}:
	default:
	}
	return Commit{b: db.pending, i: len(db.pending.writes) - 1}
}

// releaseAfter is how long after a commit the committer gives the pages of the file that the
// transactions read back (see releaseMapped): at most once per interval while writes go on.
const releaseAfter = 2 * time.Second

// commitLoop commits whatever is pending, one transaction at a time, until Close.
func (db *DB) commitLoop() {
	defer close(db.stopped)
	release := time.NewTimer(releaseAfter)
	release.Stop()
	gather := time.NewTimer(db.gather)
	gather.Stop()
	armed := false
	for {
		select {
		case _, ok := <-db.kick:
			if !ok {
				release.Stop()
				db.commitPending() // what was queued between the last kick and Close
				return
			}
			db.gatherWrites(gather)
			db.commitPending()
			if !armed {
				release.Reset(releaseAfter)
				armed = true
			}
		case <-release.C:
			armed = false
			db.releaseMapped()
		}
	}
}

// gatherFor is how long a batch that nobody waits for yet gathers writes before its commit.
const gatherFor = 5 * time.Millisecond

// gatherWrites returns once somebody waits for a pending write (Commit.Wait: a client's write,
// a read or a watch event that must not show what is not on disk), or after gatherFor. Most
// writes are the simulated control plane's, which nobody waits for (a pod's progress, a node's
// status): committed as they came, a fleet's writes took 1.4 per commit (`make bench N=60`),
// and each commit costs two fdatasyncs. What nobody has seen can wait a few milliseconds to
// share one.
func (db *DB) gatherWrites(t *time.Timer) {
	db.mu.Lock()
	pending := db.pending != nil
	db.mu.Unlock()
	if !pending { // a kick for writes that the last commit took
		return
	}
	t.Reset(db.gather)
	defer t.Stop()
	for {
		select {
		case <-db.hurry:
			return
		case <-t.C:
			return
		case _, ok := <-db.kick: // more writes, for this batch
			if !ok { // Close: commit what is queued now
				return
			}
		}
	}
}

// releaseMapped gives back the resident pages of the file's memory mapping. bbolt reads the file
// through that mapping, and every page a transaction reads (the B+tree's path to each key it
// writes) stays in the process's resident set: after a fleet's pods started, as much again as
// the state file holds. They are only the page cache's copy of the file, mapped. The committer
// is the only writer, so no transaction remaps the file meanwhile (a read transaction, this
// one included, holds the mapping in place).
func (db *DB) releaseMapped() {
	_ = db.bolt.View(func(tx *bolt.Tx) error {
		return releasePages(db.bolt.Info().Data, uintptr(tx.Size()))
	})
}

func (db *DB) commitPending() {
	db.mu.Lock()
	b := db.pending
	db.pending = nil
	fault := db.fault
	db.mu.Unlock()
	if b == nil {
		return
	}
	failed := map[string]error{} // buckets whose writes in this batch all fail
	db.fenced(b, failed)
	// Values are encoded before the transaction, so the file lock is held for writing alone. A
	// value that cannot be encoded fails its bucket's writes: later ones may build on it.
	values := make([][]byte, len(b.writes))
	var dicts []*dictionary // per write, the dictionary its value is compressed with
	for i, w := range b.writes {
		if w.encode == nil || failed[w.bucket] != nil {
			continue
		}
		v, err := w.encode()
		if err != nil {
			failed[w.bucket] = fmt.Errorf("encoding %s in %s: %w", db.writeName(w.key), w.bucket, err)
			continue
		}
		if w.class != "" {
			var d *dictionary
			if v, d = db.compress(w.class, w.bucket, w.key, v); d != nil {
				if dicts == nil {
					dicts = make([]*dictionary, len(b.writes))
				}
				dicts[i] = d
			}
		}
		values[i] = v
	}
	commit := func(bucket string) error {
		return db.bolt.Update(func(tx *bolt.Tx) error {
			for i, w := range b.writes {
				if (bucket != "" && w.bucket != bucket) || failed[w.bucket] != nil {
					continue
				}
				if fault != nil && !w.drop {
					if err := fault(w.bucket, db.writeName(w.key)); err != nil {
						return fmt.Errorf("writing %s in %s: %w", db.writeName(w.key), w.bucket, err)
					}
				}
				if err := db.apply(tx, w, values[i]); err != nil {
					return err
				}
				if w.encode != nil && !w.drop {
					if err := db.putResourceCode(tx, w.key); err != nil {
						return err
					}
				}
				if dicts != nil && dicts[i] != nil {
					if err := putDictionary(tx, dicts[i]); err != nil {
						return err
					}
				}
			}
			return nil
		})
	}
	txs := uint64(1)
	if err := commit(""); err != nil {
		// One transaction per bucket, so that one cluster's failure fails only its own writes.
		txs = 0
		for _, bucket := range batchBuckets(b, failed) {
			txs++
			if err := commit(bucket); err != nil {
				failed[bucket] = err
			}
		}
	}
	db.settle(b, failed, txs, values)
	// A Commit outlives its batch (every cluster keeps the one of its last write): it must not
	// keep the batch's writes alive, whose encoders hold the objects of every cluster in it,
	// versions long replaced among them.
	b.writes = nil
	close(b.done)
}

// fenced fails, in failed, the buckets of b whose earlier writes failed. Drops pass and end the
// fence (a deleted cluster's state goes whatever happened to its writes); records pass (they do
// not depend on the objects, and their writer has no objects to undo).
func (db *DB) fenced(b *batch, failed map[string]error) {
	db.mu.Lock()
	defer db.mu.Unlock()
	for _, w := range b.writes {
		fence, ok := db.fences[w.bucket]
		switch {
		case !ok:
		case w.drop:
			delete(db.fences, w.bucket)
		case w.record():
		case w.seq < fence:
			failed[w.bucket] = ErrEarlierWriteFailed
		default:
			delete(db.fences, w.bucket) // recovered, and everything queued before is behind us
		}
	}
}

// batchBuckets lists the buckets of b's writes that have not failed, in queue order.
func batchBuckets(b *batch, failed map[string]error) []string {
	seen := map[string]bool{}
	var out []string
	for _, w := range b.writes {
		if !seen[w.bucket] && failed[w.bucket] == nil {
			seen[w.bucket] = true
			out = append(out, w.bucket)
		}
	}
	return out
}

// settle records the batch's outcome: each write's error, the fences of the buckets that failed,
// the stats.
func (db *DB) settle(b *batch, failed map[string]error, txs uint64, values [][]byte) {
	db.mu.Lock()
	defer db.mu.Unlock()
	var written, bytes uint64
	for i, w := range b.writes {
		err := failed[w.bucket]
		if err == nil {
			written++
			bytes += uint64(len(values[i]))
			continue
		}
		if b.errs == nil {
			b.errs = make([]error, len(b.writes))
		}
		b.errs[i] = err
		if !w.drop && !w.record() {
			if db.fences == nil {
				db.fences = map[string]uint64{}
			}
			db.fences[w.bucket] = failedFence
		}
	}
	db.stats.Batches += txs
	db.stats.Writes += written
	db.stats.Bytes += bytes
}

// fillPercent is how full bbolt fills a cluster's pages when it splits them. Its default (half)
// suits keys inserted in random order; a cluster's keys mostly arrive in order (a resource's
// objects are created together, and its code leads the key), so pages split at half stayed half
// empty: at N=100 through real CAPI, 2.1 MB of keys and values held 983 pages (4.0 MB).
const fillPercent = 0.9

// apply performs one write in tx; value is the encoded value of a put.
func (db *DB) apply(tx *bolt.Tx, w write, value []byte) error {
	name := []byte(w.bucket)
	if w.drop {
		if err := tx.DeleteBucket(name); err != nil && !errors.Is(err, bolterrors.ErrBucketNotFound) {
			return fmt.Errorf("dropping the state of %s: %w", w.bucket, err)
		}
		return nil
	}
	bk, err := tx.CreateBucketIfNotExists(name)
	if err != nil {
		return fmt.Errorf("state of %s: %w", w.bucket, err)
	}
	bk.FillPercent = fillPercent
	if w.encode == nil {
		err = bk.Delete([]byte(w.key))
	} else {
		err = bk.Put([]byte(w.key), value)
	}
	if err == nil && w.shared != nil {
		err = putSharedContent(tx, w.shared)
	}
	if err == nil && w.rv != 0 {
		err = bk.Put(rvKey, binary.BigEndian.AppendUint64(nil, w.rv))
	}
	if err != nil {
		return fmt.Errorf("writing %s in %s: %w", db.writeName(w.key), w.bucket, err)
	}
	return nil
}

// Stats returns the committer's counters.
func (db *DB) Stats() Stats {
	db.mu.Lock()
	defer db.mu.Unlock()
	return db.stats
}

// Load calls each for every key of bucket in key order and returns the bucket's resourceVersion;
// found is false when the bucket does not exist. The value is only valid during the call, and is
// as it is on disk (an object's may be compressed: Objects.Load gives objects' values back).
func (db *DB) Load(bucket string, each func(key string, value []byte) error) (rv uint64, found bool, err error) {
	return db.load(bucket, false, each)
}

// load is Load; with inflate, compressed values are given back as they were written.
func (db *DB) load(bucket string, inflate bool, each func(key string, value []byte) error) (rv uint64, found bool, err error) {
	var buf []byte
	err = db.bolt.View(func(tx *bolt.Tx) error {
		bk := tx.Bucket([]byte(bucket))
		if bk == nil {
			return nil
		}
		found = true
		return bk.ForEach(func(k, v []byte) error {
			if string(k) == string(rvKey) {
				if len(v) != 8 {
					return fmt.Errorf("state of %s: malformed resourceVersion record", bucket)
				}
				rv = binary.BigEndian.Uint64(v)
				return nil
			}
			if len(k) > 0 && k[0] == 0 {
				return nil // a record kept beside the objects (PutRecord), not an object
			}
			if v == nil {
				return fmt.Errorf("state of %s: unexpected nested bucket %q", bucket, k)
			}
			if inflate && len(v) > 0 && v[0] == encodingCompressed {
				var err error
				if buf, err = db.inflate(tx, string(k), v, buf); err != nil {
					return fmt.Errorf("state of %s: %s: %w", bucket, db.keyName(string(k)), err)
				}
				v = buf
			}
			return each(string(k), v)
		})
	})
	return rv, found, err
}

// Buckets lists the buckets on disk (the workload clusters with state).
func (db *DB) Buckets() ([]string, error) {
	var names []string
	err := db.bolt.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, _ *bolt.Bucket) error {
			if !ownBucket(name) {
				names = append(names, string(name))
			}
			return nil
		})
	})
	return names, err
}

// ownBucket reports whether a bucket is the DB's own rather than a cluster's.
func ownBucket(name []byte) bool {
	return bytes.Equal(name, sharedBucket) || bytes.Equal(name, dictBucket) || bytes.Equal(name, resourceBucket)
}

// putSharedContent puts shared content in the shared bucket unless it is there already.
func putSharedContent(tx *bolt.Tx, s *sharedPut) error {
	sb, err := tx.CreateBucketIfNotExists(sharedBucket)
	if err != nil {
		return fmt.Errorf("shared content: %w", err)
	}
	if sb.Get(s.id) != nil {
		return nil
	}
	v, err := s.encode()
	if err != nil {
		return fmt.Errorf("encoding shared content: %w", err)
	}
	if err := sb.Put(s.id, v); err != nil {
		return fmt.Errorf("writing shared content: %w", err)
	}
	return nil
}

// sharedValues returns the encodings of the shared contents of ids that are on disk.
func (db *DB) sharedValues(ids [][sha256.Size]byte) (map[[sha256.Size]byte][]byte, error) {
	out := map[[sha256.Size]byte][]byte{}
	err := db.bolt.View(func(tx *bolt.Tx) error {
		sb := tx.Bucket(sharedBucket)
		if sb == nil {
			return nil
		}
		for _, id := range ids {
			if v := sb.Get(id[:]); v != nil {
				out[id] = bytes.Clone(v)
			}
		}
		return nil
	})
	return out, err
}

// InUse is the bytes of the file's pages that hold data (bbolt's leaf and branch pages in use,
// over every bucket): what the file needs, where its size is what it grew to.
func (db *DB) InUse() (int64, error) {
	var n int64
	err := db.bolt.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(_ []byte, b *bolt.Bucket) error {
			st := b.Stats()
			n += int64(st.BranchInuse + st.LeafInuse)
			return nil
		})
	})
	return n, err
}

// SharedContents is the number of shared contents on disk and their bytes.
func (db *DB) SharedContents() (n, size int, err error) {
	err = db.bolt.View(func(tx *bolt.Tx) error {
		sb := tx.Bucket(sharedBucket)
		if sb == nil {
			return nil
		}
		return sb.ForEach(func(_, v []byte) error {
			n++
			size += len(v)
			return nil
		})
	})
	return n, size, err
}

// sweepShared deletes the shared content that no reference on disk points at any more (the
// clusters that held it were deleted or changed it), and the dictionaries no value uses. It runs
// when the file is opened, before anything else reads or writes it.
func (db *DB) sweepShared() error {
	swept := false
	err := db.bolt.Update(func(tx *bolt.Tx) error {
		db.openDictionaries(tx)
		if err := db.openResourceCodes(tx); err != nil {
			return err
		}
		sb, dicts := tx.Bucket(sharedBucket), tx.Bucket(dictBucket)
		if sb == nil && dicts == nil {
			return nil
		}
		used := map[[sha256.Size]byte]bool{}
		usedDicts := map[uint32]bool{}
		err := tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			if ownBucket(name) {
				return nil
			}
			return b.ForEach(func(k, v []byte) error {
				if len(k) == 0 || k[0] == 0 {
					return nil
				}
				if len(v) == refLen && v[0] == encodingShared {
					used[[sha256.Size]byte(v[1:1+sha256.Size])] = true
				} else if id, ok := dictionaryOf(v); ok {
					usedDicts[id] = true
				}
				return nil
			})
		})
		if err != nil {
			return err
		}
		for _, sweep := range []struct {
			b    *bolt.Bucket
			used func(k []byte) bool
		}{
			{sb, func(k []byte) bool { return len(k) == sha256.Size && used[[sha256.Size]byte(k)] }},
			{dicts, func(k []byte) bool { return len(k) == 4 && usedDicts[binary.BigEndian.Uint32(k)] }},
		} {
			if sweep.b == nil {
				continue
			}
			var unused [][]byte
			err = sweep.b.ForEach(func(k, _ []byte) error {
				if !sweep.used(k) {
					unused = append(unused, bytes.Clone(k))
				}
				return nil
			})
			if err != nil {
				return err
			}
			for _, k := range unused {
				if err := sweep.b.Delete(k); err != nil {
					return err
				}
			}
		}
		swept = true
		return nil
	})
	if err == nil && swept {
		db.releaseMapped() // the scan read the whole file through the mapping
	}
	return err
}
