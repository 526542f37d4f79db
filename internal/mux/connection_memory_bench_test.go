package mux

import (
	"context"
	"math"
	"net"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// BenchmarkConnectionMemory is what the connections CAPI's managers keep open to a workload
// cluster cost the process that serves them. Through real CAPI every cluster has three: CAPI
// core's cluster cache (a Node informer), KCP's (pods, nodes and kubeadm's ConfigMap read at each
// reconcile) and CABPK's (bootstrap-token Secrets). Each is opened here by client-go over its own
// TLS connection (HTTP/2, protobuf, as controller-runtime talks to built-in kinds), to
// GOOFY_BENCH_CLUSTERS idle clusters (50) of 1 control-plane machine and 2 workers, with the
// manager's shipped defaults. Reported per connection: the server's live heap (the allocations of
// the in-process clients are told apart by their stacks and left out), and goroutines and
// goroutine stacks of both ends (the runtime cannot tell them apart).
func BenchmarkConnectionMemory(b *testing.B) {
	clusters := benchEnvInt("GOOFY_BENCH_CLUSTERS", 50)
	for range b.N {
		benchConnectionMemory(b, clusters)
	}
}

func benchConnectionMemory(b *testing.B, clusters int) {
	m, _, stop := memoryBenchMux(b, clusters, 5000)
	defer stop()
	cc := newClusterCerts(b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	listeners := make([]*WorkloadClusterListener, clusters)
	for i := range clusters {
		name, _ := benchAddCluster(ctx, b, m, cc, i, 1, 2, true)
		listeners[i], _ = m.Listener(name)
	}
	waitPodsRunning(ctx, b, listeners)

	b.ResetTimer()
	idleServer, _, idleBy := liveHeapBySide()
	var idle runtime.MemStats
	runtime.ReadMemStats(&idle)
	idleGoroutines := runtime.NumGoroutine()

	informersDone := make(chan struct{})
	defer close(informersDone)
	kcp := make([]*kubernetes.Clientset, clusters)
	cabpk := make([]*kubernetes.Clientset, clusters)
	for i, l := range listeners {
		cfg := capiRESTConfig(b, l.name, l, cc)
		cfg.ContentType = "application/vnd.kubernetes.protobuf"
		core := benchOwnConnection(b, cfg)
		kcp[i], cabpk[i] = benchOwnConnection(b, cfg), benchOwnConnection(b, cfg)
		nodes := cache.NewSharedIndexInformer(cache.NewListWatchFromClient(core.CoreV1().RESTClient(), "nodes", "", fields.Everything()),
			&corev1.Node{}, 0, cache.Indexers{})
		go nodes.RunWithContext(benchContextUntil(ctx, informersDone))
		if !cache.WaitForCacheSync(ctx.Done(), nodes.HasSynced) {
			b.Fatalf("cluster %d: the Node informer did not sync", i)
		}
	}
	// KCP's and CABPK's reads, in rounds a second apart, as their reconciles come (a connection's
	// state grows with the variety of what it carried, e.g. each second's Date header).
	for round := range 3 {
		if round > 0 {
			time.Sleep(1100 * time.Millisecond)
		}
		for i := range listeners {
			if _, err := kcp[i].CoreV1().Pods(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{}); err != nil {
				b.Fatal(err)
			}
			if _, err := kcp[i].CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err != nil {
				b.Fatal(err)
			}
			if _, err := kcp[i].CoreV1().ConfigMaps(metav1.NamespaceSystem).Get(ctx, "kubeadm-config", metav1.GetOptions{}); err != nil {
				b.Fatal(err)
			}
			if _, err := cabpk[i].CoreV1().Secrets(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{}); err != nil {
				b.Fatal(err)
			}
		}
	}
	if open := testutil.ToFloat64(connectionsOpen); open < float64(3*clusters) {
		b.Fatalf("%v connections open, want %d", open, 3*clusters)
	}
	connectedServer, connectedClient, connectedBy := liveHeapBySide()
	if path := os.Getenv("GOOFY_BENCH_HEAP_PROFILE"); path != "" {
		benchWriteHeapProfile(b, path) // for go tool pprof -sample_index=inuse_space -base
	}
	var connected runtime.MemStats
	runtime.ReadMemStats(&connected)
	goroutines := runtime.NumGoroutine()
	b.StopTimer()

	conns := float64(3 * clusters)
	b.ReportMetric(float64(connectedServer-idleServer)/conns, "server-heap-B/conn")
	b.ReportMetric(float64(connected.StackInuse-idle.StackInuse)/conns, "stack-B/conn")
	b.ReportMetric(float64(goroutines-idleGoroutines)/conns, "goroutines/conn")
	b.Logf("%d clusters, 3 connections each: server heap %.1f KiB per connection (client heap %.1f KiB), goroutine stacks of both ends %.1f KiB, %.1f goroutines",
		clusters, (connectedServer-idleServer)/conns/1024, connectedClient/conns/1024,
		float64(connected.StackInuse-idle.StackInuse)/conns/1024, float64(goroutines-idleGoroutines)/conns)
	for f, v := range idleBy {
		connectedBy[f] -= v
	}
	b.Logf("server heap per connection, by the function that allocated it:\n%s", topOf(connectedBy, 15, int(conns)))
}

// benchOwnConnection is a clientset with a transport, so a connection, of its own, as each of
// CAPI's managers has (client-go shares one transport between equal configurations).
func benchOwnConnection(b *testing.B, cfg *rest.Config) *kubernetes.Clientset {
	cfg = rest.CopyConfig(cfg)
	cfg.Dial = (&net.Dialer{}).DialContext // a config with its own dialer gets its own transport
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return cs
}

// benchContextUntil is ctx, also cancelled when done is closed.
func benchContextUntil(ctx context.Context, done <-chan struct{}) context.Context {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		<-done
		cancel()
	}()
	return ctx
}

// liveHeapBySide collects garbage and returns the live heap (estimated from the memory profile)
// allocated by the serving side and by in-process client-go clients, told apart by their stacks.
func liveHeapBySide() (server, client float64, serverBy map[string]float64) {
	serverBy = map[string]float64{}
	runtime.GC()
	runtime.GC()
	n, _ := runtime.MemProfile(nil, false)
	records := make([]runtime.MemProfileRecord, n+100)
	n, _ = runtime.MemProfile(records, false)
	for _, r := range records[:n] {
		inUse := r.InUseBytes()
		if inUse <= 0 || r.AllocObjects == 0 {
			continue
		}
		size := float64(r.AllocBytes) / float64(r.AllocObjects)
		bytes := float64(inUse) / (1 - math.Exp(-size/float64(memProfileRate)))
		if allocatedByClient(r.Stack()) {
			client += bytes
		} else {
			server += bytes
			serverBy[allocatingFunction(r.Stack())] += bytes
		}
	}
	return server, client, serverBy
}

// allocatingFunction names the first two functions on the stack outside the runtime.
func allocatingFunction(stack []uintptr) string {
	var names []string
	frames := runtime.CallersFrames(stack)
	for len(names) < 2 {
		f, more := frames.Next()
		if pkg := packageOf(f.Function); pkg != "runtime" && pkg != "reflect" && !strings.HasPrefix(pkg, "internal/") {
			names = append(names, f.Function)
		}
		if !more {
			break
		}
	}
	return strings.Join(names, " < ")
}

// allocatedByClient says whether a stack is client-go's, its HTTP/2 transport's or the
// benchmark's own (the clients' configurations).
func allocatedByClient(stack []uintptr) bool {
	frames := runtime.CallersFrames(stack)
	for {
		f, more := frames.Next()
		if strings.HasPrefix(f.Function, "k8s.io/client-go/") || strings.Contains(f.Function, "mux.benchConnectionMemory") || strings.HasPrefix(f.Function, "golang.org/x/net/http2.") || strings.Contains(f.Function, "http2ClientConn") ||
			strings.Contains(f.Function, "http2Transport") || strings.Contains(f.Function, "http2clientStream") ||
			strings.Contains(f.Function, "net/http.(*Transport)") || strings.Contains(f.Function, "net/http.(*persistConn)") ||
			strings.HasPrefix(f.Function, "crypto/tls.(*Conn).clientHandshake") {
			return true
		}
		if !more {
			return false
		}
	}
}
