package bench

import (
	"bytes"
	"context"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/testenv"
)

func TestParseStat(t *testing.T) {
	g := NewWithT(t)
	// A command name with spaces and parentheses must not shift the fields.
	stat := []byte("4242 (a (b) c) S 17 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 12 0 1000 200000000 3000 18446744073709551615")
	cpu, err := parseStatCPU(stat)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cpu).To(BeNumerically("~", 3.0, 1e-9)) // (250+50) ticks
	ppid, err := parseStatPPID(stat)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ppid).To(Equal(17))
	_, err = parseStatCPU([]byte("garbage"))
	g.Expect(err).To(HaveOccurred())
}

func TestReadProcAndChildren(t *testing.T) {
	g := NewWithT(t)
	// Burn some CPU so that the reading is not zero.
	deadline := time.Now().Add(300 * time.Millisecond)
	x := 0
	for time.Now().Before(deadline) {
		x++
	}
	ps, err := ReadProc(os.Getpid())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ps.CPUSeconds).To(BeNumerically(">", 0))
	g.Expect(ps.RSSBytes).To(BeNumerically(">", 1<<20))
	g.Expect(ps.PeakRSS).To(BeNumerically(">=", ps.RSSBytes))
	g.Expect(ps.AnonBytes).To(BeNumerically(">", 0))

	cmd := exec.Command("sleep", "30")
	g.Expect(cmd.Start()).To(Succeed())
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	g.Expect(ChildProcesses()).To(HaveKeyWithValue("sleep", cmd.Process.Pid))

	s := NewSampler(map[string]int{"self": os.Getpid(), "sleep": cmd.Process.Pid}, 50*time.Millisecond)
	s.Mark()
	deadline = time.Now().Add(200 * time.Millisecond)
	for time.Now().Before(deadline) {
		x++
	}
	stats := s.Stop()
	g.Expect(stats).To(HaveKey("self"))
	g.Expect(stats["self"].CPUSeconds).To(BeNumerically(">", 0))
	g.Expect(stats["self"].CPUSecondsTotal).To(BeNumerically(">=", stats["self"].CPUSeconds))
	g.Expect(stats["sleep"].CPUSeconds).To(BeNumerically("<", stats["self"].CPUSeconds))
	g.Expect(stats["sleep"].PeakRSSBytes).To(BeNumerically(">", 0))
	_ = x
}

func TestCountRequests(t *testing.T) {
	g := NewWithT(t)
	log := strings.Join([]string{
		`{"auditID":"1","stage":"ResponseComplete","verb":"get","userAgent":"goofy-manager","objectRef":{"resource":"secrets"},"requestReceivedTimestamp":"2026-01-01T00:00:01.000000Z"}`,
		// A watch logs twice under one ID.
		`{"auditID":"2","stage":"ResponseStarted","verb":"watch","userAgent":"capd-manager/v1.14.2 cluster-api-docker-controller-manager (linux/amd64)","objectRef":{"resource":"devmachines"},"requestReceivedTimestamp":"2026-01-01T00:00:02.000000Z"}`,
		`{"auditID":"2","stage":"ResponseComplete","verb":"watch","userAgent":"capd-manager/v1.14.2 cluster-api-docker-controller-manager (linux/amd64)","objectRef":{"resource":"devmachines"},"requestReceivedTimestamp":"2026-01-01T00:00:02.000000Z"}`,
		`{"auditID":"3","stage":"ResponseComplete","verb":"patch","userAgent":"goofy-manager","objectRef":{"resource":"goofymachines","subresource":"status"},"requestReceivedTimestamp":"2026-01-01T00:00:03.000000Z"}`,
		// Outside the window on both sides.
		`{"auditID":"4","stage":"ResponseComplete","verb":"get","userAgent":"goofy-manager","objectRef":{"resource":"secrets"},"requestReceivedTimestamp":"2026-01-01T00:00:00.500000Z"}`,
		`{"auditID":"5","stage":"ResponseComplete","verb":"get","userAgent":"goofy-manager","objectRef":{"resource":"secrets"},"requestReceivedTimestamp":"2026-01-01T00:00:09.000000Z"}`,
		`{"auditID":"6","stage":"ResponseComplete","verb":"get","userAgent":"","requestURI":"/version","requestReceivedTimestamp":"2026-01-01T00:00:04.000000Z"}`,
	}, "\n")
	rc, err := CountRequests(strings.NewReader(log), "2026-01-01T00:00:01.000000Z", "2026-01-01T00:00:09.000000Z")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(rc.ByClient).To(Equal(map[string]int{"goofy-manager": 2, "capd-manager": 1, "unknown": 1}))
	g.Expect(rc.ByVerbResource["goofy-manager"]).To(Equal(map[string]int{"get secrets": 1, "patch goofymachines/status": 1}))
	g.Expect(rc.ByVerbResource["capd-manager"]).To(Equal(map[string]int{"watch devmachines": 1}))

	_, err = CountRequests(strings.NewReader("{not json"), "", "")
	g.Expect(err).To(HaveOccurred())
}

// TestAuditFlagsWithKubeAPIServer proves the policy and flags are accepted by the real
// kube-apiserver and that its log is counted per client: requests made with a known User-Agent show
// up under it, by verb and resource.
func TestAuditFlagsWithKubeAPIServer(t *testing.T) {
	if !testenv.HaveAPIServer() {
		t.Skip("kube-apiserver/etcd not built (hack/envtest.sh)")
	}
	g := NewWithT(t)
	dir := t.TempDir()
	flags, logPath, err := AuditFlags(dir, true)
	g.Expect(err).NotTo(HaveOccurred())
	env := &envtest.Environment{BinaryAssetsDirectory: testenv.AssetsDir(), ControlPlaneStartTimeout: 2 * time.Minute}
	api := env.ControlPlane.GetAPIServer()
	var apiLog bytes.Buffer
	api.Out, api.Err = &apiLog, &apiLog
	for k, v := range flags {
		api.Configure().Set(k, v)
	}
	api.Configure().Set("audit-log-batch-max-wait", "1s")
	cfg, err := env.Start()
	g.Expect(err).NotTo(HaveOccurred(), "kube-apiserver output:\n%s", lastBytes(apiLog.Bytes(), 4000))
	stopped := false
	defer func() {
		if !stopped {
			_ = env.Stop()
		}
	}()

	since := AuditTime(time.Now())
	c := rest.CopyConfig(cfg)
	c.UserAgent = "audit-probe/v1 (linux/amd64)"
	cs, err := kubernetes.NewForConfig(c)
	g.Expect(err).NotTo(HaveOccurred())
	ctx := context.Background()
	for i := range 3 {
		_, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm-" + string(rune('a'+i))}}, metav1.CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
	}
	_, err = cs.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	until := AuditTime(time.Now().Add(time.Second))
	g.Expect(env.Stop()).To(Succeed()) // flushes the batch
	stopped = true

	f, err := os.Open(logPath)
	g.Expect(err).NotTo(HaveOccurred())
	defer f.Close()
	rc, err := CountRequests(f, since, until)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(rc.ByVerbResource["audit-probe"]).To(Equal(map[string]int{"create configmaps": 3, "list configmaps": 1}))
}

func TestRenderClusters(t *testing.T) {
	for _, tc := range []struct {
		template            []byte
		infraCluster, infra string
	}{
		{goofyTemplate, "GoofyCluster", "GoofyMachineTemplate"},
		{capdTemplate, "DevCluster", "DevMachineTemplate"},
	} {
		t.Run(tc.infraCluster, func(t *testing.T) {
			g := NewWithT(t)
			out, err := renderClusters(tc.template, Config{Clusters: 3, ControlPlane: 3, Workers: 2, Phase: 1500 * time.Millisecond, Jitter: "0", KubernetesVersion: "v1.36.3"})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(out).To(HaveLen(3))
			kinds := map[string]int{}
			for _, doc := range bytes.Split(out[2], []byte("\n---\n")) {
				u := &unstructured.Unstructured{}
				g.Expect(yaml.Unmarshal(doc, &u.Object)).To(Succeed())
				kinds[u.GetKind()]++
				g.Expect(u.GetNamespace()).To(Equal(namespace))
				g.Expect(u.GetName()).To(HavePrefix("bench-0002"))
				switch u.GetKind() {
				case "KubeadmControlPlane":
					r, _, _ := unstructured.NestedFieldNoCopy(u.Object, "spec", "replicas")
					g.Expect(r).To(BeNumerically("==", 3))
				case "MachineDeployment":
					r, _, _ := unstructured.NestedFieldNoCopy(u.Object, "spec", "replicas")
					g.Expect(r).To(BeNumerically("==", 2))
				case "DevCluster":
					// CAPD v1.14.2 panics on a DevCluster without annotations.
					g.Expect(u.GetAnnotations()).NotTo(BeEmpty())
				case tc.infra:
					d, _, _ := unstructured.NestedString(u.Object, "spec", "template", "spec", "backend", "inMemory", "vm", "provisioning", "startupDuration")
					g.Expect(d).To(Equal("1.5s"))
				}
			}
			g.Expect(kinds).To(Equal(map[string]int{
				"Cluster": 1, tc.infraCluster: 1, "KubeadmControlPlane": 1, tc.infra: 2, "KubeadmConfigTemplate": 1, "MachineDeployment": 1,
			}))
		})
	}
}

// TestRenderMachinePoolClusters: with MACHINE_POOL the workers are one MachinePool of
// WORKER_MACHINE_COUNT, bootstrapped by a KubeadmConfig, and nothing of the MachineDeployment is left.
func TestRenderMachinePoolClusters(t *testing.T) {
	g := NewWithT(t)
	out, err := renderClusters(withPoolWorkers(goofyTemplate, goofyPoolWorkers), Config{Clusters: 2, ControlPlane: 3, Workers: 500, Phase: time.Second, Jitter: "0.2", KubernetesVersion: "v1.36.3"})
	g.Expect(err).NotTo(HaveOccurred())
	kinds := map[string]int{}
	for _, doc := range bytes.Split(out[1], []byte("\n---\n")) {
		u := &unstructured.Unstructured{}
		g.Expect(yaml.Unmarshal(doc, &u.Object)).To(Succeed())
		kinds[u.GetKind()]++
		g.Expect(u.GetName()).To(HavePrefix("bench-0001"))
		switch u.GetKind() {
		case "MachinePool":
			r, _, _ := unstructured.NestedFieldNoCopy(u.Object, "spec", "replicas")
			g.Expect(r).To(BeNumerically("==", 500))
			ref, _, _ := unstructured.NestedString(u.Object, "spec", "template", "spec", "infrastructureRef", "name")
			g.Expect(ref).To(Equal("bench-0001-mp-0"))
		case "GoofyMachinePool":
			j, _, _ := unstructured.NestedString(u.Object, "spec", "template", "spec", "inMemory", "node", "provisioning", "startupJitter")
			g.Expect(j).To(Equal("0.2"))
		}
	}
	g.Expect(kinds).To(Equal(map[string]int{
		"Cluster": 1, "GoofyCluster": 1, "KubeadmControlPlane": 1, "GoofyMachineTemplate": 1, "KubeadmConfig": 1, "GoofyMachinePool": 1, "MachinePool": 1,
	}))
}

func TestSteadyState(t *testing.T) {
	g := NewWithT(t)
	counts := RequestCounts{
		ByClient:       map[string]int{"goofy-manager": 120, "manager": 900},
		ByVerbResource: map[string]map[string]int{"goofy-manager": {"get secrets": 20, "patch goofymachines/status": 100}},
	}
	// 120 requests in 2 minutes for 60 machines: 2 per machine per 2 minutes, 10 per 10 minutes.
	st := newSteadyState(counts, "goofy-manager", 2*time.Minute, 60)
	g.Expect(st.TotalRequests).To(Equal(120))
	g.Expect(st.PerMachinePerSyncPeriod).To(BeNumerically("~", 10, 1e-9))
	g.Expect(st.Requests).To(Equal(map[string]int{"get secrets": 20, "patch goofymachines/status": 100}))
}

func TestPercentiles(t *testing.T) {
	g := NewWithT(t)
	var d []time.Duration
	for i := 1; i <= 10; i++ {
		d = append(d, time.Duration(i)*time.Second)
	}
	g.Expect(percentiles(d)).To(Equal(Percentiles{Count: 10, P50: 5, P90: 9, Max: 10}))
	g.Expect(percentiles(nil)).To(Equal(Percentiles{}))
	g.Expect(percentiles([]time.Duration{time.Second})).To(Equal(Percentiles{Count: 1, P50: 1, P90: 1, Max: 1}))
}

func TestReport(t *testing.T) {
	g := NewWithT(t)
	mk := func(p, proc, client string, cpu float64, rss int64, reqs int, all float64) *Result {
		return &Result{
			Provider: p, Clusters: 2, ControlPlane: 1, Workers: 1, AvailableClusters: 2, AllAvailableSeconds: all,
			ProviderProcess: proc, ProviderClient: client,
			Processes:         map[string]ProcStats{proc: {CPUSeconds: cpu, PeakRSSBytes: rss}, "kube-apiserver": {CPUSeconds: 50}},
			Requests:          RequestCounts{ByClient: map[string]int{client: reqs}, ByVerbResource: map[string]map[string]int{client: {"get secrets": reqs}}},
			AvailableOverTime: [][2]float64{{0, 0}, {10, 1}, {all, 2}},
			Phases:            map[string]Percentiles{"worker: created→nodeReady": {Count: 2, P50: 3, P90: 4, Max: 4}},
		}
	}
	goofy := mk("goofy", "goofy", "goofy-manager", 10, 50<<20, 100, 40)
	goofy.Client = ClientSettingsUsed{QPS: "20", Burst: "30", ClusterConcurrency: "10", MachineConcurrency: "10"}
	capd := mk("capd-inmemory", "capd", "capd-manager", 40, 200<<20, 400, 80)
	capd.Client = ClientSettingsUsed{QPS: "100", Burst: "200", ClusterConcurrency: "50", MachineConcurrency: "50"}
	capd.AvailableClusters, capd.NotAvailable = 1, []string{"bench-0001"}
	r := NewReport([]*Result{goofy, capd})
	g.Expect(*r.Ratios).To(Equal(Ratios{Of: "goofy", To: "capd-inmemory", CPUSeconds: 0.25, PeakRSS: 0.25, Requests: 0.25, AllAvailableSec: 0.5, Settings: "shipped defaults"}))

	var buf bytes.Buffer
	r.WriteText(&buf)
	g.Expect(buf.String()).To(ContainSubstring("provider peak RSS (MiB)"))
	g.Expect(buf.String()).To(MatchRegexp(`provider API requests\s+100\s+400`))
	g.Expect(buf.String()).To(ContainSubstring("worker: created→nodeReady"))
	g.Expect(buf.String()).To(MatchRegexp(`client QPS / burst\s+20 / 30\s+100 / 200`))
	g.Expect(buf.String()).To(MatchRegexp(`concurrency clusters / machines\s+10 / 10\s+50 / 50`))
	g.Expect(buf.String()).To(MatchRegexp(`client settings\s+shipped defaults\s+shipped defaults`))
	g.Expect(buf.String()).To(MatchRegexp(`clusters Available\s+2/2\s+1/2`))
	g.Expect(buf.String()).To(MatchRegexp(`clusters not Available \(stalled\)\s+0\s+1`))
	g.Expect(buf.String()).To(ContainSubstring("capd-inmemory clusters not Available: bench-0001\n"))
	g.Expect(buf.String()).To(ContainSubstring("goofy / capd-inmemory (shipped defaults): CPU 0.25"))

	// The same settings for both: the other comparison.
	set := ClientSettingsUsed{QPS: "100", Burst: "200", ClusterConcurrency: "50", MachineConcurrency: "50", Set: []string{"burst", "concurrency", "qps"}}
	goofy.Client, capd.Client = set, set
	g.Expect(NewReport([]*Result{goofy, capd}).Ratios.Settings).To(Equal("equal client settings"))
	goofy.Client.QPS = "20"
	g.Expect(NewReport([]*Result{goofy, capd}).Ratios.Settings).To(Equal("different client settings"))

	dir := t.TempDir()
	g.Expect(r.WriteJSON(filepath.Join(dir, "report.json"))).To(Succeed())
	plotPath := filepath.Join(dir, "available.png")
	g.Expect(r.WritePlot(plotPath)).To(Succeed())
	f, err := os.Open(plotPath)
	g.Expect(err).NotTo(HaveOccurred())
	defer f.Close()
	img, err := png.Decode(f)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(img.Bounds().Dx()).To(BeNumerically(">", 500))
}

// TestClientSettings maps the knobs to each provider's flags and reads the shipped defaults of the
// rest from the binary's --help (pflag's format, as both managers print it).
func TestClientSettings(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	fake := func(name, help string) string {
		path := filepath.Join(dir, name)
		g.Expect(os.WriteFile(path, []byte("#!/bin/sh\ncat >&2 <<'EOF'\n"+help+"EOF\nexit 2\n"), 0o755)).To(Succeed())
		return path
	}
	goofy := fake("goofy", `Usage of manager:
      --goofycluster-concurrency int           Number of GoofyClusters reconciled in parallel. (default 10)
      --goofymachine-concurrency int           Number of GoofyMachines reconciled in parallel. (default 10)
      --kube-api-burst int                     Maximum burst of queries to the management cluster's API server. (default 30)
      --kube-api-qps float32                   Maximum queries per second to the management cluster's API server. (default 20)
      --listener-host string                   Host advertised in workload cluster endpoints. (default "127.0.0.1")
`)
	capd := fake("capd", `      --devcluster-concurrency int              Number of DevClusters to process simultaneously (default 50)
      --devmachine-concurrency int              Number of DevMachines to process simultaneously (default 50)
      --kube-api-burst int                      Maximum number of queries that should be allowed in one burst from the controller client to the Kubernetes API server. (default 200)
      --kube-api-qps float32                    Maximum queries per second from the controller client to the Kubernetes API server. (default 100)
`)

	args, used, err := ClientSettings{}.resolve(ProviderGoofy, goofy)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(args).To(BeEmpty())
	g.Expect(used).To(Equal(ClientSettingsUsed{QPS: "20", Burst: "30", ClusterConcurrency: "10", MachineConcurrency: "10"}))
	g.Expect(used.Shipped()).To(BeTrue())
	g.Expect(used.String()).To(Equal("QPS 20, burst 30, concurrency 10 clusters / 10 machines (shipped defaults)"))

	args, used, err = ClientSettings{QPS: 100, Burst: 200, Concurrency: 50}.resolve(ProviderGoofy, goofy)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(args).To(Equal([]string{"--kube-api-qps=100", "--kube-api-burst=200", "--goofycluster-concurrency=50", "--goofymachine-concurrency=50"}))
	g.Expect(used.Set).To(Equal([]string{"burst", "concurrency", "qps"}))

	args, used, err = ClientSettings{QPS: 12.5, Concurrency: 7}.resolve(ProviderCAPD, capd)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(args).To(Equal([]string{"--kube-api-qps=12.5", "--devcluster-concurrency=7", "--devmachine-concurrency=7"}))
	g.Expect(used).To(Equal(ClientSettingsUsed{QPS: "12.5", Burst: "200", ClusterConcurrency: "7", MachineConcurrency: "7", Set: []string{"concurrency", "qps"}, Args: args}))
	g.Expect(used.String()).To(HaveSuffix("(set: concurrency, qps; the rest shipped)"))

	// A binary that states no default: the value is unknown, not invented.
	_, used, err = ClientSettings{}.resolve(ProviderCAPD, filepath.Join(dir, "missing"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(used.QPS).To(Equal("?"))

	_, _, err = ClientSettings{Burst: -1}.resolve(ProviderGoofy, goofy)
	g.Expect(err).To(HaveOccurred())
	_, _, err = ClientSettings{}.resolve("kind", goofy)
	g.Expect(err).To(HaveOccurred())
}

func lastBytes(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

func TestParseControllerStats(t *testing.T) {
	g := NewWithT(t)
	page := `# TYPE controller_runtime_reconcile_total counter
controller_runtime_reconcile_total{controller="goofymachine",result="success"} 40
controller_runtime_reconcile_total{controller="goofymachine",result="requeue_after"} 10
controller_runtime_reconcile_total{controller="goofycluster",result="success"} 5
# TYPE controller_runtime_reconcile_time_seconds histogram
controller_runtime_reconcile_time_seconds_bucket{controller="goofymachine",le="+Inf"} 50
controller_runtime_reconcile_time_seconds_sum{controller="goofymachine"} 2.5
controller_runtime_reconcile_time_seconds_count{controller="goofymachine"} 50
# TYPE workqueue_queue_duration_seconds histogram
workqueue_queue_duration_seconds_bucket{controller="goofymachine",name="goofymachine",le="+Inf"} 50
workqueue_queue_duration_seconds_sum{controller="goofymachine",name="goofymachine"} 5
workqueue_queue_duration_seconds_count{controller="goofymachine",name="goofymachine"} 50
`
	st, err := ParseControllerStats(strings.NewReader(page))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Reconciles).To(Equal(map[string]float64{"goofymachine": 50, "goofycluster": 5}))
	g.Expect(st.ReconcileSeconds).To(HaveKeyWithValue("goofymachine", 2.5))
	g.Expect(st.QueueWaitSeconds).To(HaveKeyWithValue("goofymachine", 0.1))
}

func TestSplitPortRange(t *testing.T) {
	g := NewWithT(t)
	got, err := splitPortRange("17000-19999", 2)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(Equal([]string{"17000-18499", "18500-19999"}))
	_, err = splitPortRange("17000-17000", 2)
	g.Expect(err).To(MatchError(ContainSubstring("too small")))
	_, err = splitPortRange("nonsense", 2)
	g.Expect(err).To(HaveOccurred())
}
