package apiserver

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/simulate"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

const testVersion = "v1.36.3"

// testEnv is one workload cluster served over plain HTTP on 127.0.0.1.
type testEnv struct {
	cluster *store.Cluster
	server  *httptest.Server
	cfg     *rest.Config
	// requests records "METHOD path?query" of every request, for tests that prove which
	// protocol path a client took.
	mu       sync.Mutex
	requests []string
}

func newTestEnv(t testing.TB, opts Options) *testEnv {
	t.Helper()
	return newTestEnvWith(t, opts, store.ClusterOptions{})
}

func newTestEnvWith(t testing.TB, opts Options, copts store.ClusterOptions) *testEnv {
	t.Helper()
	// The components that run in every cluster (workloads off): pods' graceful deletion is
	// confirmed, namespaces finish, dependents are collected.
	return newTestEnvSimulated(t, opts, copts, simulate.Options{})
}

// newTestEnvSimulated serves a cluster whose simulator has the given options (Workloads on runs
// the scheduler, kubelets and workload controllers).
func newTestEnvSimulated(t testing.TB, opts Options, copts store.ClusterOptions, sim simulate.Options) *testEnv {
	t.Helper()
	m := store.NewManager(store.WithSimulator(simulate.New(sim)))
	copts.KubernetesVersion = testVersion
	c, err := m.AddCluster("test", copts)
	if err != nil {
		t.Fatalf("AddCluster: %v", err)
	}
	env := &testEnv{cluster: c}
	h := NewHandler(c, opts)
	if _, isBench := t.(*testing.B); isBench {
		env.server = httptest.NewServer(h) // measure the handler alone
	} else {
		env.server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			env.mu.Lock()
			env.requests = append(env.requests, r.Method+" "+r.URL.RequestURI())
			env.mu.Unlock()
			h.ServeHTTP(w, r)
		}))
	}
	t.Cleanup(func() {
		env.server.CloseClientConnections()
		env.server.Close()
		m.DeleteCluster("test")
	})
	env.cfg = &rest.Config{Host: env.server.URL, QPS: -1, Timeout: 30 * time.Second}
	return env
}

func (e *testEnv) requestLog() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.requests...)
}

func (e *testEnv) clientset(t testing.TB) *kubernetes.Clientset {
	t.Helper()
	cs, err := kubernetes.NewForConfig(e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// clientsetSpeaking is a clientset that talks JSON, or protobuf when proto is true.
func (e *testEnv) clientsetSpeaking(t testing.TB, proto bool) *kubernetes.Clientset {
	t.Helper()
	cfg := e.cfg
	if proto {
		cfg = e.protobufConfig()
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// protobufConfig asks for protobuf like controllers using client-go's recommended settings.
func (e *testEnv) protobufConfig() *rest.Config {
	cfg := rest.CopyConfig(e.cfg)
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	return cfg
}

// do sends a raw request and returns status, headers and body.
func (e *testEnv) do(t testing.TB, method, path, contentType, accept string, body string) (int, http.Header, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, e.server.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := e.server.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, string(data)
}

// envtestAssets finds the envtest binaries directory (KUBEBUILDER_ASSETS, else the cache dir
// hack/envtest.sh builds into); "" when the named binary is absent.
func envtestAssets(binary string) string {
	dirs := []string{os.Getenv("KUBEBUILDER_ASSETS")}
	if cache, err := os.UserCacheDir(); err == nil {
		dirs = append(dirs, filepath.Join(cache, "goofy", "envtest", "k8s-v1.36.3-etcd-v3.6.14"))
	}
	if home, err := os.UserHomeDir(); err == nil {
		dirs = append(dirs, filepath.Join(home, ".cache", "goofy", "envtest", "k8s-v1.36.3-etcd-v3.6.14"))
	}
	for _, d := range dirs {
		if d == "" {
			continue
		}
		if st, err := os.Stat(filepath.Join(d, binary)); err == nil && !st.IsDir() {
			return d
		}
	}
	return ""
}

func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}

var _ = NewWithT
