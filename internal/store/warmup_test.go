package store

import (
	"os"
	"os/exec"
	"runtime"
	"testing"
)

// TestWarmUp runs in a fresh test process, where nothing has built the shared type converter
// yet, and checks that WarmUp builds it (lazily built state cannot be checked in this process,
// which other tests have already warmed).
func TestWarmUp(t *testing.T) {
	if os.Getenv("STORE_WARMUP_CHILD") == "1" {
		if typeConverter != nil {
			t.Fatal("type converter built before WarmUp")
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		WarmUp()
		runtime.ReadMemStats(&after)
		if typeConverter == nil {
			t.Fatal("WarmUp did not build the type converter")
		}
		WarmUp() // idempotent
		t.Logf("WarmUp allocated %.1f MB", float64(after.TotalAlloc-before.TotalAlloc)/(1<<20))
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestWarmUp$", "-test.v")
	cmd.Env = append(os.Environ(), "STORE_WARMUP_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	t.Logf("child:\n%s", out)
}
