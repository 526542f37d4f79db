// Package e2e is the lifecycle suite: real CAPI (core, CABPK, KCP) drives Goofy on a local
// management plane (see package harness). It runs as part of `go test ./...` whenever the plane's
// binaries are built (hack/envtest.sh with kube-controller-manager, hack/capi-managers.sh), and
// `make e2e` (GOOFY_E2E=1) builds them first. -short or GOOFY_E2E=0 skips it.
package e2e

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/testenv"
	"github.com/goofy-capi/cluster-api-provider-goofy/test/e2e/harness"
)

var (
	plane      *harness.Plane
	bins       harness.Binaries
	skipReason string
	repoRoot   string
	runDir     string
	// portRange is the Goofy manager's listener port range: exactly as many ports as the suite has
	// clusters at most at once, so a new cluster can only get a port by reusing a freed one.
	portRange     [2]int
	timingsReport strings.Builder
	timingsMu     sync.Mutex
)

// addTiming adds a line to the scenario timings printed at the end; scenarios run concurrently.
func addTiming(format string, args ...any) {
	timingsMu.Lock()
	defer timingsMu.Unlock()
	fmt.Fprintf(&timingsReport, format, args...)
}

// maxClusters is how many clusters the suite's namespace holds at most at once: qs, upg, cc and mp.
const maxClusters = 4

// Listener ports: the suite's manager takes its few from suitePorts, the stress test's own manager
// (stress_test.go) its range from stressPorts, so the two never share one. Both stay below the
// kernel's ephemeral range (see freeConsecutivePorts).
var (
	suitePorts  = [2]int{20000, 29999}
	stressPorts = [2]int{30000, 32767}
)

func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.parallel"); f != nil {
		if n, err := strconv.Atoi(f.Value.String()); err != nil || n < scenarioParallelism {
			_ = f.Value.Set(strconv.Itoa(scenarioParallelism)) // see inOrder
		}
	}
	ctrllog.SetLogger(logr.Discard()) // envtest's own logging; the plane reports progress itself
	code := m.Run()
	status := "end-to-end suite: no test selected (-run), no management plane started"
	switch {
	case plane != nil:
		plane.Stop()
		status = fmt.Sprintf("end-to-end suite: ran against real CAPI %s (logs and timings in %s)", harness.CAPIVersion, runDir)
		if timingsReport.Len() > 0 {
			fmt.Printf("\n== scenario timings\n%s", timingsReport.String())
			_ = os.WriteFile(filepath.Join(runDir, "timings.txt"), []byte(timingsReport.String()), 0o644)
		}
	case skipReason != "":
		status = "end-to-end suite: skipped: " + skipReason
	}
	writeStatus(status)
	os.Exit(code)
}

// startPlane runs prepare once, for the first test that needs the plane: a run that selects no
// e2e test (go test -run X) starts nothing.
var startPlane = sync.OnceFunc(func() { skipReason = prepare() })

// writeStatus records whether the suite ran or why not where `make test` prints it from
// (out/e2e/status): go test shows a passing package's output only with -v.
func writeStatus(status string) {
	root := testenv.RepoRoot()
	if err := os.MkdirAll(filepath.Join(root, "out", "e2e"), 0o755); err == nil {
		_ = os.WriteFile(filepath.Join(root, "out", "e2e", "status"), []byte(status+"\n"), 0o644)
	}
}

// prepare builds (GOOFY_E2E=1) or finds the binaries, builds the Goofy manager and starts the
// plane. It returns why the suite must be skipped, or "" when the plane is up.
func prepare() string {
	if testing.Short() || os.Getenv("GOOFY_E2E") == "0" {
		return "end-to-end suite disabled (-short or GOOFY_E2E=0)"
	}
	repoRoot = testenv.RepoRoot()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Minute)
	defer cancel()
	var err error
	if os.Getenv("GOOFY_E2E") == "1" {
		bins, err = harness.EnsureBinaries(ctx, repoRoot, os.Stderr)
		if err != nil {
			fmt.Fprintln(os.Stderr, "e2e: building binaries:", err)
			os.Exit(1)
		}
	} else {
		bins = harness.DefaultBinaries(repoRoot)
		if err := bins.Check(false); err != nil {
			return fmt.Sprintf("management plane binaries not built (make e2e builds them, then runs the suite): %v", err)
		}
		if _, err := os.Stat(filepath.Join(repoRoot, "main.go")); err != nil {
			return "the Goofy manager (main.go) does not exist yet"
		}
		if err := harness.BuildGoofy(ctx, repoRoot, bins.Goofy, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, "e2e: building the Goofy manager:", err)
			os.Exit(1)
		}
	}
	runDir = filepath.Join(repoRoot, "out", "e2e", "suite-"+time.Now().Format("20060102-150405"))
	first, err := freeConsecutivePorts(maxClusters, suitePorts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	portRange = [2]int{first, first + maxClusters - 1}
	start := time.Now()
	plane, err = harness.Start(ctx, harness.Options{
		RepoRoot: repoRoot, OutputDir: runDir, Binaries: bins, Progress: os.Stderr,
		ListenerPortRange: fmt.Sprintf("%d-%d", portRange[0], portRange[1]),
		// Only the suite's namespace: the stress test runs its own manager for its own namespace.
		GoofyArgs: []string{"--namespace=" + ns},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: starting the management plane:", err)
		os.Exit(1)
	}
	addTiming("%-28s %6.0fs\n", "management plane start", time.Since(start).Seconds())
	if suiteClustersCreatedAtOnce() {
		if err := createSuiteClusters(ctx, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, "e2e: creating the shared clusters:", err)
			os.Exit(1)
		}
	}
	return ""
}

// freeConsecutivePorts reserves n consecutive free loopback ports in the inclusive range, below the
// kernel's ephemeral port range: a port that is free now but ephemeral can become the local end
// of any outgoing connection (kube-apiserver to etcd, say), and the Goofy manager then finds no
// free port in a range this small. The ports stay reserved against other test processes
// (harness.ReservePorts) until this one exits.
func freeConsecutivePorts(n int, within [2]int) (int, error) {
	if lo, _ := ephemeralPortRange(); within[1] >= lo {
		within[1] = lo - 1
	}
	ports, err := harness.ReservePorts(n, within, true)
	if err != nil {
		return 0, err
	}
	return ports[0], nil
}

// ephemeralPortRange is Linux's ip_local_port_range (its default when unreadable).
func ephemeralPortRange() (lo, hi int) {
	lo, hi = 32768, 60999
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		_, _ = fmt.Sscanf(string(b), "%d %d", &lo, &hi)
	}
	return lo, hi
}
