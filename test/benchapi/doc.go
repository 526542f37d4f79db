// Package benchapi is `make bench-api`: the fake API server throughput of one Goofy workload
// cluster and one CAPD in-memory workload cluster (CAPI v1.14.2's
// test/infrastructure/inmemory backend), measured side by side with client-go over TLS.
//
// Each side runs in its own server process (cmd/goofyserver, capdserver) seeded with the same
// objects (Seed); the driver (cmd/bench-api) runs one operation at a time against one side at a
// time, so the two never compete for the cores, and reads each server's CPU time and Go
// allocations from its expvar endpoint around every measured window.
package benchapi
