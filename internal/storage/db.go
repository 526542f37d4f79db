package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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

// ErrClosed is returned for writes queued after Close.
var ErrClosed = errors.New("storage is closed")

// DB is the state directory's database. Its methods are safe for concurrent use.
type DB struct {
	bolt *bolt.DB

	mu      sync.Mutex
	pending *batch // writes queued since the committer last took them; nil when none
	closed  bool
	kick    chan struct{} // capacity 1: "something is pending"
	stopped chan struct{} // closed when the committer has flushed everything and exited

	stats Stats
}

// Stats counts the committer's work since Open.
type Stats struct {
	Batches uint64 // transactions committed (one fsync each)
	Writes  uint64 // writes in them
	Bytes   uint64 // value bytes written
}

// batch is a group of writes committed in one transaction.
type batch struct {
	writes []write
	done   chan struct{}
	err    error   // the transaction's: every write of the batch failed
	failed []error // per write, when its value could not be encoded (nil: none failed)
}

type write struct {
	bucket string
	key    string
	encode func() ([]byte, error) // nil: delete key
	rv     uint64                 // the bucket's resourceVersion once this write is applied; 0: unchanged
	drop   bool                   // delete the whole bucket
}

// Open opens (or creates) the database in dir and starts its committer. It fails rather than
// waits when another process holds the file.
func Open(dir string) (*DB, error) {
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
	db := &DB{bolt: b, kick: make(chan struct{}, 1), stopped: make(chan struct{})}
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
func (c Commit) Wait() error {
	if c.b == nil {
		return nil
	}
	<-c.b.done
	if c.b.err == nil && c.b.failed != nil {
		return c.b.failed[c.i]
	}
	return c.b.err
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

// DropBucket queues the removal of a bucket and everything in it.
func (db *DB) DropBucket(bucket string) Commit {
	return db.enqueue(write{bucket: bucket, drop: true})
}

func (db *DB) enqueue(w write) Commit {
	db.mu.Lock()
	defer db.mu.Unlock()
	if db.closed {
		b := &batch{done: make(chan struct{}), err: ErrClosed}
		close(b.done)
		return Commit{b: b}
	}
	if db.pending == nil {
		db.pending = &batch{done: make(chan struct{})}
	}
	db.pending.writes = append(db.pending.writes, w)
	select {
	case db.kick <- struct{}{}:
	default:
	}
	return Commit{b: db.pending, i: len(db.pending.writes) - 1}
}

// commitLoop commits whatever is pending, one transaction at a time, until Close.
func (db *DB) commitLoop() {
	defer close(db.stopped)
	for range db.kick {
		db.commitPending()
	}
	db.commitPending() // what was queued between the last kick and Close
}

func (db *DB) commitPending() {
	db.mu.Lock()
	b := db.pending
	db.pending = nil
	db.mu.Unlock()
	if b == nil {
		return
	}
	// Values are encoded before the transaction, so a value that cannot be encoded fails its own
	// write only, and the file lock is held for writing alone.
	values := make([][]byte, len(b.writes))
	var bytes uint64
	for i, w := range b.writes {
		if w.encode == nil {
			continue
		}
		v, err := w.encode()
		if err != nil {
			if b.failed == nil {
				b.failed = make([]error, len(b.writes))
			}
			b.failed[i] = fmt.Errorf("encoding %s in %s: %w", w.key, w.bucket, err)
			continue
		}
		values[i] = v
		bytes += uint64(len(v))
	}
	b.err = db.bolt.Update(func(tx *bolt.Tx) error {
		for i, w := range b.writes {
			if b.failed != nil && b.failed[i] != nil {
				continue
			}
			if err := apply(tx, w, values[i]); err != nil {
				return err
			}
		}
		return nil
	})
	if b.err == nil {
		db.mu.Lock()
		db.stats.Batches++
		db.stats.Writes += uint64(len(b.writes))
		db.stats.Bytes += bytes
		db.mu.Unlock()
	}
	close(b.done)
}

// apply performs one write in tx; value is the encoded value of a put.
func apply(tx *bolt.Tx, w write, value []byte) error {
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
	if w.encode == nil {
		err = bk.Delete([]byte(w.key))
	} else {
		err = bk.Put([]byte(w.key), value)
	}
	if err == nil && w.rv != 0 {
		err = bk.Put(rvKey, binary.BigEndian.AppendUint64(nil, w.rv))
	}
	if err != nil {
		return fmt.Errorf("writing %s in %s: %w", w.key, w.bucket, err)
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
// found is false when the bucket does not exist. The value is only valid during the call.
func (db *DB) Load(bucket string, each func(key string, value []byte) error) (rv uint64, found bool, err error) {
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
			names = append(names, string(name))
			return nil
		})
	})
	return names, err
}
