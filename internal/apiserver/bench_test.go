package apiserver

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// benchClient is a keep-alive HTTP/1.1 client over loopback with one connection.
func benchClient() *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4, DisableCompression: true}}
}

func benchDo(b *testing.B, cl *http.Client, method, url, ctype string, body []byte, want int) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("Accept", "application/json")
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := cl.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != want {
		b.Fatalf("%s %s: %d", method, url, resp.StatusCode)
	}
}

// cpuTime is the process's user+system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportRate reports the wall-clock rate and, because this machine is shared, the rate per
// fully used core computed from the CPU time the process (client and server) really got.
func reportRate(b *testing.B, unit string, cpuStart time.Duration) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), unit)
	if used := cpuTime() - cpuStart; used > 0 {
		b.ReportMetric(float64(b.N)/used.Seconds(), unit+"/core")
	}
}

// BenchmarkGET: GET of one ConfigMap over loopback keep-alive HTTP/1.1 (run with -cpu 1 for the
// one-core figure).
func BenchmarkGET(b *testing.B) {
	env := newTestEnv(b, Options{})
	cl := benchClient()
	url := env.server.URL + cmPath
	benchDo(b, cl, "POST", url, "application/json", []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"bench"},"data":{"k":"v"}}`), 201)
	url += "/bench"
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	for b.Loop() {
		benchDo(b, cl, "GET", url, "", nil, 200)
	}
	reportRate(b, "GETs/s", cpu0)
}

func BenchmarkCREATE(b *testing.B) {
	env := newTestEnv(b, Options{})
	cl := benchClient()
	url := env.server.URL + cmPath
	body := []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"generateName":"bench-"},"data":{"k":"v"}}`)
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	for b.Loop() {
		benchDo(b, cl, "POST", url, "application/json", body, 201)
	}
	reportRate(b, "creates/s", cpu0)
}

func BenchmarkLIST1000Pods(b *testing.B) {
	env := newTestEnv(b, Options{})
	cs := env.clientset(b)
	for i := range 1000 {
		p := testPod("default", fmt.Sprintf("pod-%04d", i), "node-1", map[string]string{"app": "bench"})
		if _, err := cs.CoreV1().Pods("default").Create(ctx(b), p, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	cl := benchClient()
	url := env.server.URL + "/api/v1/namespaces/default/pods"
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	for b.Loop() {
		benchDo(b, cl, "GET", url, "", nil, 200)
	}
	reportRate(b, "lists/s", cpu0)
}

func BenchmarkPatchStrategic(b *testing.B) {
	env := newTestEnv(b, Options{})
	cl := benchClient()
	benchDo(b, cl, "POST", env.server.URL+"/api/v1/nodes", "application/json", []byte(`{"apiVersion":"v1","kind":"Node","metadata":{"name":"n1"}}`), 201)
	url := env.server.URL + "/api/v1/nodes/n1"
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	i := 0
	for b.Loop() {
		i++
		body := fmt.Appendf(nil, `{"metadata":{"labels":{"bench":"v%d"}},"spec":{"taints":[{"key":"k","effect":"NoSchedule","value":"%d"}]}}`, i, i)
		benchDo(b, cl, "PATCH", url, "application/strategic-merge-patch+json", body, 200)
	}
	reportRate(b, "patches/s", cpu0)
}

// BenchmarkGETHandler is BenchmarkGET without the network: the handler's own cost per GET.
func BenchmarkGETHandler(b *testing.B) {
	env := newTestEnv(b, Options{})
	benchDo(b, benchClient(), "POST", env.server.URL+cmPath, "application/json", []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"bench"},"data":{"k":"v"}}`), 201)
	benchHandlerGET(b, NewHandler(env.cluster, Options{}), cmPath+"/bench", http.StatusOK, "GETs/s")
}

// BenchmarkNotFoundHandler is BenchmarkGETHandler for a missing object: controllers probe for
// absent objects constantly, so a 404 should cost no more than a GET.
func BenchmarkNotFoundHandler(b *testing.B) {
	env := newTestEnv(b, Options{})
	benchHandlerGET(b, NewHandler(env.cluster, Options{}), cmPath+"/missing", http.StatusNotFound, "404s/s")
}

// benchHandlerGET serves a JSON GET of path with h over and over and reports the rate.
func benchHandlerGET(b *testing.B, h http.Handler, path string, code int, unit string) {
	req := httptest.NewRequest("GET", path, nil)
	req.Header.Set("Accept", "application/json")
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != code {
			b.Fatal(rec.Code)
		}
	}
	reportRate(b, unit, cpu0)
}
