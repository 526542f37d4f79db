// Package cachetrim is an HTTP transport for the manager's cache: it leaves out of the
// management API server's JSON list and watch responses the members of objects that the cache
// would throw away right after decoding them (managed fields, CAPI's Machine and Cluster
// statuses: see controllers.MachineCache), so that they are never decoded.
//
// Why: decoding the watch events of CAPI's Machines and Clusters, JSON of 7-10 KB each of which
// managed fields and status are four fifths, was a fifth of the manager's CPU through real CAPI
// (`make bench N=60`: 3.2 of 17.0 s of samples), and every Machine and Cluster changes many
// times while a cluster provisions. The cache's transforms still run on what is decoded and
// define what the cache holds; this transport only spares the decoder work the transforms undo,
// so a member it leaves out must be one they drop.
//
// The trimming scans the bytes (strings and brackets), copying the members kept as they are.
// What it cannot read as a well-formed object passes unchanged, for the decoder to report.
package cachetrim
