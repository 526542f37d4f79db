// Package storage is the kind-agnostic, durable half of the workload clusters' state: one bbolt
// database (the engine etcd itself uses) holding a bucket per workload cluster, with opaque keys
// and values chosen by the caller and the cluster's last resourceVersion.
//
// Writes from every cluster go through one queue and are committed in groups: whatever was queued
// while the previous transaction was being written and synced goes into the next one, so a busy
// manager pays one fsync for many writes and an idle one commits each write at once. Writes are
// applied in the order they were queued, so the last queued version of a key is the one on disk.
// A caller acknowledges its client only after Commit.Wait returns nil.
package storage
