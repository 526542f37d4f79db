package memtrim

import (
	"runtime"
	"testing"

	"github.com/go-logr/logr"
)

var sink [][]byte

// TestTrimIfIdle: after a burst of allocations that died, an idle process returns the free heap
// to the operating system (the runtime's released bytes grow by at least the burst's share that
// was free); while it still allocates as much as it holds free, it does not.
func TestTrimIfIdle(t *testing.T) {
	tr := New(DefaultInterval, logr.Discard())
	tr.MinFree = 8 << 20
	// A burst: 64 MiB in 64 KiB blocks, then dropped and collected.
	for range 1024 {
		sink = append(sink, make([]byte, 64<<10))
	}
	tr.lastAllocs = readMetrics()[allocsMetric]
	sink = nil
	runtime.GC()
	if free := readMetrics()[freeMetric]; free < tr.MinFree {
		t.Fatalf("free heap after the burst: %d B, want at least %d", free, tr.MinFree)
	}

	// Busy: allocating more than the free heap since the last look: nothing is trimmed.
	tr.lastAllocs -= 1 << 40
	if _, trimmed := tr.TrimIfIdle(); trimmed {
		t.Fatal("trimmed while the process allocates more than it holds free")
	}

	// Idle since: the free heap goes back to the operating system.
	released, trimmed := tr.TrimIfIdle()
	if !trimmed {
		t.Fatalf("did not trim an idle process holding %d B of free heap", readMetrics()[freeMetric])
	}
	if released < 32<<20 {
		t.Fatalf("released %d B, want at least half the 64 MiB burst", released)
	}
	if free := readMetrics()[freeMetric]; free >= tr.MinFree {
		t.Fatalf("free heap after trimming: %d B, want under %d", free, tr.MinFree)
	}
}
