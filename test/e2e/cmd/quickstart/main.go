// Command quickstart is `make run`: it builds what is missing, starts a local management plane
// (etcd, kube-apiserver, the garbage collector and namespace controller, the CAPI managers and the
// Goofy manager), creates a cluster from templates/cluster-template.yaml, waits until it is Available, writes the kubeconfigs
// to out/ and keeps everything running until Ctrl-C.
//
// Template variables come from the environment like with clusterctl (CLUSTER_NAME, NAMESPACE,
// KUBERNETES_VERSION, CONTROL_PLANE_MACHINE_COUNT, WORKER_MACHINE_COUNT, GOOFY_*_STARTUP_DURATION, ...).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/goofy-capi/cluster-api-provider-goofy/test/e2e/harness"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func run() error {
	out := flag.String("out", "out", "output directory (kubeconfigs; process logs under <out>/e2e/<run>)")
	template := flag.String("template", "templates/cluster-template.yaml", "cluster template to apply (without -flavor)")
	flavor := flag.String("flavor", os.Getenv("FLAVOR"), "render the cluster with `clusterctl generate cluster --flavor` from the local repository `make release-manifests` builds (e.g. topology, which brings its ClusterClass); empty: -template")
	timeout := flag.Duration("timeout", 10*time.Minute, "how long to wait for the cluster to become Available")
	exitWhenAvailable := flag.Bool("exit-when-available", false, "stop and clean up once the cluster is Available (for scripts)")
	flag.Parse()
	ctrllog.SetLogger(logr.Discard()) // envtest's own logging; the harness prints progress itself

	// `make run | tee run.log` then Ctrl-C: the shell's SIGINT reaches tee as well, and the next line
	// printed would kill this process with SIGPIPE before it stops the plane (leaving etcd and
	// kube-apiserver running). With SIGPIPE handled here, writes to the closed pipe fail instead,
	// and the SIGINT (or SIGTERM, or the broken pipe itself) ends the run with the cleanup.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGPIPE)
	defer stop()

	repo, err := os.Getwd()
	if err != nil {
		return err
	}
	name := envOr("CLUSTER_NAME", "goofy")
	namespace := envOr("NAMESPACE", "default")
	vars := map[string]string{
		"CLUSTER_NAME":                name,
		"NAMESPACE":                   namespace,
		"CONTROL_PLANE_MACHINE_COUNT": envOr("CONTROL_PLANE_MACHINE_COUNT", "3"),
		"WORKER_MACHINE_COUNT":        envOr("WORKER_MACHINE_COUNT", "2"),
	}
	var manifests []byte
	if *flavor == "" {
		tmpl, err := os.ReadFile(*template)
		if err != nil {
			return err
		}
		if manifests, err = harness.RenderTemplate(tmpl, vars); err != nil {
			return fmt.Errorf("rendering %s: %w", *template, err)
		}
	}

	fmt.Println("== building what is missing (cached under ~/.cache/goofy; the first run takes a while)")
	bins, err := harness.EnsureBinaries(ctx, repo, os.Stderr)
	if err != nil {
		return err
	}
	runDir, err := filepath.Abs(filepath.Join(*out, "e2e", "run-"+time.Now().Format("20060102-150405")))
	if err != nil {
		return err
	}
	fmt.Println("== starting the management plane; process logs in", runDir)
	plane, err := harness.Start(ctx, harness.Options{
		RepoRoot: repo, OutputDir: runDir, Binaries: bins, Progress: os.Stdout,
		ListenerPortRange: envOr("GOOFY_LISTENER_PORT_RANGE", "20000-29999"),
	})
	if err != nil {
		return err
	}
	defer func() {
		fmt.Println("== cleaning up")
		plane.Stop()
	}()
	mgmt, err := filepath.Abs(filepath.Join(*out, "mgmt.kubeconfig"))
	if err != nil {
		return err
	}
	if err := copyFile(plane.Kubeconfig, mgmt); err != nil {
		return err
	}

	if *flavor != "" {
		if manifests, err = generateWithClusterctl(ctx, repo, runDir, bins, plane, *flavor, vars); err != nil {
			return err
		}
	}
	fmt.Printf("== creating cluster %s/%s (%s control-plane, %s worker machines)\n", namespace, name,
		vars["CONTROL_PLANE_MACHINE_COUNT"], vars["WORKER_MACHINE_COUNT"])
	if _, err := plane.Apply(ctx, manifests); err != nil {
		return err
	}
	start := time.Now()
	cp, err1 := strconv.Atoi(vars["CONTROL_PLANE_MACHINE_COUNT"])
	workers, err2 := strconv.Atoi(vars["WORKER_MACHINE_COUNT"])
	if err1 != nil || err2 != nil {
		return fmt.Errorf("CONTROL_PLANE_MACHINE_COUNT and WORKER_MACHINE_COUNT must be numbers")
	}
	// Available comes with the first control-plane machine; wait for every machine to be Running too.
	ready := func(s harness.ClusterStatus) bool {
		running := 0
		for _, m := range s.Machines {
			if m.Status.Phase == "Running" && m.DeletionTimestamp == nil {
				running++
			}
		}
		return harness.Available(s) && running == cp+workers && int(s.ControlPlaneReady) == cp
	}
	if _, err := plane.WaitForCluster(ctx, os.Stdout, namespace, name, *timeout, "Available with every machine Running", ready); err != nil {
		return fmt.Errorf("%w\nprocess logs: %s", err, runDir)
	}
	workload, err := filepath.Abs(filepath.Join(*out, name+".kubeconfig"))
	if err != nil {
		return err
	}
	if err := plane.WriteWorkloadKubeconfig(ctx, namespace, name, workload); err != nil {
		return err
	}
	kubectl := bins.Kubectl()
	fmt.Printf(`
== cluster %s is Available with every machine Running after %s

Management cluster:
  %s --kubeconfig %s get clusters,kubeadmcontrolplanes,machinedeployments,machines,goofymachines -A
Workload cluster:
  %s --kubeconfig %s get nodes,pods -A

Process logs: %s
Press Ctrl-C to stop and clean up.
`, name, time.Since(start).Round(time.Second), kubectl, mgmt, kubectl, workload, runDir)
	if *exitWhenAvailable {
		return nil
	}
	<-ctx.Done()
	return nil
}

func copyFile(from, to string) error {
	data, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return err
	}
	return os.WriteFile(to, data, 0o600)
}

// generateWithClusterctl renders the cluster as a user of the released provider would: the real
// clusterctl, from a local repository of this checkout (make release-manifests), so a flavor that
// uses a ClusterClass brings the repository's clusterclass-*.yaml along.
func generateWithClusterctl(ctx context.Context, repoRoot, runDir string, bins harness.Binaries, plane *harness.Plane, flavor string, vars map[string]string) ([]byte, error) {
	fmt.Printf("== rendering flavor %q with clusterctl generate cluster (local repository of this checkout)\n", flavor)
	repo, err := harness.BuildClusterctlRepository(ctx, repoRoot, bins.CAPIModule, filepath.Join(runDir, "clusterctl"), os.Stderr)
	if err != nil {
		return nil, err
	}
	var env []string
	for k, v := range vars {
		env = append(env, k+"="+v)
	}
	out, err := repo.Clusterctl(ctx, bins.Clusterctl(), env, "generate", "cluster", vars["CLUSTER_NAME"],
		"--infrastructure", "goofy:"+harness.GoofyVersion, "--flavor", flavor, "--target-namespace", vars["NAMESPACE"],
		"--control-plane-machine-count", vars["CONTROL_PLANE_MACHINE_COUNT"], "--worker-machine-count", vars["WORKER_MACHINE_COUNT"],
		"--kubeconfig", plane.Kubeconfig)
	if err != nil {
		return nil, err
	}
	return []byte(out), nil
}
