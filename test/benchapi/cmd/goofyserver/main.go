// Command goofyserver is the Goofy side of `make bench-api`: one workload cluster served by
// Goofy's WorkloadClustersMux on 127.0.0.1 over TLS, with durable state unless -state-dir is
// empty, seeded from -seed; it writes -kubeconfig-out once it serves and runs until SIGTERM.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/goofy-capi/cluster-api-provider-goofy/test/benchapi"
)

func main() {
	port := flag.Int("port", 9101, "listener port on 127.0.0.1")
	stats := flag.String("stats", "127.0.0.1:9102", "address of the expvar and pprof endpoint")
	stateDir := flag.String("state-dir", "", "workload state directory (the shipped default is durable state); empty: memory only")
	seed := flag.String("seed", "", "objects to start with (benchapi.WriteSeed)")
	kubeconfig := flag.String("kubeconfig-out", "goofy.kubeconfig", "kubeconfig written once the cluster serves")
	flag.Parse()
	if err := run(*port, *stats, *stateDir, *seed, *kubeconfig); err != nil {
		fmt.Fprintln(os.Stderr, "goofyserver:", err)
		os.Exit(1)
	}
}

func run(port int, stats, stateDir, seedPath, kubeconfig string) error {
	ctrl.SetLogger(zap.New()) // the manager's logger, at its default level
	objs, err := benchapi.ReadSeed(seedPath)
	if err != nil {
		return err
	}
	if err := benchapi.ServeStats(stats); err != nil {
		return err
	}
	g, err := benchapi.StartGoofy(port, stateDir, objs, ctrl.Log.WithName("mux"))
	if err != nil {
		return err
	}
	defer func() { _ = g.Close() }()
	if err := benchapi.WriteKubeconfig(kubeconfig, g.Kubeconfig); err != nil {
		return err
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	<-sig
	return nil
}
