// Package bench is the scale benchmark behind `make bench`: it creates N clusters through the real
// CAPI v1.14.2 managers on a fresh embedded management plane (test/e2e/harness) for each
// provider (Goofy, or CAPD's in-memory backend as the reference) and reports time to Available,
// per-phase latencies, CPU and peak memory of every process, and the provider's requests to the
// management API server (from kube-apiserver's audit log).
package bench

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/goofy-capi/cluster-api-provider-goofy/test/e2e/harness"
)

// Provider names accepted in Config.Provider.
const (
	ProviderGoofy = "goofy"
	ProviderCAPD  = "capd-inmemory"
)

//go:embed templates/goofy.yaml
var goofyTemplate []byte

//go:embed templates/capd-inmemory.yaml
var capdTemplate []byte

//go:embed templates/goofy-machinepool-workers.yaml
var goofyPoolWorkers []byte

// defaultSyncPeriod is both providers' shipped --sync-period (CAPI's default, which CAPD keeps):
// the steady-state request rate is given per machine per this period.
const defaultSyncPeriod = 10 * time.Minute

// Config is one benchmark run of one provider.
type Config struct {
	Provider     string
	Clusters     int
	ControlPlane int
	Workers      int
	// Phase is the duration of every simulated machine phase (VM, Node, etcd, API server).
	Phase time.Duration
	// Jitter is the startupJitter fraction ("0" for none).
	Jitter string
	// BatchSize clusters are applied together, BatchInterval apart.
	BatchSize     int
	BatchInterval time.Duration
	// Timeout bounds the wait for every cluster to become Available.
	Timeout           time.Duration
	KubernetesVersion string
	// GoofyPortRange is kept apart from CAPD's 20000-30000.
	GoofyPortRange string
	// GoofyArgs are extra flags for the Goofy manager.
	GoofyArgs []string
	// Client sets the provider's client settings (the same knobs for either provider); zero fields
	// leave the provider's shipped defaults.
	Client ClientSettings
	// ProfileWindow > 0 collects back-to-back CPU profiles of that length and a heap profile from
	// the provider (when it serves pprof).
	ProfileWindow time.Duration
	// AuditBodies logs the request bodies of writes to infrastructure kinds (what each patch changed).
	AuditBodies bool
	// Faults, when set, injects faults into a share of the clusters (Goofy only).
	Faults *FaultProfile
	// MachinePool makes each Goofy cluster's workers one MachinePool instead of a
	// MachineDeployment (CAPD in-memory has no MachinePools).
	MachinePool bool
	// SteadyWindow > 0 keeps the plane running that long after every cluster is Available and
	// counts the provider's requests in it: the cost of its steady state (Result.Steady).
	SteadyWindow time.Duration
	// Shards > 1 splits Goofy into that many managers, CAPI's way (docs/scaling.md): each with its
	// own --watch-filter value and part of GoofyPortRange; cluster i is labelled for shard i % Shards.
	Shards int

	RepoRoot string
	// OutDir receives the process logs, audit log, profiles and result of this run.
	OutDir   string
	Binaries harness.Binaries
	// CAPDBinary and CAPDModule are the CAPD manager and the sigs.k8s.io/cluster-api/test source.
	CAPDBinary string
	CAPDModule string
	Progress   io.Writer
}

// Result is what one run measured. Durations are seconds.
type Result struct {
	Provider     string    `json:"provider"`
	Clusters     int       `json:"clusters"`
	ControlPlane int       `json:"controlPlaneMachines"`
	Workers      int       `json:"workerMachines"`
	Phase        string    `json:"phaseDuration"`
	Jitter       string    `json:"jitter"`
	BatchSize    int       `json:"batchSize"`
	Started      time.Time `json:"started"`

	// ApplySeconds is how long applying every cluster's objects took.
	ApplySeconds float64 `json:"applySeconds"`
	// AllAvailableSeconds is from the first apply to the last cluster Available (0 when not all were).
	AllAvailableSeconds float64 `json:"allAvailableSeconds"`
	AvailableClusters   int     `json:"availableClusters"`
	// FaultedClusters got the fault profile (FAULTS=<file>).
	FaultedClusters int `json:"faultedClusters,omitempty"`
	// CreateToAvailable is per cluster, from its apply to Available.
	CreateToAvailable Percentiles `json:"createToAvailable"`
	// Phases of Machines (watch observations): created→infraProvisioned→nodeReady.
	Phases map[string]Percentiles `json:"phases"`
	// NotAvailable names the clusters that did not reach Available (stalled or too slow for the
	// timeout); empty when all did.
	NotAvailable []string `json:"notAvailable,omitempty"`
	// AvailableOverTime is (seconds since first apply, clusters Available) at each change.
	AvailableOverTime [][2]float64 `json:"availableOverTime"`

	// Client is what the provider's client settings were: the ones asked for, else its shipped
	// defaults.
	Client ClientSettingsUsed `json:"client"`

	// Processes by name: CPU (scenario window and total) and peak RSS.
	Processes map[string]ProcStats `json:"processes"`
	// Shards is the number of Goofy managers (1 without sharding); the provider's entry in
	// Processes is then their sum, each shard also listed under its own name.
	Shards int `json:"shards,omitempty"`
	// ProviderProcess names the provider's entry in Processes.
	ProviderProcess string `json:"providerProcess"`
	// Requests to the management API server during the scenario, by client (audit log).
	Requests RequestCounts `json:"requests"`
	// ProviderClient names the provider's entry in Requests.
	ProviderClient string `json:"providerClient"`

	// MachinePool is set when the workers were a MachinePool.
	MachinePool bool `json:"machinePool,omitempty"`
	// AllNodesReadySeconds is from the first apply to the last Machine's Node Ready (0 when not
	// every machine asked for got one).
	AllNodesReadySeconds float64 `json:"allNodesReadySeconds"`
	// Steady is the provider's requests once everything was Available (SteadyWindow).
	Steady *SteadyState `json:"steady,omitempty"`

	// Controllers summarises the provider's controller-runtime metrics at the end.
	Controllers *ControllerStats `json:"controllers,omitempty"`

	Profiles []string `json:"profiles,omitempty"`
	LogDir   string   `json:"logDir"`
	Error    string   `json:"error,omitempty"`
}

// SteadyState is what the provider asked of the management API server while nothing changed.
type SteadyState struct {
	WindowSeconds float64 `json:"windowSeconds"`
	Machines      int     `json:"machines"`
	// Requests are the provider's, by "verb resource[/subresource]".
	Requests      map[string]int `json:"requests"`
	TotalRequests int            `json:"totalRequests"`
	// PerMachinePerSyncPeriod is TotalRequests / Machines, scaled from the window to the shipped
	// 10-minute sync period.
	PerMachinePerSyncPeriod float64 `json:"perMachinePerSyncPeriod"`
}

// ProviderRequests is the provider's total number of requests.
func (r *Result) ProviderRequests() int { return r.Requests.ByClient[r.ProviderClient] }

// ProviderStats is the provider process's CPU and memory.
func (r *Result) ProviderStats() ProcStats { return r.Processes[r.ProviderProcess] }

func (c *Config) progress(format string, args ...any) {
	if c.Progress != nil {
		fmt.Fprintf(c.Progress, "[bench %s] "+format+"\n", append([]any{c.Provider}, args...)...)
	}
}

// namespace holds every benchmark cluster.
const namespace = "bench"

// Run starts a fresh management plane, runs the scenario and stops the plane. A Result is returned
// even when the run fails part way (its Error says why), so partial figures are kept.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	res := &Result{
		Provider: cfg.Provider, Clusters: cfg.Clusters, ControlPlane: cfg.ControlPlane, Workers: cfg.Workers,
		Phase: cfg.Phase.String(), Jitter: cfg.Jitter, BatchSize: cfg.BatchSize, LogDir: filepath.Join(cfg.OutDir, "plane"),
	}
	err := run(ctx, cfg, res)
	if err != nil {
		res.Error = err.Error()
	}
	return res, err
}

func run(ctx context.Context, cfg Config, res *Result) error {
	var template []byte
	switch cfg.Provider {
	case ProviderGoofy:
		template = goofyTemplate
		if cfg.MachinePool {
			template = withPoolWorkers(goofyTemplate, goofyPoolWorkers)
			res.MachinePool = true
		}
		res.ProviderProcess, res.ProviderClient = "goofy", "goofy-manager"
	case ProviderCAPD:
		if cfg.MachinePool {
			return errors.New("CAPD in-memory has no MachinePools: run it without MACHINE_POOL")
		}
		template = capdTemplate
		res.ProviderProcess, res.ProviderClient = "capd", "capd-manager"
	default:
		return fmt.Errorf("unknown provider %q (want %s or %s)", cfg.Provider, ProviderGoofy, ProviderCAPD)
	}
	manifests, err := renderClusters(template, cfg)
	if err != nil {
		return err
	}
	shardRanges := []string{cfg.GoofyPortRange}
	if cfg.Shards > 1 && cfg.Provider == ProviderGoofy {
		if shardRanges, err = splitPortRange(cfg.GoofyPortRange, cfg.Shards); err != nil {
			return err
		}
		for i := range manifests {
			if manifests[i], err = harness.WithWatchFilter(manifests[i], shardName(i%cfg.Shards)); err != nil {
				return err
			}
		}
		res.Shards = cfg.Shards
		cfg.progress("%d Goofy managers, cluster i labelled for shard i %% %d (ports %s)", cfg.Shards, cfg.Shards, strings.Join(shardRanges, ", "))
	}
	if cfg.Faults != nil && cfg.Provider == ProviderGoofy {
		for i := range manifests {
			if !cfg.Faults.appliesTo(i) {
				continue
			}
			if manifests[i], err = cfg.Faults.inject(manifests[i]); err != nil {
				return fmt.Errorf("injecting faults into %s: %w", clusterName(i), err)
			}
			res.FaultedClusters++
		}
		cfg.progress("fault profile applied to %d of %d clusters", res.FaultedClusters, len(manifests))
	}
	binary := cfg.Binaries.Goofy
	if cfg.Provider == ProviderCAPD {
		binary = cfg.CAPDBinary
	}
	clientArgs, used, err := cfg.Client.resolve(cfg.Provider, binary)
	if err != nil {
		return err
	}
	res.Client = used
	cfg.progress("client settings: %s", used)
	auditFlags, auditLog, err := AuditFlags(filepath.Join(cfg.OutDir, "audit"), cfg.AuditBodies)
	if err != nil {
		return err
	}
	// Flush audit events every second instead of the default 30 s, so the count is complete at stop.
	auditFlags["audit-log-batch-max-wait"] = "1s"

	profilerAddr := ""
	if cfg.ProfileWindow > 0 {
		if profilerAddr, err = freeAddr(); err != nil {
			return err
		}
	}
	// Our own metrics address for the provider (a later flag overrides the harness's), so that the
	// controller metrics can be read at the end (plain HTTP: the harness sets --insecure-diagnostics).
	metricsAddr, err := freeAddr()
	if err != nil {
		return err
	}
	goofyArgs := append(append(append([]string(nil), cfg.GoofyArgs...), clientArgs...), "--diagnostics-address="+metricsAddr)
	if len(shardRanges) > 1 {
		goofyArgs = append(goofyArgs, "--watch-filter="+shardName(0))
	}
	opts := harness.Options{
		RepoRoot: cfg.RepoRoot, OutputDir: res.LogDir, Binaries: cfg.Binaries, Progress: cfg.Progress,
		ListenerPortRange: shardRanges[0], APIServerFlags: auditFlags,
		SkipGoofy: cfg.Provider != ProviderGoofy,
		GoofyArgs: goofyArgs,
	}
	if cfg.Provider == ProviderGoofy && profilerAddr != "" {
		if supportsFlag(cfg.Binaries.Goofy, "profiler-address") {
			opts.GoofyArgs = append(append([]string(nil), opts.GoofyArgs...), "--profiler-address="+profilerAddr)
		} else {
			cfg.progress("the Goofy manager has no --profiler-address flag: no profiles")
			profilerAddr = ""
		}
	}
	cfg.progress("starting a fresh management plane (logs in %s)", res.LogDir)
	plane, err := harness.Start(ctx, opts)
	if err != nil {
		return err
	}
	defer plane.Stop()
	if cfg.Provider == ProviderCAPD {
		// CAPD runs with its own defaults (it logs at -v=2, as shipped), like Goofy, except for the
		// client settings asked for.
		args := append(clientArgs, "--diagnostics-address="+metricsAddr)
		if profilerAddr != "" {
			args = append(args, "--profiler-address="+profilerAddr)
		}
		if _, err := plane.StartManager(ctx, harness.ManagerSpec{
			Name: "capd", Binary: cfg.CAPDBinary, ModuleDir: cfg.CAPDModule, Component: "infrastructure/docker",
			Args: args,
			// The in-memory backend advertises POD_IP in cluster endpoints.
			Env: []string{"POD_IP=127.0.0.1"},
		}); err != nil {
			return err
		}
	}

	var shardProcs []string
	for i := 1; i < len(shardRanges); i++ {
		name := "goofy-" + shardName(i)
		args := []string{"--watch-filter=" + shardName(i)}
		if profilerAddr != "" {
			// The shard inherits shard 0's flags: its profiler needs an address of its own.
			addr, err := freeAddr()
			if err != nil {
				return err
			}
			args = append(args, "--profiler-address="+addr)
		}
		if _, err := plane.StartGoofyManager(ctx, harness.GoofyManagerSpec{
			Name: name, ListenerPortRange: shardRanges[i], Args: args,
		}); err != nil {
			return err
		}
		shardProcs = append(shardProcs, name)
	}

	pids := ChildProcesses()
	for name := range pids {
		if name != "etcd" && name != "kube-apiserver" {
			delete(pids, name) // the plane's own processes are named below
		}
	}
	for _, p := range plane.Processes() {
		if pid := p.Pid(); pid != 0 {
			pids[p.Name] = pid
		}
	}
	if _, ok := pids[res.ProviderProcess]; !ok {
		return fmt.Errorf("provider process %s not found among %v", res.ProviderProcess, pids)
	}

	obs := newObserver()
	octx, stopObserver := context.WithCancel(ctx)
	defer stopObserver()
	if err := plane.EnsureNamespace(ctx, namespace); err != nil {
		return err
	}
	if err := obs.start(octx, plane.Config, namespace); err != nil {
		return err
	}

	sampler := NewSampler(pids, time.Second)
	sampler.Mark()
	var prof *profiler
	if profilerAddr != "" {
		prof = newProfiler(profilerAddr, cfg.OutDir, res.ProviderProcess, cfg.ProfileWindow)
		prof.startCPU(ctx)
	}
	start := time.Now()
	res.Started = start.UTC()
	since := AuditTime(start)

	applyErr := make(chan error, 1)
	applied := map[string]time.Time{}
	var appliedMu sync.Mutex
	go func() {
		applyErr <- applyClusters(ctx, plane, cfg, manifests, func(name string, t time.Time) {
			appliedMu.Lock()
			applied[name] = t
			appliedMu.Unlock()
		})
	}()

	waitErr := waitAvailable(ctx, cfg, obs, start, applyErr, res)
	end := time.Now()
	until := AuditTime(end)
	if last, ok := obs.allNodesReady(cfg.Clusters * (cfg.ControlPlane + cfg.Workers)); ok {
		res.AllNodesReadySeconds = last.Sub(start).Seconds()
	}

	if prof != nil {
		res.Profiles = prof.stopCPU()
		if f, err := prof.heap(ctx); err == nil {
			res.Profiles = append(res.Profiles, f)
		}
	}
	res.Processes = sampler.Stop()
	if len(shardProcs) > 0 {
		// The provider is every shard: CPU and peaks add up (a sum of peaks, which bounds the peak
		// of the sum), each shard also stays listed on its own.
		total := res.Processes[res.ProviderProcess]
		res.Processes[res.ProviderProcess+"-"+shardName(0)] = total
		for _, name := range shardProcs {
			p := res.Processes[name]
			total.CPUSeconds += p.CPUSeconds
			total.CPUSecondsTotal += p.CPUSecondsTotal
			total.PeakRSSBytes += p.PeakRSSBytes
			total.SampledPeakRSSBytes += p.SampledPeakRSSBytes
			total.SampledPeakAnonBytes += p.SampledPeakAnonBytes
		}
		res.Processes[res.ProviderProcess] = total
	}
	metricsFile := filepath.Join(cfg.OutDir, res.ProviderProcess+"-metrics.txt")
	if err := fetch(ctx, "http://"+metricsAddr+"/metrics", metricsFile, 30*time.Second); err == nil {
		if st, err := parseControllerStatsFile(metricsFile, plane.LogFiles()[res.ProviderProcess]); err == nil {
			res.Controllers = &st
		}
	}

	avail := obs.availableTimes()
	res.AvailableClusters = len(avail)
	for i := range cfg.Clusters {
		if _, ok := avail[clusterName(i)]; !ok {
			res.NotAvailable = append(res.NotAvailable, clusterName(i))
		}
	}
	var durations []time.Duration
	var offsets []float64
	appliedMu.Lock()
	for name, t := range avail {
		if a, ok := applied[name]; ok {
			durations = append(durations, t.Sub(a))
		}
		offsets = append(offsets, t.Sub(start).Seconds())
	}
	appliedMu.Unlock()
	res.CreateToAvailable = percentiles(durations)
	sort.Float64s(offsets)
	res.AvailableOverTime = [][2]float64{{0, 0}}
	for i, o := range offsets {
		res.AvailableOverTime = append(res.AvailableOverTime, [2]float64{o, float64(i + 1)})
	}
	if waitErr == nil && len(offsets) > 0 {
		res.AllAvailableSeconds = offsets[len(offsets)-1]
	}
	res.Phases = obs.phaseLatencies()

	var steadySince, steadyUntil string
	if cfg.SteadyWindow > 0 && waitErr == nil {
		cfg.progress("steady state: counting the provider's requests for %s", cfg.SteadyWindow)
		steadySince = AuditTime(time.Now())
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(cfg.SteadyWindow):
		}
		steadyUntil = AuditTime(time.Now())
	}

	// Stopping kube-apiserver flushes the audit log; count afterwards.
	stopObserver()
	plane.Stop()
	counts, err := countRequestsBetween(auditLog, since, until)
	if err != nil {
		return errors.Join(waitErr, fmt.Errorf("counting requests: %w", err))
	}
	res.Requests = counts
	if steadySince != "" {
		steady, err := countRequestsBetween(auditLog, steadySince, steadyUntil)
		if err != nil {
			return fmt.Errorf("counting steady-state requests: %w", err)
		}
		res.Steady = newSteadyState(steady, res.ProviderClient, cfg.SteadyWindow, cfg.Clusters*(cfg.ControlPlane+cfg.Workers))
	}
	return waitErr
}

// newSteadyState reduces the requests of a steady window to the provider's.
func newSteadyState(counts RequestCounts, client string, window time.Duration, machines int) *SteadyState {
	st := &SteadyState{WindowSeconds: window.Seconds(), Machines: machines, Requests: map[string]int{}, TotalRequests: counts.ByClient[client]}
	for k, v := range counts.ByVerbResource[client] {
		st.Requests[k] = v
	}
	if machines > 0 && window > 0 {
		st.PerMachinePerSyncPeriod = float64(st.TotalRequests) / float64(machines) * defaultSyncPeriod.Seconds() / window.Seconds()
	}
	return st
}

// withPoolWorkers is the cluster template with its MachineDeployment's objects (those named
// ${CLUSTER_NAME}-md-0) replaced by the MachinePool's.
func withPoolWorkers(template, poolWorkers []byte) []byte {
	var docs []string
	for _, doc := range strings.Split(string(template), "\n---\n") {
		if !strings.Contains(doc, "name: ${CLUSTER_NAME}-md-0\n") {
			docs = append(docs, doc)
		}
	}
	return []byte(strings.Join(docs, "\n---\n") + "\n---\n" + string(poolWorkers))
}

// renderClusters renders the template once per cluster, in order.
func renderClusters(template []byte, cfg Config) ([][]byte, error) {
	phase := cfg.Phase.String()
	var out [][]byte
	for i := range cfg.Clusters {
		m, err := harness.RenderTemplate(template, map[string]string{
			"CLUSTER_NAME":                clusterName(i),
			"NAMESPACE":                   namespace,
			"CONTROL_PLANE_MACHINE_COUNT": strconv.Itoa(cfg.ControlPlane),
			"WORKER_MACHINE_COUNT":        strconv.Itoa(cfg.Workers),
			"KUBERNETES_VERSION":          cfg.KubernetesVersion,
			"VM_DURATION":                 phase,
			"NODE_DURATION":               phase,
			"ETCD_DURATION":               phase,
			"APISERVER_DURATION":          phase,
			"JITTER":                      cfg.Jitter,
		})
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}

func clusterName(i int) string { return fmt.Sprintf("bench-%04d", i) }

// applyConcurrency is how many clusters of a batch are applied at once (each apply is several
// sequential server-side applies).
const applyConcurrency = 8

// applyClusters applies the clusters in batches; applied is called with each cluster's name and
// the moment its apply started (its create time for create→Available).
func applyClusters(ctx context.Context, plane *harness.Plane, cfg Config, manifests [][]byte, applied func(string, time.Time)) error {
	batch := max(cfg.BatchSize, 1)
	for lo := 0; lo < len(manifests); lo += batch {
		if lo > 0 && cfg.BatchInterval > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(cfg.BatchInterval):
			}
		}
		hi := min(lo+batch, len(manifests))
		sem := make(chan struct{}, applyConcurrency)
		errs := make(chan error, hi-lo)
		var wg sync.WaitGroup
		for i := lo; i < hi; i++ {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				t := time.Now()
				if _, err := plane.Apply(ctx, manifests[i]); err != nil {
					errs <- fmt.Errorf("cluster %s: %w", clusterName(i), err)
					return
				}
				applied(clusterName(i), t)
			}()
		}
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			return err
		}
	}
	return nil
}

// waitAvailable waits until every cluster is Available and every Node Ready, printing progress
// every 10 s.
func waitAvailable(ctx context.Context, cfg Config, obs *observer, start time.Time, applyErr <-chan error, res *Result) error {
	deadline := time.NewTimer(cfg.Timeout)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	report := func() {
		a, m, p, n := obs.counts()
		cfg.progress("%5.0fs: clusters Available %d/%d; machines created %d, provisioned %d, node Ready %d (of %d)",
			time.Since(start).Seconds(), a, cfg.Clusters, m, p, n, cfg.Clusters*(cfg.ControlPlane+cfg.Workers))
	}
	for {
		// Available alone is not the end: a MachinePool's Machines may come after its cluster is
		// Available (CAPI v1.14 does not wait for them), and a control-plane Node may turn Ready
		// after KCP's health checks pass. The scenario ends when every Node asked for is Ready.
		if a, _, _, n := obs.counts(); a >= cfg.Clusters && n >= cfg.Clusters*(cfg.ControlPlane+cfg.Workers) {
			report()
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			report()
			a, _, _, n := obs.counts()
			return fmt.Errorf("only %d of %d clusters Available and %d of %d Nodes Ready after %s", a, cfg.Clusters, n, cfg.Clusters*(cfg.ControlPlane+cfg.Workers), cfg.Timeout)
		case err := <-applyErr:
			if err != nil {
				return fmt.Errorf("applying clusters: %w", err)
			}
			res.ApplySeconds = time.Since(start).Seconds()
			cfg.progress("applied %d clusters in %.1fs", cfg.Clusters, res.ApplySeconds)
		case <-tick.C:
			report()
		case <-obs.changed:
		}
	}
}

// countRequestsBetween counts audit events received in [since, until).
func countRequestsBetween(path, since, until string) (RequestCounts, error) {
	f, err := os.Open(path)
	if err != nil {
		return RequestCounts{}, err
	}
	defer f.Close()
	return CountRequests(f, since, until)
}

// supportsFlag reports whether a binary's --help lists --name.
func supportsFlag(binary, name string) bool {
	out, _ := exec.Command(binary, "--help").CombinedOutput()
	return strings.Contains(string(out), "--"+name)
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func shardName(i int) string { return fmt.Sprintf("shard-%d", i) }

// splitPortRange splits "MIN-MAX" into n consecutive ranges of equal size.
func splitPortRange(r string, n int) ([]string, error) {
	var lo, hi int
	if _, err := fmt.Sscanf(r, "%d-%d", &lo, &hi); err != nil || hi < lo {
		return nil, fmt.Errorf("port range %q: want MIN-MAX", r)
	}
	size := (hi - lo + 1) / n
	if size < 1 {
		return nil, fmt.Errorf("port range %q is too small for %d shards", r, n)
	}
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%d-%d", lo+i*size, lo+(i+1)*size-1)
	}
	return out, nil
}
