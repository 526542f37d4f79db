package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/goofy-capi/cluster-api-provider-goofy/test/e2e/harness"
)

// SoakConfig is one `make soak` run: Clusters clusters created through the real CAPI managers,
// then Duration of churn (MachineDeployments scaled up and down, faults on and off, ConfigMaps
// written into workload clusters), the last RestartPhase of it with a SIGKILL of the Goofy
// manager every RestartEvery. The manager is sampled every SampleEvery.
type SoakConfig struct {
	Clusters, ControlPlane, Workers int
	Phase                           time.Duration
	KubernetesVersion               string
	GoofyPortRange                  string
	Duration                        time.Duration
	RestartPhase, RestartEvery      time.Duration
	SampleEvery, ChurnEvery         time.Duration
	// Warmup is how long after a segment began its baseline is taken.
	Warmup time.Duration
	// Window is how long the baseline and the end of a segment are averaged over: the manager's
	// sync period, so that each holds one whole resync cycle of its RSS.
	Window time.Duration
	// Tolerance is the growth of RSS and goroutines allowed from a segment's baseline to its end.
	Tolerance float64
	// SetupTimeout bounds waiting for every cluster to be Available, at the start and after each
	// restart.
	SetupTimeout time.Duration

	RepoRoot string
	OutDir   string
	Binaries harness.Binaries
	Progress io.Writer
}

// SoakResult is what a soak measured and judged.
type SoakResult struct {
	Clusters     int    `json:"clusters"`
	Duration     string `json:"duration"`
	RestartEvery string `json:"restartEvery"`
	// Warmup, Window and Tolerance are what the segments were judged with (JudgeSegments).
	Warmup    string           `json:"warmup"`
	Window    string           `json:"window"`
	Tolerance float64          `json:"tolerance"`
	Started   time.Time        `json:"started"`
	Samples   []SoakSample     `json:"samples"`
	Segments  []SegmentVerdict `json:"segments"`
	Restarts  int              `json:"restarts"`
	// ChurnSteps counts the churn steps; ScaledMachineDeployments and FaultToggles what they did.
	ChurnSteps               int `json:"churnSteps"`
	ScaledMachineDeployments int `json:"scaledMachineDeployments"`
	FaultToggles             int `json:"faultToggles"`
	// ConfigMapsWritten were acknowledged by their workload cluster; ConfigMapsLost were missing
	// at a later check (after a restart or at the end).
	ConfigMapsWritten int      `json:"configMapsWritten"`
	ConfigMapsLost    []string `json:"configMapsLost,omitempty"`
	LogDir            string   `json:"logDir"`
	Error             string   `json:"error,omitempty"`
}

func (c *SoakConfig) progress(format string, args ...any) {
	if c.Progress != nil {
		fmt.Fprintf(c.Progress, "[soak %s] "+format+"\n", append([]any{time.Now().UTC().Format("15:04:05")}, args...)...)
	}
}

// soak is one run's state.
type soak struct {
	cfg         SoakConfig
	res         *SoakResult
	plane       *harness.Plane
	obs         *observer
	metricsURL  string
	pprofURL    string // the manager's pprof endpoint (--profiler-address)
	start       time.Time
	segment     int
	written     []writtenConfigMap
	workload    map[string]*kubernetes.Clientset
	faulted     string
	nextCluster int
	scaledUp    string // the cluster whose MachineDeployment the last churn step scaled up
}

type writtenConfigMap struct{ cluster, name string }

// Soak runs the soak and judges it. The result holds whatever was measured even when it fails.
func Soak(ctx context.Context, cfg SoakConfig) (*SoakResult, error) {
	s := &soak{cfg: cfg, res: &SoakResult{Clusters: cfg.Clusters, Duration: cfg.Duration.String(), RestartEvery: cfg.RestartEvery.String(),
		Warmup: cfg.Warmup.String(), Window: cfg.Window.String(), Tolerance: cfg.Tolerance,
		LogDir: filepath.Join(cfg.OutDir, "plane")}, workload: map[string]*kubernetes.Clientset{}}
	err := s.run(ctx)
	if err != nil {
		s.res.Error = err.Error()
	}
	return s.res, err
}

func (s *soak) run(ctx context.Context) error {
	cfg := s.cfg
	benchCfg := Config{Clusters: cfg.Clusters, ControlPlane: cfg.ControlPlane, Workers: cfg.Workers, Phase: cfg.Phase, Jitter: "0",
		KubernetesVersion: cfg.KubernetesVersion, BatchSize: 10, Timeout: cfg.SetupTimeout, Provider: ProviderGoofy, Progress: cfg.Progress}
	manifests, err := renderClusters(goofyTemplate, benchCfg)
	if err != nil {
		return err
	}
	metricsAddr, err := freeAddr()
	if err != nil {
		return err
	}
	s.metricsURL = "http://" + metricsAddr + "/metrics"
	profilerAddr, err := freeAddr()
	if err != nil {
		return err
	}
	s.pprofURL = "http://" + profilerAddr + "/debug/pprof/"
	s.plane, err = harness.Start(ctx, harness.Options{
		RepoRoot: cfg.RepoRoot, OutputDir: s.res.LogDir, Binaries: cfg.Binaries, Progress: cfg.Progress,
		ListenerPortRange: cfg.GoofyPortRange,
		GoofyArgs:         []string{"--diagnostics-address=" + metricsAddr, "--profiler-address=" + profilerAddr},
	})
	if err != nil {
		return err
	}
	defer s.plane.Stop()
	if err := s.plane.EnsureNamespace(ctx, namespace); err != nil {
		return err
	}
	s.obs = newObserver()
	octx, stopObserver := context.WithCancel(ctx)
	defer stopObserver()
	if err := s.obs.start(octx, s.plane.Config, namespace); err != nil {
		return err
	}
	applyErr := make(chan error, 1)
	created := time.Now()
	go func() { applyErr <- applyClusters(ctx, s.plane, benchCfg, manifests, func(string, time.Time) {}) }()
	if err := waitAvailable(ctx, benchCfg, s.obs, created, applyErr, &Result{}); err != nil {
		return err
	}
	cfg.progress("%d clusters Available after %.0fs; churn for %s (restarts every %s in the last %s)", cfg.Clusters, time.Since(created).Seconds(),
		cfg.Duration, cfg.RestartEvery, cfg.RestartPhase)

	s.start = time.Now()
	s.res.Started = s.start.UTC()
	restartFrom := cfg.Duration - cfg.RestartPhase
	nextRestart := s.start.Add(restartFrom)
	sampleTick := time.NewTicker(cfg.SampleEvery)
	defer sampleTick.Stop()
	churnTick := time.NewTicker(cfg.ChurnEvery)
	defer churnTick.Stop()
	end := time.NewTimer(cfg.Duration)
	defer end.Stop()
	s.sample(ctx)
	var errs []error
loop:
	for {
		if cfg.RestartPhase > 0 && cfg.RestartEvery > 0 && !time.Now().Before(nextRestart) && time.Since(s.start) < cfg.Duration {
			if err := s.restart(ctx); err != nil {
				errs = append(errs, err)
				break
			}
			nextRestart = nextRestart.Add(cfg.RestartEvery)
			s.sample(ctx)
			sampleTick.Reset(cfg.SampleEvery) // the next sample a whole interval on, not a tick queued during the restart
			continue
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-end.C:
			break loop
		case <-sampleTick.C:
			s.sample(ctx)
		case <-churnTick.C:
			if err := s.churn(ctx); err != nil {
				cfg.progress("churn step: %v", err)
			}
		case <-time.After(time.Until(nextRestart)):
		}
	}
	s.sample(ctx)
	s.saveProfiles(ctx)
	if s.faulted != "" {
		errs = append(errs, s.setFault(ctx, s.faulted, false))
	}
	errs = append(errs, s.checkConfigMaps(ctx, "at the end"))
	s.res.Segments = JudgeSegments(s.res.Samples, cfg.Warmup, cfg.Window, cfg.Tolerance, restartFrom.Seconds())
	for _, v := range s.res.Segments {
		cfg.progress("segment %d (%.0f-%.0fs, restarts %v): %s", v.Segment, v.From, v.To, v.WithRestarts, v.Reason)
		if !v.Pass {
			errs = append(errs, fmt.Errorf("segment %d: %s", v.Segment, v.Reason))
		}
	}
	if len(s.res.ConfigMapsLost) > 0 {
		errs = append(errs, fmt.Errorf("%d of %d ConfigMaps written were lost: %v", len(s.res.ConfigMapsLost), s.res.ConfigMapsWritten, s.res.ConfigMapsLost))
	}
	return errors.Join(errs...)
}

// restart kills the Goofy manager with SIGKILL, starts it again on the same state, waits until
// every cluster is Available again and checks every ConfigMap written so far.
func (s *soak) restart(ctx context.Context) error {
	s.saveProfiles(ctx)
	s.res.Restarts++
	s.cfg.progress("restart %d: SIGKILL to the Goofy manager (pid %d)", s.res.Restarts, s.plane.Goofy.Pid())
	s.plane.Goofy.Kill()
	killed := time.Now()
	if err := s.plane.StartGoofy(ctx); err != nil {
		return fmt.Errorf("restart %d: %w", s.res.Restarts, err)
	}
	s.segment++
	// CAPI may not have noticed the kill yet, so its Available conditions alone prove nothing: every
	// workload API server must answer again first.
	if err := s.waitAnswering(ctx); err != nil {
		return fmt.Errorf("restart %d: %w", s.res.Restarts, err)
	}
	if err := s.waitAllAvailable(ctx); err != nil {
		return fmt.Errorf("restart %d: %w", s.res.Restarts, err)
	}
	s.cfg.progress("restart %d: every workload API server answering and every cluster Available %.1fs after the kill", s.res.Restarts, time.Since(killed).Seconds())
	return s.checkConfigMaps(ctx, fmt.Sprintf("after restart %d", s.res.Restarts))
}

// waitAnswering waits until every cluster's workload API server answers a request.
func (s *soak) waitAnswering(ctx context.Context) error {
	deadline := time.Now().Add(s.cfg.SetupTimeout)
	for i := range s.cfg.Clusters {
		cs, err := s.workloadClient(ctx, clusterName(i))
		if err != nil {
			return err
		}
		for {
			_, err := cs.Discovery().ServerVersion()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s does not answer %s after the restart: %w", clusterName(i), s.cfg.SetupTimeout, err)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	return nil
}

// waitAllAvailable waits until CAPI reports every cluster Available (the observer's counts lag a
// restart: a cluster's condition may not have changed, so the Clusters are read).
func (s *soak) waitAllAvailable(ctx context.Context) error {
	deadline := time.Now().Add(s.cfg.SetupTimeout)
	for {
		available, err := s.availableClusters(ctx)
		if err == nil && available == s.cfg.Clusters {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d clusters Available after %s (%v)", available, s.cfg.Clusters, s.cfg.SetupTimeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}

func (s *soak) availableClusters(ctx context.Context) (int, error) {
	var list clusterv1.ClusterList
	if err := s.plane.Client.List(ctx, &list, client.InNamespace(namespace)); err != nil {
		return 0, err
	}
	n := 0
	for _, c := range list.Items {
		for _, cond := range c.Status.Conditions {
			if cond.Type == clusterv1.AvailableCondition && cond.Status == metav1.ConditionTrue {
				n++
			}
		}
	}
	return n, nil
}

// churn is one step: the MachineDeployment scaled up a step ago back to Workers and another one
// up to Workers+1, the fault
// moved to another cluster (API errors on one cluster at a time), and ConfigMaps written into
// one cluster in twenty (at least one), none into the faulted one.
func (s *soak) churn(ctx context.Context) error {
	s.res.ChurnSteps++
	n := s.cfg.Clusters
	var errs []error
	// The load stays level: the cluster scaled up a step ago goes back to its size as the next one
	// is scaled up, so the fleet holds the same number of machines (±1) throughout, and a growth
	// within a segment is the manager's, not the fleet's.
	down := s.scaledUp
	if s.scaledUp != "" {
		if err := s.scaleWorkers(ctx, s.scaledUp, int32(s.cfg.Workers)); err != nil {
			errs = append(errs, err) // tried again next step, before any other is scaled up
		} else {
			s.scaledUp = ""
		}
	}
	if s.scaledUp == "" {
		up := clusterName(s.nextCluster % n)
		if up == down && n > 1 {
			up = clusterName((s.nextCluster + 1) % n)
		}
		if err := s.scaleWorkers(ctx, up, int32(s.cfg.Workers+1)); err != nil {
			errs = append(errs, err)
		} else {
			s.scaledUp = up
		}
	}
	if s.faulted != "" {
		errs = append(errs, s.setFault(ctx, s.faulted, false))
		s.faulted = ""
	} else {
		s.faulted = clusterName((s.nextCluster + n/2) % n)
		errs = append(errs, s.setFault(ctx, s.faulted, true))
	}
	for range max(1, n/20) {
		target := clusterName((s.nextCluster + n/4) % n)
		s.nextCluster++
		if target == s.faulted {
			continue
		}
		errs = append(errs, s.writeConfigMap(ctx, target))
	}
	s.nextCluster++
	return errors.Join(errs...)
}

// scaleWorkers sets the replicas of cluster's MachineDeployment.
func (s *soak) scaleWorkers(ctx context.Context, cluster string, replicas int32) error {
	md := &clusterv1.MachineDeployment{}
	if err := s.plane.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: cluster + "-md-0"}, md); err != nil {
		return err
	}
	patch := client.MergeFrom(md.DeepCopy())
	md.Spec.Replicas = &replicas
	if err := s.plane.Client.Patch(ctx, md, patch); err != nil {
		return err
	}
	s.res.ScaledMachineDeployments++
	return nil
}

// setFault turns API errors (10 % of requests answered 503) on or off on a cluster's GoofyCluster.
func (s *soak) setFault(ctx context.Context, cluster string, on bool) error {
	gc := &unstructured.Unstructured{}
	gc.SetAPIVersion("infrastructure.cluster.x-k8s.io/v1alpha1")
	gc.SetKind("GoofyCluster")
	gc.SetNamespace(namespace)
	gc.SetName(cluster)
	patch := `{"spec":{"simulation":{"apiServer":null}}}`
	if on {
		patch = `{"spec":{"simulation":{"apiServer":{"errors":[{"code":503,"ratio":"0.1"}]}}}}`
	}
	if err := s.plane.Client.Patch(ctx, gc, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		return fmt.Errorf("fault on %s (%v): %w", cluster, on, err)
	}
	s.res.FaultToggles++
	return nil
}

func (s *soak) workloadClient(ctx context.Context, cluster string) (*kubernetes.Clientset, error) {
	if cs, ok := s.workload[cluster]; ok {
		return cs, nil
	}
	sec := &corev1.Secret{}
	if err := s.plane.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: cluster + "-kubeconfig"}, sec); err != nil {
		return nil, err
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(sec.Data["value"])
	if err != nil {
		return nil, err
	}
	cfg.Timeout = 30 * time.Second
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	s.workload[cluster] = cs
	return cs, nil
}

// writeConfigMap writes a new ConfigMap into the cluster; only one the API server acknowledged is
// counted (and checked later).
func (s *soak) writeConfigMap(ctx context.Context, cluster string) error {
	cs, err := s.workloadClient(ctx, cluster)
	if err != nil {
		return err
	}
	name := fmt.Sprintf("soak-%06d", len(s.written))
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault},
		Data: map[string]string{"written": time.Now().UTC().Format(time.RFC3339Nano), "segment": strconv.Itoa(s.segment)}}
	if _, err := cs.CoreV1().ConfigMaps(cm.Namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("writing %s into %s: %w", name, cluster, err)
	}
	s.written = append(s.written, writtenConfigMap{cluster: cluster, name: name})
	s.res.ConfigMapsWritten = len(s.written)
	return nil
}

// checkConfigMaps reads back every ConfigMap written so far. One that is not found is lost; any
// other error is retried for up to a minute (the cluster may be between faults).
func (s *soak) checkConfigMaps(ctx context.Context, when string) error {
	var unreadable []string
	lost := 0
	for _, w := range s.written {
		cs, err := s.workloadClient(ctx, w.cluster)
		if err != nil {
			return err
		}
		deadline := time.Now().Add(time.Minute)
		for {
			_, err = cs.CoreV1().ConfigMaps(metav1.NamespaceDefault).Get(ctx, w.name, metav1.GetOptions{})
			if err == nil || apierrors.IsNotFound(err) || time.Now().After(deadline) || ctx.Err() != nil {
				break
			}
			time.Sleep(time.Second)
		}
		switch {
		case apierrors.IsNotFound(err):
			lost++
			s.res.ConfigMapsLost = append(s.res.ConfigMapsLost, w.cluster+"/"+w.name+" ("+when+")")
		case err != nil:
			unreadable = append(unreadable, fmt.Sprintf("%s/%s: %v", w.cluster, w.name, err))
		}
	}
	s.cfg.progress("%s: %d ConfigMaps written, %d lost, %d unreadable", when, len(s.written), lost, len(unreadable))
	if len(unreadable) > 0 {
		return fmt.Errorf("%s: ConfigMaps not readable: %s", when, strings.Join(unreadable, "; "))
	}
	return nil
}

// sample reads the Goofy manager's RSS (/proc), goroutines (its go_goroutines metric), open
// files (/proc/<pid>/fd) and the size of its state directory, and counts Available clusters.
func (s *soak) sample(ctx context.Context) {
	pid := s.plane.Goofy.Pid()
	sm := SoakSample{Time: time.Now(), Elapsed: time.Since(s.start).Seconds(), Segment: s.segment, ConfigMaps: len(s.written)}
	if p, err := ReadProc(pid); err == nil {
		sm.RSSBytes, sm.AnonBytes = p.RSSBytes, p.AnonBytes
	}
	if fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err == nil {
		sm.OpenFiles = len(fds)
	}
	sm.Goroutines, _ = scrapeGauge(ctx, s.metricsURL, "go_goroutines")
	sm.StateBytes = dirSize(filepath.Join(s.plane.OutputDir(), "goofy-state"))
	sm.Available, _ = s.availableClusters(ctx)
	s.res.Samples = append(s.res.Samples, sm)
	s.cfg.progress("%5.0fs segment %d: RSS %.1f MiB, goroutines %d, open files %d, state %.1f MiB, Available %d/%d, ConfigMaps %d",
		sm.Elapsed, sm.Segment, float64(sm.RSSBytes)/(1<<20), sm.Goroutines, sm.OpenFiles, float64(sm.StateBytes)/(1<<20), sm.Available, s.cfg.Clusters, sm.ConfigMaps)
}

// saveProfiles keeps the manager's goroutines (with their stacks) and heap at the end of the
// current segment, in profiles/segment-<n>-goroutines.txt and -heap.pprof beside the samples: what
// a growth the verdict reports is made of. A profile that cannot be read is reported and skipped.
func (s *soak) saveProfiles(ctx context.Context) {
	dir := filepath.Join(s.cfg.OutDir, "profiles")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		s.cfg.progress("profiles: %v", err)
		return
	}
	for _, p := range []struct{ path, file string }{
		{"goroutine?debug=1", fmt.Sprintf("segment-%d-goroutines.txt", s.segment)},
		{"heap", fmt.Sprintf("segment-%d-heap.pprof", s.segment)},
	} {
		if err := fetch(ctx, s.pprofURL+p.path, filepath.Join(dir, p.file), 30*time.Second); err != nil {
			s.cfg.progress("profiles: %v", err)
		}
	}
}

// scrapeGauge reads one unlabelled gauge from a Prometheus text endpoint.
func scrapeGauge(ctx context.Context, url, name string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return int(f), err
		}
	}
	return 0, fmt.Errorf("%s: no %s", url, name)
}

// dirSize is the total size of the regular files under dir.
func dirSize(dir string) int64 {
	var total int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				total += info.Size()
			}
		}
		return nil
	})
	return total
}
