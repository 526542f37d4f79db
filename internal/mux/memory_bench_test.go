package mux

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/cluster-api/util/secret"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/simulate"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/storage"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// BenchmarkClusterMemory is the per-cluster memory audit: with the manager's shipped defaults
// (durable state, workloads simulated), the live heap one idle cluster of 1 control-plane machine
// and 2 workers holds once its add-ons' pods run, then once the watch history no longer holds the
// versions its set-up superseded (store.DefaultEventHistoryTTL later), what one more worker adds,
// broken down by the package that allocated the memory and by the Goofy package it was allocated for.
// GOOFY_BENCH_CLUSTERS clusters (100) are measured together and the figures divided.
func BenchmarkClusterMemory(b *testing.B) {
	clusters := benchEnvInt("GOOFY_BENCH_CLUSTERS", 100)
	for range b.N {
		benchClusterMemory(b, clusters)
	}
}

// memProfileRate samples one allocation per 4 KiB: fine enough that a cluster's many small objects
// are seen, coarse enough to keep the set-up quick.
const memProfileRate = 4096

func benchClusterMemory(b *testing.B, clusters int) {
	m, db, stop := memoryBenchMux(b, clusters, 4000)
	defer stop()
	// Every cluster has its own CAs, as through CAPI, parsed from their PEM when the cluster is
	// added, as the GoofyMachine reconciler does: what a listener keeps of them is counted.
	cas := make([]secret.Certificates, clusters+1)
	for i := range cas {
		cas[i] = newClusterCAs(b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	// One cluster first, kept out of the figures: what the process builds once, on its first
	// cluster (the shared type converter of server-side apply, the shared bootstrap objects), is
	// in the baseline, not divided among the clusters measured.
	warmUp, _ := benchAddCluster(ctx, b, m, decodeClusterCerts(b, cas[clusters]), clusters, 1, 2, true)
	l, _ := m.Listener(warmUp)
	waitPodsRunning(ctx, b, []*WorkloadClusterListener{l})

	b.ResetTimer()
	empty, emptyPkgs := liveHeap()
	listeners := make([]*WorkloadClusterListener, clusters)
	for i := range clusters {
		name, _ := benchAddCluster(ctx, b, m, decodeClusterCerts(b, cas[i]), i, 1, 2, true)
		listeners[i], _ = m.Listener(name)
	}
	waitPodsRunning(ctx, b, listeners)
	idle, idlePkgs := liveHeap()
	if path := os.Getenv("GOOFY_BENCH_HEAP_PROFILE"); path != "" {
		// The idle clusters' heap, for `go tool pprof -sample_index=inuse_space`.
		benchWriteHeapProfile(b, path)
	}
	stateFile := stateFileBytes(b, db)
	// Once the watch history's window has passed, the versions the set-up superseded are gone:
	// what an idle cluster holds for as long as it stays idle.
	time.Sleep(store.DefaultEventHistoryTTL + 5*time.Second)
	settled, settledPkgs := liveHeap()
	if path := os.Getenv("GOOFY_BENCH_SETTLED_HEAP_PROFILE"); path != "" {
		benchWriteHeapProfile(b, path) // the settled idle clusters' heap
	}
	for i, l := range listeners {
		benchAddMachine(ctx, b, m, decodeClusterCerts(b, cas[i]), l, i, 3, false, true)
	}
	waitPodsRunning(ctx, b, listeners)
	grown, grownPkgs := liveHeap()
	runtime.KeepAlive(cas) // in every measurement alike, the baseline's included
	b.StopTimer()

	perCluster := float64(idle-empty) / float64(clusters)
	perSettled := float64(settled-empty) / float64(clusters)
	perMachine := float64(grown-settled) / float64(clusters)
	b.ReportMetric(perCluster, "heap-B/cluster")
	b.ReportMetric(perSettled, "heap-B/settled-cluster")
	b.ReportMetric(perMachine, "heap-B/machine")
	b.ReportMetric(float64(stateFile)/float64(clusters), "state-B/cluster")
	b.Logf("%d clusters of 1 control-plane machine + 2 workers: %.1f KiB of live heap each, %.1f KiB once the watch history's %v passed, %.1f KiB per added worker",
		clusters, perCluster/1024, perSettled/1024, store.DefaultEventHistoryTTL, perMachine/1024)
	b.Logf("state file with the idle clusters: %.2f MiB, %.1f KiB per cluster", float64(stateFile)/(1<<20), float64(stateFile)/float64(clusters)/1024)
	b.Logf("per idle cluster, by the package that allocated it:\n%s", idlePkgs.minus(emptyPkgs).top(12, clusters))
	b.Logf("per idle cluster, by the Goofy package it was allocated for:\n%s", idlePkgs.minus(emptyPkgs).topGoofy(10, clusters))
	b.Logf("per settled idle cluster, by the Goofy package it was allocated for:\n%s", settledPkgs.minus(emptyPkgs).topGoofy(10, clusters))
	b.Logf("per added worker, by the Goofy package it was allocated for:\n%s", grownPkgs.minus(settledPkgs).topGoofy(8, clusters))
}

// memoryBenchMux is a mux as the manager runs it (durable state, workloads simulated) for the
// memory benchmarks, its listeners on ports from firstPort, with klog quiet and the heap profile
// sampling one allocation per memProfileRate bytes; stop undoes all of it.
func memoryBenchMux(b *testing.B, clusters, firstPort int) (*WorkloadClustersMux, *storage.DB, func()) {
	klog.SetOutput(io.Discard)
	klog.LogToStderr(false)
	rate := runtime.MemProfileRate
	runtime.MemProfileRate = memProfileRate
	db, err := storage.Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	stores := store.NewManager(store.WithStorage(db), store.WithSimulator(simulate.New(simulate.Options{Workloads: true})))
	m, err := NewWorkloadClustersMux(stores, benchHost, WithListenerAddresses(benchHost), WithPortRange(firstPort, firstPort+clusters+99))
	if err != nil {
		_ = db.Close()
		b.Fatal(err)
	}
	return m, db, func() {
		_ = m.Shutdown(context.Background())
		_ = db.Close()
		runtime.MemProfileRate = rate
		klog.LogToStderr(true)
	}
}

// stateFileBytes is the size of the state file once every write queued so far is on disk.
func stateFileBytes(b *testing.B, db *storage.DB) int64 {
	if err := db.Put("\x01bench-flush", "flush", 0, func() ([]byte, error) { return nil, nil }).Wait(); err != nil {
		b.Fatal(err)
	}
	if err := db.DropBucket("\x01bench-flush").Wait(); err != nil {
		b.Fatal(err)
	}
	fi, err := os.Stat(db.Path())
	if err != nil {
		b.Fatal(err)
	}
	inUse, err := db.InUse()
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("state file: %d bytes, %d of them in pages holding data", fi.Size(), inUse)
	return fi.Size()
}

// waitPodsRunning waits until every pod of every cluster is Running (the add-ons' pods start a
// second after they are bound).
func waitPodsRunning(ctx context.Context, b *testing.B, listeners []*WorkloadClusterListener) {
	for _, l := range listeners {
		c, _ := l.GetClient()
		for {
			var pods corev1.PodList
			if err := c.List(ctx, &pods); err != nil {
				b.Fatal(err)
			}
			running := 0
			for _, p := range pods.Items {
				if p.Status.Phase == corev1.PodRunning {
					running++
				}
			}
			if running == len(pods.Items) && running > 0 {
				break
			}
			select {
			case <-ctx.Done():
				b.Fatalf("%s: %d of %d pods Running when the wait ended", l.name, running, len(pods.Items))
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
}

// heapByPackage is live heap bytes (estimated from the memory profile) by package, two ways.
type heapByPackage struct {
	// allocator: the first package on the stack outside the runtime (and reflect, internal/...).
	allocator map[string]float64
	// goofy: the first Goofy package on the stack, "(none)" when none is.
	goofy map[string]float64
}

const goofyModule = "github.com/goofy-capi/cluster-api-provider-goofy/"

// liveHeap collects garbage and returns the live heap and its breakdown by package.
func liveHeap() (uint64, heapByPackage) {
	// Twice: the first cycle may leave finalizers' objects; MemProfile reports the state as of the
	// last completed cycle.
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	h := heapByPackage{allocator: map[string]float64{}, goofy: map[string]float64{}}
	n, _ := runtime.MemProfile(nil, false)
	records := make([]runtime.MemProfileRecord, n+100)
	n, _ = runtime.MemProfile(records, false)
	for _, r := range records[:n] {
		inUse := r.InUseBytes()
		if inUse <= 0 || r.AllocObjects == 0 {
			continue
		}
		// Unsample as pprof does: an allocation of this average size was recorded with probability
		// 1 - exp(-size/rate).
		size := float64(r.AllocBytes) / float64(r.AllocObjects)
		bytes := float64(inUse) / (1 - math.Exp(-size/float64(memProfileRate)))
		allocator, goofy := "", "(none)"
		frames := runtime.CallersFrames(r.Stack())
		for {
			f, more := frames.Next()
			pkg := packageOf(f.Function)
			if allocator == "" && pkg != "runtime" && pkg != "reflect" && !strings.HasPrefix(pkg, "internal/") {
				allocator = pkg
			}
			if rest, ok := strings.CutPrefix(pkg, goofyModule); ok {
				goofy = rest
				break
			}
			if !more {
				break
			}
		}
		h.allocator[allocator] += bytes
		h.goofy[goofy] += bytes
	}
	return ms.HeapAlloc, h
}

// packageOf returns the package path of a function name such as
// "k8s.io/apimachinery/pkg/runtime.(*Scheme).New" or "encoding/json.Marshal".
func packageOf(function string) string {
	slash := strings.LastIndex(function, "/")
	if dot := strings.Index(function[slash+1:], "."); dot >= 0 {
		return function[:slash+1+dot]
	}
	return function
}

func (h heapByPackage) minus(before heapByPackage) heapByPackage {
	diff := func(a, b map[string]float64) map[string]float64 {
		out := map[string]float64{}
		for k, v := range a {
			if d := v - b[k]; d > 0 {
				out[k] = d
			}
		}
		return out
	}
	return heapByPackage{allocator: diff(h.allocator, before.allocator), goofy: diff(h.goofy, before.goofy)}
}

func (h heapByPackage) top(n, per int) string      { return topOf(h.allocator, n, per) }
func (h heapByPackage) topGoofy(n, per int) string { return topOf(h.goofy, n, per) }

// topOf lists the n largest entries of m divided by per, in KiB, with their share of the total.
func topOf(m map[string]float64, n, per int) string {
	total := 0.0
	keys := make([]string, 0, len(m))
	for k, v := range m {
		keys = append(keys, k)
		total += v
	}
	sort.Slice(keys, func(i, j int) bool { return m[keys[i]] > m[keys[j]] })
	var sb strings.Builder
	for i, k := range keys {
		if i == n {
			break
		}
		fmt.Fprintf(&sb, "    %8.1f KiB  %5.1f%%  %s\n", m[k]/float64(per)/1024, 100*m[k]/total, k)
	}
	fmt.Fprintf(&sb, "    %8.1f KiB  100.0%%  (total sampled)", total/float64(per)/1024)
	return sb.String()
}
