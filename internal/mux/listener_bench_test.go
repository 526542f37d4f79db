package mux

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// BenchmarkClusterSetup measures what one new workload cluster costs: InitWorkloadClusterListener,
// the first AddAPIServer (serving certificate, bind, serve) and the first AddEtcdMember (etcd
// serving certificate, member), certificates included.
func BenchmarkClusterSetup(b *testing.B) {
	m, err := NewWorkloadClustersMux(store.NewManager(), benchHost, WithListenerAddresses(benchHost), WithPortRange(4000, 9999))
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = m.Shutdown(context.Background()) }()
	cc := newClusterCerts(b)
	durations := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		name := fmt.Sprintf("ns/setup-%d", i)
		start := time.Now()
		if _, err := m.InitWorkloadClusterListener(name); err != nil {
			b.Fatal(err)
		}
		if err := m.AddAPIServer(name, "kube-apiserver-n", cc.ca, cc.caKey); err != nil {
			b.Fatal(err)
		}
		if err := m.AddEtcdMember(name, "etcd-n", cc.etcdCA, cc.etcdCAKey); err != nil {
			b.Fatal(err)
		}
		durations = append(durations, time.Since(start))
		if len(m.ListListeners()) >= 1000 { // stay within file descriptor limits on long runs
			b.StopTimer()
			for k := range m.ListListeners() {
				_ = m.DeleteWorkloadClusterListener(k)
			}
			b.StartTimer()
		}
	}
	b.StopTimer()
	reportPercentiles(b, durations)
}

// BenchmarkTLSHandshakeAndGET measures a new client connection (TCP + TLS 1.3 handshake with client
// certificate verification) plus one GET of a namespace, the way a fresh client starts.
func BenchmarkTLSHandshakeAndGET(b *testing.B) {
	m, err := NewWorkloadClustersMux(store.NewManager(), benchHost, WithListenerAddresses(benchHost), WithPortRange(3900, 3999))
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = m.Shutdown(context.Background()) }()
	cc := newClusterCerts(b)
	l, _ := m.InitWorkloadClusterListener("ns/tls")
	if err := m.AddAPIServer("ns/tls", "kube-apiserver-n", cc.ca, cc.caKey); err != nil {
		b.Fatal(err)
	}
	certPEM, keyPEM := clientCert(b, cc, "kubernetes-admin", []string{"system:masters"}, time.Hour)
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		b.Fatal(err)
	}
	tlsCfg := &tls.Config{RootCAs: pool(cc.ca), Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	url := l.Address() + "/api/v1/namespaces/default"
	durations := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tr := &http.Transport{TLSClientConfig: tlsCfg, DisableKeepAlives: true}
		start := time.Now()
		resp, err := (&http.Client{Transport: tr}).Get(url)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		durations = append(durations, time.Since(start))
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("GET: %s", resp.Status)
		}
		tr.CloseIdleConnections()
	}
	b.StopTimer()
	reportPercentiles(b, durations)
}

// BenchmarkThousandClustersMemory reports the resident memory 1,000 serving workload clusters
// take, each with one API server and one etcd member.
func BenchmarkThousandClustersMemory(b *testing.B) {
	for i := 0; i < b.N; i++ {
		func() {
			runtime.GC()
			before := rssBytes()
			m, err := NewWorkloadClustersMux(store.NewManager(), benchHost, WithListenerAddresses(benchHost), WithPortRange(4000, 5999))
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = m.Shutdown(context.Background()) }()
			cc := newClusterCerts(b)
			for j := range 1000 {
				name := fmt.Sprintf("ns/mem-%d", j)
				if _, err := m.InitWorkloadClusterListener(name); err != nil {
					b.Fatal(err)
				}
				if err := m.AddAPIServer(name, "kube-apiserver-n", cc.ca, cc.caKey); err != nil {
					b.Fatal(err)
				}
				if err := m.AddEtcdMember(name, "etcd-n", cc.etcdCA, cc.etcdCAKey); err != nil {
					b.Fatal(err)
				}
			}
			runtime.GC()
			b.ReportMetric(float64(rssBytes()-before)/(1<<20), "MiB-RSS/1000clusters")
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "MiB-heap-inuse")
		}()
	}
}

func reportPercentiles(b *testing.B, d []time.Duration) {
	if len(d) == 0 {
		return
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	pct := func(p float64) float64 { return float64(d[int(p*float64(len(d)-1))].Microseconds()) / 1000 }
	b.ReportMetric(pct(0.5), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
}

// rssBytes is this process's resident set size (Linux), 0 elsewhere.
func rssBytes() int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			f := strings.Fields(line)
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb * 1024
		}
	}
	return 0
}
