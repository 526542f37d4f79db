// Package store is the in-memory object store behind every simulated workload cluster's API
// server.
//
// A Manager holds one Cluster per workload cluster. A Cluster keeps its typed objects (from the
// shared Scheme) in package storage's kind-agnostic Objects, under the Cluster's one lock, and
// its generic verbs (write.go, patch.go, list.go, watch.go)
// run each kind's strategy from package kinds through k8s.io/apiserver's rest.BeforeCreate,
// rest.BeforeUpdate and rest.BeforeDelete, as kube-apiserver's generic registry does. Together
// they apply the rules of the real API server's registry:
// uid/creationTimestamp/generateName, a per-cluster monotonic resourceVersion, generation bumped
// only by spec changes, status subresource semantics, finalizers and deletionTimestamp,
// owner-reference garbage collection (Background, Foreground, Orphan), namespace lifecycle,
// dry run, name validation, optimistic concurrency, managed fields, and the four patch types
// including server-side apply.
//
// Design for many mostly idle clusters:
//   - The scheme, REST mapper, resource table, structured-merge-diff schemas and field managers
//     are process-wide and built once.
//   - Stored objects are immutable: each write stores a new object. Readers copy outside the
//     lock, and the event history shares the stored objects instead of copying them.
//   - Each cluster has one bounded event history in package storage (a lazily grown ring, also
//     aged out after the history's TTL by a timer the Cluster arms only while events exist). It serves watch resume, watch delivery and consistent paginated snapshots
//     (a past state is rebuilt by undoing newer events).
//   - Watchers read the history at their own pace; writers only append and wake them, so a slow
//     watcher never blocks anyone. A watcher whose next event has left the history is ended,
//     as the real API server ends slow watchers. An idle cluster runs no goroutines, and a
//     watch read with Watcher.Next (as the HTTP handler does) runs none either: the reader's
//     goroutine waits in Next. ResultChan starts a goroutine for watch.Interface users.
//   - The in-process client can skip managed-fields tracking for the simulator's own writes
//     (WithoutManagedFields); WarmUp builds the shared schemas before a load starts.
package store
