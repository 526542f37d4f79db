// Package kinds says what every kind a simulated workload cluster serves means: one strategy per
// kind, in the shape of k8s.io/apiserver's registry strategies (rest.RESTCreateStrategy,
// rest.RESTUpdateStrategy, rest.RESTGracefulDeleteStrategy), plus what the HTTP layer reads from a
// kind (selectable fields, table columns, the scale subresource).
//
// One file per kind holds all of it: its resource entry (discovery), defaults, create and update
// preparation, validation beyond metadata, selectable fields, graceful deletion, table columns and
// scale paths. Kinds with nothing of their own are one line in plain.go. Adding a kind is one
// strategy value registered in its file's init; the store's generic verbs and the API server's
// handlers find it through For.
//
// The package knows nothing of storage, clusters or HTTP; it depends only on the API types.
package kinds
