package benchapi

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestSeedRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "seed.json")
	if err := WriteSeed(path, Seed(metav1.Now())); err != nil {
		t.Fatal(err)
	}
	objs, err := ReadSeed(path)
	if err != nil {
		t.Fatal(err)
	}
	var nodes, pods, watched int
	for _, o := range objs {
		switch x := o.(type) {
		case *corev1.Node:
			nodes++
		case *corev1.Pod:
			if x.Namespace == PodNamespace && x.Status.Phase == corev1.PodRunning {
				pods++
			}
		case *corev1.ConfigMap:
			if x.Namespace == WatchNamespace {
				watched++
			}
		}
	}
	if nodes != ControlPlanes+Workers || pods != seededPods || watched != WatchObjects {
		t.Errorf("seed has %d nodes, %d running pods in %s, %d watched ConfigMaps; want %d, %d, %d",
			nodes, pods, PodNamespace, watched, ControlPlanes+Workers, seededPods, WatchObjects)
	}
}

// TestOperations runs every operation briefly against a Goofy side in this process and, when
// capdserver is built, against the CAPD side: each answers as the benchmark expects, and every
// result counts what it says.
func TestOperations(t *testing.T) {
	seed := Seed(metav1.Now())
	g, err := StartGoofy(freePort(t), t.TempDir(), seed, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = g.Close() }()
	kubeconfig := filepath.Join(t.TempDir(), "goofy.kubeconfig")
	if err := WriteKubeconfig(kubeconfig, g.Kubeconfig); err != nil {
		t.Fatal(err)
	}
	t.Run(SideGoofy, func(t *testing.T) {
		checkOperations(t, kubeconfig, func(context.Context) (Stats, error) { return SelfStats(), nil })
	})
	t.Run(SideCAPD, func(t *testing.T) {
		bin := capdServer(t)
		dir := t.TempDir()
		seedPath, kubeconfig := filepath.Join(dir, "seed.json"), filepath.Join(dir, "capd.kubeconfig")
		if err := WriteSeed(seedPath, seed); err != nil {
			t.Fatal(err)
		}
		stats := "127.0.0.1:" + strconv.Itoa(freePort(t))
		s, err := StartServer(context.Background(), bin, []string{"-port", strconv.Itoa(freePort(t)),
			"-debug-port", strconv.Itoa(freePort(t)), "-stats", stats, "-apiserver-pod", APIServerPod(),
			"-seed", seedPath, "-kubeconfig-out", kubeconfig}, filepath.Join(dir, "capd.log"), kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Stop()
		checkOperations(t, kubeconfig, func(ctx context.Context) (Stats, error) { return FetchStats(ctx, stats, s.Pid()) })
	})
}

func checkOperations(t *testing.T, kubeconfig string, probe Probe) {
	config, err := RESTConfig(kubeconfig, false)
	if err != nil {
		t.Fatal(err)
	}
	p := Params{Warmup: 50 * time.Millisecond, Duration: 300 * time.Millisecond, Rounds: 2, Drain: 10 * time.Second, Writers: 2}
	for _, op := range append(append([]Op(nil), RequestOps...), Op{Name: WatchOp}) {
		r, err := Measure(context.Background(), config, op, 2, p, probe)
		if err != nil {
			t.Errorf("%s: %v", op.Name, err)
			continue
		}
		if r.Count == 0 || r.Errors != 0 || r.FirstError != "" || r.Rate <= 0 || r.Server.MemStats.Mallocs == 0 {
			t.Errorf("%s: %d answered, %d errors (%s), %.0f/s, server allocations %d", op.Name, r.Count, r.Errors, r.FirstError, r.Rate, r.Server.MemStats.Mallocs)
		}
	}
}

// capdServer returns the binary build-capdserver.sh leaves in the cache, if it was built from this
// checkout's source; else the CAPD half of the test is skipped.
func capdServer(t *testing.T) string {
	cache := os.Getenv("GOOFY_CACHE_DIR")
	if cache == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			t.Skip(err)
		}
		cache = filepath.Join(base, "goofy")
	}
	pkg := filepath.Join(cache, "capd", "capdserver-v1.14.2", "benchapi-capdserver")
	built, err1 := os.ReadFile(filepath.Join(pkg, "main.go"))
	src, err2 := os.ReadFile(filepath.Join("capdserver", "main.go"))
	if _, err := os.Stat(filepath.Join(pkg, "capdserver")); err != nil || err1 != nil || err2 != nil || !bytes.Equal(built, src) {
		t.Skipf("the CAPD side is not built from this source in %s: run test/benchapi/build-capdserver.sh (about 3 minutes the first time)", pkg)
	}
	return filepath.Join(pkg, "capdserver")
}

// freePort returns a free port of the benchmark's range 9100-9199, from its top (make bench-api
// uses 9101-9113).
func freePort(t *testing.T) int {
	for p := 9199; p >= 9120; p-- {
		if ln, err := net.Listen("tcp", ":"+strconv.Itoa(p)); err == nil {
			_ = ln.Close()
			if !taken[p] {
				taken[p] = true
				return p
			}
		}
	}
	t.Fatal("no free port in 9120-9199")
	return 0
}

// taken are the ports freePort handed out in this process.
var taken = map[int]bool{}
