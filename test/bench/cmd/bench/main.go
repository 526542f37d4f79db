// Command bench is `make bench`: for each provider it starts a fresh embedded management plane
// with the real CAPI v1.14.2 managers, creates N clusters, waits until all are Available and
// reports to stdout and to out/bench/<run>/report.json, with a PNG plot of clusters Available over
// time. Knobs are flags, defaulted from the environment variables the Makefile passes.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/goofy-capi/cluster-api-provider-goofy/test/bench"
	"github.com/goofy-capi/cluster-api-provider-goofy/test/e2e/harness"
)

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

func envFloat(name string, def float64) float64 {
	if v, err := strconv.ParseFloat(os.Getenv(name), 64); err == nil {
		return v
	}
	return def
}

func envDuration(name string, def time.Duration) time.Duration {
	if v, err := time.ParseDuration(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run() error {
	n := flag.Int("n", envInt("N", 100), "clusters to create (env N)")
	cp := flag.Int("control-plane", envInt("CONTROL_PLANE", 1), "control-plane machines per cluster (env CONTROL_PLANE)")
	workers := flag.Int("workers", envInt("WORKERS", 1), "worker machines per cluster (env WORKERS)")
	phase := flag.Duration("phase", envDuration("PHASE", time.Second), "duration of every simulated machine phase (env PHASE)")
	jitter := flag.String("jitter", envOr("JITTER", "0"), "startupJitter fraction of every phase (env JITTER)")
	batch := flag.Int("batch", envInt("BATCH", 10), "clusters applied together (env BATCH)")
	batchInterval := flag.Duration("batch-interval", envDuration("BATCH_INTERVAL", 0), "pause between batches (env BATCH_INTERVAL)")
	providers := flag.String("providers", envOr("PROVIDERS", "goofy"), "space-separated providers: goofy capd-inmemory (env PROVIDERS)")
	timeout := flag.Duration("timeout", envDuration("TIMEOUT", 20*time.Minute), "per-provider bound on waiting for all clusters Available (env TIMEOUT)")
	profile := flag.Duration("profile", envDuration("PROFILE", 30*time.Second), "CPU profile window for the provider's pprof endpoint; 0 disables (env PROFILE)")
	k8s := flag.String("kubernetes-version", envOr("KUBERNETES_VERSION", "v1.36.3"), "Kubernetes version of the clusters")
	portRange := flag.String("goofy-port-range", envOr("GOOFY_LISTENER_PORT_RANGE", "17000-19999"), "Goofy listener ports: below the kernel's ephemeral range (32768-60999 by default), as the tests' ranges are, and apart from CAPD's 20000-30000 (env GOOFY_LISTENER_PORT_RANGE)")
	out := flag.String("out", "out/bench", "output directory")
	qps := flag.Float64("qps", envFloat("QPS", 0), "QPS of every provider's client to the management API server; 0 keeps each provider's shipped default (env QPS)")
	burst := flag.Int("burst", envInt("BURST", 0), "burst of every provider's client to the management API server; 0 keeps each provider's shipped default (env BURST)")
	concurrency := flag.Int("concurrency", envInt("CONCURRENCY", 0), "infrastructure clusters and machines every provider reconciles at once (Goofy's --goofycluster/goofymachine-concurrency, CAPD's --devcluster/devmachine-concurrency); 0 keeps each provider's shipped default (env CONCURRENCY)")
	shards := flag.Int("shards", envInt("SHARDS", 1), "Goofy managers sharing the clusters by --watch-filter (docs/scaling.md; env SHARDS)")
	faults := flag.String("faults", os.Getenv("FAULTS"), "fault profile (docs/faults.md) applied to a share of Goofy's clusters (env FAULTS)")
	auditBodies := flag.Bool("audit-bodies", os.Getenv("AUDIT_BODIES") != "", "log request bodies of the provider's writes to infrastructure kinds (env AUDIT_BODIES)")
	machinePool := flag.Bool("machine-pool", os.Getenv("MACHINE_POOL") != "", "Goofy's workers as one MachinePool per cluster instead of a MachineDeployment; CAPD in-memory has none (env MACHINE_POOL)")
	steady := flag.Duration("steady", envDuration("STEADY", 0), "after all clusters are Available, count the provider's requests for this long: its steady-state cost per machine per 10-minute sync period (env STEADY)")
	flag.Parse()

	// The observer's informers log through controller-runtime; the run's output is the report.
	ctrllog.SetLogger(logr.Discard())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	repo, err := os.Getwd()
	if err != nil {
		return err
	}
	names := strings.Fields(*providers)
	for _, p := range names {
		if p != bench.ProviderGoofy && p != bench.ProviderCAPD {
			return fmt.Errorf("unknown provider %q (want %s or %s)", p, bench.ProviderGoofy, bench.ProviderCAPD)
		}
	}
	if *machinePool && slices.Contains(names, bench.ProviderCAPD) {
		return fmt.Errorf("MACHINE_POOL: %s has no MachinePools; run it in its own make bench without MACHINE_POOL", bench.ProviderCAPD)
	}
	if len(names) == 0 || *n < 1 || *cp < 1 || *workers < 0 {
		return fmt.Errorf("need at least one provider, one cluster and one control-plane machine")
	}

	var faultProfile *bench.FaultProfile
	if *faults != "" {
		if faultProfile, err = bench.LoadFaultProfile(*faults); err != nil {
			return err
		}
	}

	fmt.Println("== building what is missing (cached under ~/.cache/goofy; the first run takes a while)")
	// Build only what is missing (the bench needs no clusterctl); the Goofy manager is always
	// rebuilt from this checkout (quick when nothing changed) into its own path.
	bins := harness.DefaultBinaries(repo)
	if bins.Check(false) != nil {
		if bins, err = harness.EnsureBinaries(ctx, repo, os.Stderr); err != nil {
			return err
		}
	}
	bins.Goofy = filepath.Join(repo, "bin", "goofy-bench-manager")
	if err := harness.BuildGoofy(ctx, repo, bins.Goofy, os.Stderr); err != nil {
		return err
	}
	var capdBinary, capdModule string
	if strings.Contains(*providers, bench.ProviderCAPD) {
		if capdBinary, capdModule, err = buildCAPD(ctx, repo); err != nil {
			return err
		}
	}

	runDir, err := filepath.Abs(filepath.Join(*out, time.Now().UTC().Format("20060102-150405")))
	if err != nil {
		return err
	}
	var results []*bench.Result
	for _, p := range names {
		fmt.Printf("== %s: %d clusters × (%d control-plane + %d workers), phases %s\n", p, *n, *cp, *workers, *phase)
		res, err := bench.Run(ctx, bench.Config{
			Provider: p, Clusters: *n, ControlPlane: *cp, Workers: *workers, Phase: *phase, Jitter: *jitter,
			BatchSize: *batch, BatchInterval: *batchInterval, Timeout: *timeout, KubernetesVersion: *k8s,
			GoofyPortRange: *portRange, Client: bench.ClientSettings{QPS: *qps, Burst: *burst, Concurrency: *concurrency}, ProfileWindow: *profile, AuditBodies: *auditBodies, Faults: faultProfile, Shards: *shards,
			MachinePool: *machinePool, SteadyWindow: *steady,
			RepoRoot: repo, OutDir: filepath.Join(runDir, p), Binaries: bins,
			CAPDBinary: capdBinary, CAPDModule: capdModule, Progress: os.Stdout,
		})
		if err != nil {
			fmt.Fprintf(os.Stderr, "== %s failed: %v (logs: %s)\n", p, err, res.LogDir)
		}
		results = append(results, res)
		if ctx.Err() != nil {
			break
		}
	}

	report := bench.NewReport(results)
	fmt.Println()
	report.WriteText(os.Stdout)
	if err := report.WriteJSON(filepath.Join(runDir, "report.json")); err != nil {
		return err
	}
	if err := report.WritePlot(filepath.Join(runDir, "available.png")); err != nil {
		return err
	}
	fmt.Printf("\nreport: %s\nplot:   %s\n", filepath.Join(runDir, "report.json"), filepath.Join(runDir, "available.png"))
	for _, r := range results {
		if r.Error != "" {
			return fmt.Errorf("%s: %s", r.Provider, r.Error)
		}
	}
	return nil
}

// buildCAPD builds CAPD (cached) with test/bench/build-capd.sh and returns the binary and the
// sigs.k8s.io/cluster-api/test module source (CRDs and webhook manifests).
func buildCAPD(ctx context.Context, repo string) (binary, module string, err error) {
	cmd := exec.CommandContext(ctx, filepath.Join(repo, "test", "bench", "build-capd.sh"))
	cmd.Stderr = os.Stderr
	outb, err := cmd.Output()
	if err != nil {
		return "", "", fmt.Errorf("building CAPD: %w", err)
	}
	lines := strings.Split(strings.TrimSpace(string(outb)), "\n")
	binary = filepath.Join(strings.TrimSpace(lines[len(lines)-1]), "capd-manager")
	modCache, err := exec.CommandContext(ctx, "go", "env", "GOMODCACHE").Output()
	if err != nil {
		return "", "", err
	}
	module = filepath.Join(strings.TrimSpace(string(modCache)), "sigs.k8s.io", "cluster-api", "test@"+harness.CAPIVersion)
	if _, err := os.Stat(filepath.Join(module, "infrastructure", "docker", "config", "crd", "bases")); err != nil {
		return "", "", fmt.Errorf("CAPD module source: %w", err)
	}
	return binary, module, nil
}
