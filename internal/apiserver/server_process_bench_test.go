package apiserver

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// serveEnv makes the test binary a plain API server process for BenchmarkGETServerProcess.
const serveEnv = "GOOFY_APISERVER_BENCH_SERVE"

// cpuProfileEnv names a file to write the server process's CPU profile to.
const cpuProfileEnv = "GOOFY_APISERVER_BENCH_CPUPROFILE"

// TestServeForBenchmark is not a test: with serveEnv set it serves one cluster on loopback HTTP,
// prints its address and runs until stdin closes. Otherwise it returns at once. serveEnv=floor
// serves GETs with canned bytes instead (see BenchmarkGETServerProcessFloor).
func TestServeForBenchmark(t *testing.T) {
	mode := os.Getenv(serveEnv)
	if mode == "" {
		return
	}
	m := store.NewManager()
	c, err := m.AddCluster("bench", store.ClusterOptions{KubernetesVersion: testVersion})
	if err != nil {
		t.Fatal(err)
	}
	h := NewHandler(c, Options{})
	if mode == "floor" {
		h = cannedGETs(h)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	ln, err := listenLoopback()
	if err != nil {
		t.Fatal(err)
	}
	// GOOFY_APISERVER_BENCH_CPUPROFILE=<file> profiles the server process (go test's own
	// -cpuprofile covers only the client side).
	if f := os.Getenv(cpuProfileEnv); f != "" {
		out, err := os.Create(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := pprof.StartCPUProfile(out); err != nil {
			t.Fatal(err)
		}
		defer func() { pprof.StopCPUProfile(); _ = out.Close() }()
	}
	go func() { _ = srv.Serve(ln) }()
	fmt.Printf("ADDR %s\n", ln.Addr())
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	_ = srv.Close()
}

// cannedGETs answers each GET with the bytes the API server gave for the same path and
// Accept header the first time, and passes everything else on: a server that does no API server work per GET.
func cannedGETs(api http.Handler) http.Handler {
	var mu sync.Mutex
	type response struct {
		ctype string
		body  []byte
	}
	canned := map[string]response{}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			api.ServeHTTP(w, r)
			return
		}
		key := r.URL.Path + " " + r.Header.Get("Accept")
		mu.Lock()
		resp, ok := canned[key]
		mu.Unlock()
		if !ok {
			rec := httptest.NewRecorder()
			api.ServeHTTP(rec, r)
			resp = response{ctype: rec.Header().Get("Content-Type"), body: rec.Body.Bytes()}
			mu.Lock()
			canned[key] = resp
			mu.Unlock()
		}
		w.Header().Set("Content-Type", resp.ctype)
		w.Header().Set("Content-Length", strconv.Itoa(len(resp.body)))
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(resp.body)
	})
}

// BenchmarkGETServerProcess measures GETs over loopback HTTP/1.1 keep-alive against a server in
// its own process, and divides by the server process's CPU time: the server's GETs per core,
// without the client's cost (which an in-process benchmark adds). The server process runs with
// the benchmark's GOMAXPROCS, so -cpu 1 rates a server confined to one core.
func BenchmarkGETServerProcess(b *testing.B) {
	benchGETServerProcess(b, "api", benchConfigMap, "application/json")
}

// BenchmarkGETServerProcessFloor is BenchmarkGETServerProcess against a server that answers the
// GETs with canned bytes (the same response): what net/http, the Go scheduler and the loopback
// network cost alone, the floor under the API server's own figure on this machine.
func BenchmarkGETServerProcessFloor(b *testing.B) {
	benchGETServerProcess(b, "floor", benchConfigMap, "application/json")
}

// BenchmarkGETServerProcessNode GETs a Node with a kubelet-like status (about 3 KB of JSON) the
// way client-go asks: JSON, or protobuf with JSON as the fallback.
func BenchmarkGETServerProcessNode(b *testing.B) {
	b.Run("json", func(b *testing.B) { benchGETServerProcess(b, "api", benchNode, "application/json") })
	b.Run("protobuf", func(b *testing.B) {
		benchGETServerProcess(b, "api", benchNode, "application/vnd.kubernetes.protobuf,application/json")
	})
}

// benchConfigMap creates the object the GET benchmarks read and returns its path.
func benchConfigMap(b *testing.B, cl *http.Client, base string) string {
	benchDo(b, cl, "POST", base+cmPath, "application/json", []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"bench"},"data":{"k":"v"}}`), 201)
	return base + cmPath + "/bench"
}

func benchNode(b *testing.B, cl *http.Client, base string) string {
	n := readyNode("bench-node")
	n.Labels["kubernetes.io/hostname"] = "bench-node"
	n.Labels["kubernetes.io/os"] = "linux"
	n.Spec = corev1.NodeSpec{ProviderID: "goofy://bench/bench-node", PodCIDR: "10.244.0.0/24", PodCIDRs: []string{"10.244.0.0/24"}}
	res := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("16Gi"), corev1.ResourcePods: resource.MustParse("110")}
	n.Status.Capacity, n.Status.Allocatable = res, res
	for _, c := range []corev1.NodeConditionType{"MemoryPressure", "DiskPressure", "PIDPressure"} {
		n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: c, Status: corev1.ConditionFalse,
			Reason: "KubeletHas" + string(c[:len(c)-8]) + "Ok", Message: "kubelet has no " + string(c), LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()})
	}
	n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeHostName, Address: "bench-node"})
	for i := range 8 {
		n.Status.Images = append(n.Status.Images, corev1.ContainerImage{SizeBytes: int64(1e7 * (i + 1)),
			Names: []string{fmt.Sprintf("registry.k8s.io/image-%d@sha256:%064d", i, i), fmt.Sprintf("registry.k8s.io/image-%d:v1.36.%d", i, i)}})
	}
	body, err := json.Marshal(n)
	if err != nil {
		b.Fatal(err)
	}
	benchDo(b, cl, "POST", base+"/api/v1/nodes", "application/json", body, 201)
	status, err := json.Marshal(map[string]any{"status": n.Status})
	if err != nil {
		b.Fatal(err)
	}
	benchDo(b, cl, "PATCH", base+"/api/v1/nodes/bench-node/status", "application/merge-patch+json", status, 200)
	return base + "/api/v1/nodes/bench-node"
}

func benchGETServerProcess(b *testing.B, mode string, setup func(*testing.B, *http.Client, string) string, accept string) {
	addr, cmd := startServerProcess(b, "TestServeForBenchmark", serveEnv+"="+mode, fmt.Sprintf("GOMAXPROCS=%d", runtime.GOMAXPROCS(0)))
	cl := benchClient()
	url := setup(b, cl, "http://"+addr)
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("Accept", accept)
	var size int64
	cpu0 := processCPU(b, cmd.Process.Pid)
	start := time.Now()
	b.ResetTimer()
	for b.Loop() {
		// A request per GET, as benchDo and client-go make them.
		resp, err := cl.Do(req.Clone(req.Context()))
		if err != nil {
			b.Fatal(err)
		}
		size, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("GET %s: %d", url, resp.StatusCode)
		}
	}
	b.StopTimer()
	wall := time.Since(start)
	cpu := processCPU(b, cmd.Process.Pid) - cpu0
	b.ReportMetric(float64(b.N)/wall.Seconds(), "GETs/s")
	if cpu > 0 {
		b.ReportMetric(float64(b.N)/cpu.Seconds(), "GETs/s/server-core")
	}
	b.ReportMetric(float64(size), "resp-bytes")
}

// processCPU is a process's user+system CPU time from /proc (Linux).
func processCPU(b *testing.B, pid int) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Skipf("no /proc: %v", err)
	}
	// Fields after the command name (which may hold spaces) start after the last ')'.
	fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	const clkTck = 100 // USER_HZ on Linux
	return time.Duration(utime+stime) * time.Second / clkTck
}

func listenLoopback() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }
