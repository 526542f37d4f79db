package apiserver

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

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

// cannedGETs answers each GET with the bytes the API server gave for the same path the first
// time, and passes everything else on: a server that does no API server work per GET.
func cannedGETs(api http.Handler) http.Handler {
	var mu sync.Mutex
	canned := map[string][]byte{}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			api.ServeHTTP(w, r)
			return
		}
		mu.Lock()
		body, ok := canned[r.URL.Path]
		mu.Unlock()
		if !ok {
			rec := httptest.NewRecorder()
			api.ServeHTTP(rec, r)
			body = rec.Body.Bytes()
			mu.Lock()
			canned[r.URL.Path] = body
			mu.Unlock()
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(body)
	})
}

// BenchmarkGETServerProcess measures GETs over loopback HTTP/1.1 keep-alive against a server in
// its own process, and divides by the server process's CPU time: the server's GETs per core,
// without the client's cost (which an in-process benchmark adds). The server process runs with
// the benchmark's GOMAXPROCS, so -cpu 1 rates a server confined to one core.
func BenchmarkGETServerProcess(b *testing.B) { benchGETServerProcess(b, "api") }

// BenchmarkGETServerProcessFloor is BenchmarkGETServerProcess against a server that answers the
// GETs with canned bytes (the same response): what net/http, the Go scheduler and the loopback
// network cost alone, the floor under the API server's own figure on this machine.
func BenchmarkGETServerProcessFloor(b *testing.B) { benchGETServerProcess(b, "floor") }

func benchGETServerProcess(b *testing.B, mode string) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestServeForBenchmark$", "-test.count=1")
	cmd.Env = append(os.Environ(), serveEnv+"="+mode, fmt.Sprintf("GOMAXPROCS=%d", runtime.GOMAXPROCS(0)))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = stdin.Close(); _ = cmd.Wait() }()
	var addr string
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if a, ok := strings.CutPrefix(sc.Text(), "ADDR "); ok {
			addr = a
			break
		}
	}
	if addr == "" {
		b.Fatal("server process did not start")
	}
	cl := benchClient()
	base := "http://" + addr + cmPath
	benchDo(b, cl, "POST", base, "application/json", []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"bench"},"data":{"k":"v"}}`), 201)
	url := base + "/bench"
	cpu0 := processCPU(b, cmd.Process.Pid)
	start := time.Now()
	b.ResetTimer()
	for b.Loop() {
		benchDo(b, cl, "GET", url, "", nil, 200)
	}
	b.StopTimer()
	wall := time.Since(start)
	cpu := processCPU(b, cmd.Process.Pid) - cpu0
	b.ReportMetric(float64(b.N)/wall.Seconds(), "GETs/s")
	if cpu > 0 {
		b.ReportMetric(float64(b.N)/cpu.Seconds(), "GETs/s/server-core")
	}
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
