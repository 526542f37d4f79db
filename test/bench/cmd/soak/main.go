// Command soak is `make soak`: clusters through the real CAPI managers for hours with churn, and
// in its second phase a SIGKILL of the Goofy manager every RestartEvery; it samples the manager
// every minute into a CSV and a PNG plot and fails on growth of RSS or goroutines within a
// segment between restarts, or on a ConfigMap lost (docs/performance.md, "Soak").
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/goofy-capi/cluster-api-provider-goofy/test/bench"
	"github.com/goofy-capi/cluster-api-provider-goofy/test/e2e/harness"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
}

func run() error {
	var cfg bench.SoakConfig
	flag.IntVar(&cfg.Clusters, "clusters", 100, "clusters to create")
	flag.IntVar(&cfg.ControlPlane, "control-plane", 1, "control-plane machines per cluster")
	flag.IntVar(&cfg.Workers, "workers", 1, "worker machines per cluster (the churn scales one MachineDeployment at a time to one more and back)")
	flag.DurationVar(&cfg.Phase, "phase", time.Second, "duration of every simulated machine phase")
	flag.StringVar(&cfg.KubernetesVersion, "kubernetes-version", "v1.36.3", "Kubernetes version of the clusters")
	flag.StringVar(&cfg.GoofyPortRange, "goofy-port-range", "17000-19999", "Goofy listener ports (below the kernel's ephemeral range)")
	flag.DurationVar(&cfg.Duration, "duration", 2*time.Hour, "churn time once every cluster is Available")
	flag.DurationVar(&cfg.RestartPhase, "restart-phase", -1, "the last part of -duration with restarts (default: its second half; 0: none)")
	flag.DurationVar(&cfg.RestartEvery, "restart-every", 30*time.Minute, "SIGKILL of the Goofy manager this often in the restart phase")
	flag.DurationVar(&cfg.SampleEvery, "sample-every", time.Minute, "sampling interval")
	flag.DurationVar(&cfg.ChurnEvery, "churn-every", time.Minute, "churn interval")
	flag.DurationVar(&cfg.Warmup, "warmup", 15*time.Minute, "a segment's baseline is taken this long after it began")
	flag.DurationVar(&cfg.Window, "window", 10*time.Minute, "a segment's baseline (centred on the end of its warm-up) and its end are the means of the samples over this long: the manager's sync period, one whole resync cycle of its RSS")
	flag.Float64Var(&cfg.Tolerance, "tolerance", 0.05, "growth of RSS and goroutines allowed from a segment's baseline to its end")
	flag.DurationVar(&cfg.SetupTimeout, "setup-timeout", 20*time.Minute, "bound on waiting for every cluster to be Available (at the start and after each restart)")
	out := flag.String("out", "out/soak", "output directory")
	flag.Parse()
	if cfg.RestartPhase < 0 {
		cfg.RestartPhase = cfg.Duration / 2
	}
	if cfg.Clusters < 1 || cfg.ControlPlane < 1 || cfg.Workers < 0 || cfg.Duration <= 0 || cfg.SampleEvery <= 0 || cfg.ChurnEvery <= 0 || cfg.Window <= 0 {
		return fmt.Errorf("need at least one cluster and control-plane machine, and positive durations")
	}

	// The observer's informers log through controller-runtime; the run's output is the report.
	ctrllog.SetLogger(logr.Discard())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	repo, err := os.Getwd()
	if err != nil {
		return err
	}
	fmt.Println("== building what is missing (cached under ~/.cache/goofy; the first run takes a while)")
	bins := harness.DefaultBinaries(repo)
	if bins.Check(false) != nil {
		if bins, err = harness.EnsureBinaries(ctx, repo, os.Stderr); err != nil {
			return err
		}
	}
	bins.Goofy = filepath.Join(repo, "bin", "goofy-soak-manager")
	if err := harness.BuildGoofy(ctx, repo, bins.Goofy, os.Stderr); err != nil {
		return err
	}
	runDir, err := filepath.Abs(filepath.Join(*out, time.Now().UTC().Format("20060102-150405")))
	if err != nil {
		return err
	}
	if err := os.MkdirAll(runDir, 0o755); err != nil {
		return err
	}
	cfg.RepoRoot, cfg.OutDir, cfg.Binaries, cfg.Progress = repo, runDir, bins, os.Stdout
	fmt.Printf("== soak: %d clusters × (%d control-plane + %d workers), %s of churn, SIGKILL every %s in the last %s\n",
		cfg.Clusters, cfg.ControlPlane, cfg.Workers, cfg.Duration, cfg.RestartEvery, cfg.RestartPhase)
	res, runErr := bench.Soak(ctx, cfg)

	files := map[string]func(string) error{
		"samples.csv": func(p string) error { return bench.WriteSoakCSV(p, res.Samples) },
		"result.json": func(p string) error { return bench.WriteSoakJSON(p, res) },
	}
	if len(res.Samples) > 1 {
		files["soak.png"] = func(p string) error { return bench.WriteSoakPlot(p, res.Samples) }
	}
	for name, write := range files {
		if err := write(filepath.Join(runDir, name)); err != nil {
			return fmt.Errorf("writing %s: %w", name, err)
		}
	}
	fmt.Printf("\nsamples: %s\nplot:    %s\nresult:  %s\nlogs:    %s\n", filepath.Join(runDir, "samples.csv"),
		filepath.Join(runDir, "soak.png"), filepath.Join(runDir, "result.json"), res.LogDir)
	if runErr != nil {
		return runErr
	}
	fmt.Printf("== soak passed: %d restarts, %d ConfigMaps written and all still there, %d churn steps\n", res.Restarts, res.ConfigMapsWritten, res.ChurnSteps)
	return nil
}
