package apiserver

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"testing"

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

func reportRate(b *testing.B, unit string) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), unit)
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
	for b.Loop() {
		benchDo(b, cl, "GET", url, "", nil, 200)
	}
	reportRate(b, "GETs/s")
}

func BenchmarkCREATE(b *testing.B) {
	env := newTestEnv(b, Options{})
	cl := benchClient()
	url := env.server.URL + cmPath
	body := []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"generateName":"bench-"},"data":{"k":"v"}}`)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		benchDo(b, cl, "POST", url, "application/json", body, 201)
	}
	reportRate(b, "creates/s")
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
	for b.Loop() {
		benchDo(b, cl, "GET", url, "", nil, 200)
	}
	reportRate(b, "lists/s")
}

func BenchmarkPatchStrategic(b *testing.B) {
	env := newTestEnv(b, Options{})
	cl := benchClient()
	benchDo(b, cl, "POST", env.server.URL+"/api/v1/nodes", "application/json", []byte(`{"apiVersion":"v1","kind":"Node","metadata":{"name":"n1"}}`), 201)
	url := env.server.URL + "/api/v1/nodes/n1"
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		i++
		body := fmt.Appendf(nil, `{"metadata":{"labels":{"bench":"v%d"}},"spec":{"taints":[{"key":"k","effect":"NoSchedule","value":"%d"}]}}`, i, i)
		benchDo(b, cl, "PATCH", url, "application/strategic-merge-patch+json", body, 200)
	}
	reportRate(b, "patches/s")
}
