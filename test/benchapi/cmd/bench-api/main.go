// Command bench-api is `make bench-api`: it starts the Goofy and the CAPD in-memory server
// programs (or takes the kubeconfigs of running ones), then measures each operation with each
// client count against one side at a time, alternating which side goes first, and writes the
// report to stdout and to <out>/<run>/report.{md,json}.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/goofy-capi/cluster-api-provider-goofy/test/benchapi"
)

type options struct {
	out, goofyServer, capdServer    string
	goofyKubeconfig, capdKubeconfig string
	goofyPort, capdPort             int
	memory, cpuProfile, json        bool
	params                          benchapi.Params
	clients                         []int
	ops                             map[string]bool
}

func main() {
	var o options
	var clients, ops string
	flag.StringVar(&o.out, "out", "out/bench-api", "output directory; each run writes a subdirectory")
	flag.StringVar(&o.goofyServer, "goofy-server", "", "goofyserver binary to start (go build ./test/benchapi/cmd/goofyserver)")
	flag.StringVar(&o.capdServer, "capd-server", "", "capdserver binary to start (test/benchapi/build-capdserver.sh)")
	flag.StringVar(&o.goofyKubeconfig, "goofy-kubeconfig", "", "drive an already running Goofy side instead (no server CPU/allocation figures)")
	flag.StringVar(&o.capdKubeconfig, "capd-kubeconfig", "", "drive an already running CAPD side instead (no server CPU/allocation figures)")
	flag.IntVar(&o.goofyPort, "goofy-port", 9101, "Goofy listener port; its stats endpoint takes the next one")
	flag.IntVar(&o.capdPort, "capd-port", 9111, "CAPD listener port; its debug server and stats endpoint take the next two")
	flag.BoolVar(&o.memory, "goofy-memory", false, "run Goofy with memory-only state instead of the shipped durable state")
	flag.BoolVar(&o.json, "json", false, "make the clients use JSON with both sides (client-go's typed clients prefer protobuf, which only Goofy serves)")
	flag.BoolVar(&o.cpuProfile, "cpuprofile", false, "write each server's CPU profile of every case to <run>/<side>-<op>-<clients>.pprof")
	flag.DurationVar(&o.params.Warmup, "warmup", time.Second, "warm-up per case, not measured")
	flag.DurationVar(&o.params.Duration, "duration", 5*time.Second, "measured time per case and side")
	flag.IntVar(&o.params.Rounds, "rounds", 5, "windows the measured time is split into, alternating the sides")
	flag.DurationVar(&o.params.Drain, "drain", 30*time.Second, "how long watchers may take to catch up with the writes")
	flag.StringVar(&clients, "clients", "8,1", "client counts (watch: watchers)")
	flag.StringVar(&ops, "ops", "get-node,list-pods,get-missing,watch", "operations to run")
	flag.IntVar(&o.params.Writers, "watch-writers", 8, "writers in every watch case, each patching its own ConfigMap")
	flag.Parse()
	for _, c := range strings.Split(clients, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(c))
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "bench-api: bad -clients %q\n", clients)
			os.Exit(2)
		}
		o.clients = append(o.clients, n)
	}
	known := map[string]bool{benchapi.WatchOp: true}
	for _, op := range benchapi.RequestOps {
		known[op.Name] = true
	}
	o.ops = map[string]bool{}
	for _, op := range strings.Split(ops, ",") {
		if op = strings.TrimSpace(op); !known[op] {
			fmt.Fprintf(os.Stderr, "bench-api: unknown operation %q in -ops\n", op)
			os.Exit(2)
		}
		o.ops[op] = true
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "bench-api:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	r := &benchapi.Report{Started: time.Now(), Warmup: o.params.Warmup, Duration: o.params.Duration, Rounds: o.params.Rounds, Writers: o.params.Writers, JSON: o.json,
		Sides: map[string]string{}, ResponseBytes: map[string]map[string]benchapi.Body{}}
	dir := filepath.Join(o.out, r.Started.UTC().Format("20060102-150405"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	seed := filepath.Join(dir, "seed.json")
	if err := benchapi.WriteSeed(seed, benchapi.Seed(metav1.Now())); err != nil {
		return err
	}
	var sides []*side
	defer func() {
		for _, s := range sides {
			s.server.Stop()
		}
	}()
	for _, name := range []string{benchapi.SideGoofy, benchapi.SideCAPD} {
		s, err := startSide(ctx, name, o, dir, seed)
		if err != nil {
			return err
		}
		sides = append(sides, s)
		r.Sides[name] = s.describe
		if r.ResponseBytes[name], err = s.responseSizes(ctx); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	r.LoadAvg[0] = loadAvg()
	n := 0
	for _, op := range append(append([]benchapi.Op(nil), benchapi.RequestOps...), benchapi.Op{Name: benchapi.WatchOp}) {
		if !o.ops[op.Name] {
			continue
		}
		for _, clients := range o.clients {
			// Alternate which side goes first, so a drift of the machine's load favours neither.
			order := sides
			if n%2 == 1 {
				order = []*side{sides[1], sides[0]}
			}
			n++
			res, err := runCase(ctx, order, op, clients, o, dir)
			if err != nil {
				return fmt.Errorf("%s ×%d: %w", op.Name, clients, err)
			}
			for _, x := range res {
				fmt.Fprintf(os.Stderr, "%-5s %-11s ×%d: %8.0f /s (errors %d)\n", x.Side, x.Op, x.Clients, x.Rate, x.Errors)
			}
			r.Results = append(r.Results, res...)
		}
	}
	r.LoadAvg[1] = loadAvg()
	return writeReport(r, dir)
}

// runCase measures one operation with one client count on both sides, their windows
// interleaved, with the servers' CPU profiles over the whole case when asked.
func runCase(ctx context.Context, order []*side, op benchapi.Op, clients int, o options, dir string) ([]benchapi.Result, error) {
	loads := make([]benchapi.Load, 0, len(order))
	probes := make([]benchapi.Probe, 0, len(order))
	defer func() {
		for _, l := range loads {
			l.Close()
		}
	}()
	for _, s := range order {
		l, err := benchapi.NewLoad(ctx, s.config, op, clients, o.params)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.name, err)
		}
		loads, probes = append(loads, l), append(probes, s.probe())
	}
	if o.cpuProfile {
		span := 2 * (o.params.Warmup + o.params.Duration)
		for _, s := range order {
			if s.stats == "" {
				continue
			}
			done := s.profile(ctx, span, filepath.Join(dir, fmt.Sprintf("%s-%s-%d.pprof", s.name, op.Name, clients)))
			defer func() {
				if err := <-done; err != nil {
					fmt.Fprintf(os.Stderr, "%s: CPU profile: %v\n", s.name, err)
				}
			}()
		}
	}
	res, err := benchapi.Interleave(ctx, loads, probes, o.params)
	for i := range res {
		res[i].Side, res[i].Op, res[i].Clients = order[i].name, op.Name, clients
	}
	return res, err
}

func writeReport(r *benchapi.Report, dir string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "report.json"), b, 0o644); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "report.md"))
	if err != nil {
		return err
	}
	r.Write(f)
	r.Write(os.Stdout)
	fmt.Printf("\nreport: %s\n", dir)
	return f.Close()
}

func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
