package mux

import (
	"context"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/cluster-api/util/kubeconfig"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// watchClientEnv, set, makes the test binary the client process of BenchmarkWatchStack: it opens
// that many Node watches with the kubeconfig at $watchClientEnv_KUBECONFIG, creates the file
// <kubeconfig>.ready, and holds them until its parent kills it.
const watchClientEnv = "GOOFY_BENCH_WATCH_CLIENT"

func TestMain(m *testing.M) {
	if n, err := strconv.Atoi(os.Getenv(watchClientEnv)); err == nil {
		os.Exit(runWatchClient(n, os.Getenv(watchClientEnv+"_KUBECONFIG")))
	}
	os.Exit(m.Run())
}

func runWatchClient(watches int, kubeconfigPath string) int {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfigPath)
	if err != nil {
		return 1
	}
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for range watches {
		w, err := cs.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{})
		if err != nil {
			return 1
		}
		go func() {
			for range w.ResultChan() {
			}
		}()
	}
	if err := os.WriteFile(kubeconfigPath+".ready", nil, 0o600); err != nil {
		return 1
	}
	<-ctx.Done()
	return 0
}

// BenchmarkWatchStack is the goroutine stack an open watch keeps in the serving process. Every
// watch holds its handler's goroutine for its life (CAPI's cluster cache keeps a Node watch on
// every workload cluster, and the managers' informers others); its stack is as deep as the filter
// chain and the handler frames it waits in. The watches (400 on one idle cluster, client-go,
// protobuf) come from a client process of their own, so that only the server's stacks are
// counted; each gets five rounds of Node updates before the stacks are measured after the
// collections that shrink them.
func BenchmarkWatchStack(b *testing.B) {
	for range b.N {
		benchWatchStack(b, 400)
	}
}

func benchWatchStack(b *testing.B, watches int) {
	b.StopTimer()
	m, _, stop := memoryBenchMux(b, 1, 5000)
	defer stop()
	cc := newClusterCerts(b)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	name, _ := benchAddCluster(ctx, b, m, cc, 0, 1, 2, false)
	l, _ := m.Listener(name)
	kc, err := kubeconfig.New(name, l.Address(), cc.ca, cc.caKey)
	if err != nil {
		b.Fatal(err)
	}
	path := b.TempDir() + "/kubeconfig"
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		b.Fatal(err)
	}
	c, err := l.GetClient()
	if err != nil {
		b.Fatal(err)
	}
	for range 5 {
		runtime.GC()
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	goroutines := runtime.NumGoroutine()
	b.StartTimer()

	client := exec.Command(os.Args[0])
	client.Env = append(os.Environ(), watchClientEnv+"="+strconv.Itoa(watches), watchClientEnv+"_KUBECONFIG="+path)
	client.Stderr = os.Stderr
	if err := client.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = client.Process.Kill(); _ = client.Wait() }()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if _, err := os.Stat(path + ".ready"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("the client process did not open its watches within a minute")
		}
	}
	// Events make the handlers encode and write, which is where their stacks grow.
	for round := range 5 {
		nodes := &corev1.NodeList{}
		if err := c.List(ctx, nodes); err != nil {
			b.Fatal(err)
		}
		for i := range nodes.Items {
			n := &nodes.Items[i]
			if n.Labels == nil {
				n.Labels = map[string]string{}
			}
			n.Labels["bench-round"] = strconv.Itoa(round)
			if err := c.Update(ctx, n); err != nil {
				b.Fatal(err)
			}
		}
		time.Sleep(300 * time.Millisecond)
	}
	time.Sleep(time.Second)
	for range 8 {
		runtime.GC()
	}
	runtime.ReadMemStats(&after)
	b.StopTimer()
	if open := testutil.ToFloat64(watchesActive); open < float64(watches) {
		b.Fatalf("%v watches open, want %d", open, watches)
	}
	b.ReportMetric(float64(after.StackInuse-before.StackInuse)/float64(watches), "server-stack-B/watch")
	b.ReportMetric(float64(runtime.NumGoroutine()-goroutines)/float64(watches), "goroutines/watch")
}
