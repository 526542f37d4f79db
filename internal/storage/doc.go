// Package storage is the kind-agnostic layer of the workload clusters' state. Objects holds one
// cluster's objects in memory: the current version of each, its resourceVersion counter, the
// bounded history of changes that watches resume from, and the cache of encoded objects. It
// knows no kind, no validation and no HTTP: the registry above it (package store) decides what
// is written and hands it a Decoder when a cluster is loaded.
//
// DB keeps the objects on disk: one bbolt database (the engine etcd itself uses) holding a
// bucket per workload cluster, with the objects' keys and encoded values and the cluster's last
// resourceVersion. Objects' keys name their resource by a short code (keys.go), and their values
// of 128 bytes or more are compressed with S2 (github.com/klauspost/compress) against a
// dictionary per resource kept once in the file (compress.go).
//
// Writes from every cluster go through one queue and are committed in groups: whatever was queued
// while the previous transaction was being written and synced goes into the next one, so a busy
// manager pays one fsync for many writes and an idle one commits each write at once. Writes are
// applied in the order they were queued, so the last queued version of a key is the one on disk.
// A caller acknowledges its client only after Commit.Wait returns nil.
package storage
