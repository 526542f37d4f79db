package storage

import (
	"bytes"
	"errors"

	bolt "go.etcd.io/bbolt"
)

// Records: small values kept beside a bucket's objects, such as which listener port the workload
// cluster held and for which object (package mux). Load skips them; they go with the bucket when it
// is dropped, so a record never outlives the state it describes.

// recordPrefix starts a record's key; callers' object keys never start with a NUL byte.
const recordPrefix = "\x00record/"

// PutRecord queues bucket's record name = value (creating the bucket if needed), in the order of
// every other write: a record queued before the bucket's DropBucket goes with it.
func (db *DB) PutRecord(bucket, name string, value []byte) Commit {
	v := append([]byte(nil), value...)
	return db.enqueue(write{bucket: bucket, key: recordPrefix + name, encode: func() ([]byte, error) { return v, nil }})
}

// Records returns the record name of every bucket that has one, by bucket.
func (db *DB) Records(name string) (map[string][]byte, error) {
	if db == nil {
		return nil, errors.New("storage: no database")
	}
	out := map[string][]byte{}
	key := []byte(recordPrefix + name)
	err := db.bolt.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(bucket []byte, b *bolt.Bucket) error {
			if bytes.Equal(bucket, sharedBucket) || bytes.Equal(bucket, dictBucket) {
				return nil
			}
			if v := b.Get(key); v != nil {
				out[string(bucket)] = append([]byte(nil), v...)
			}
			return nil
		})
	})
	return out, err
}
