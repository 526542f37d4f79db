package simulate_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/apiserver"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/simulate"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/storage"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/testenv"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/workload"
)

const testVersion = "v1.36.3"

// env is one simulated workload cluster with workloads on, served over plain HTTP on 127.0.0.1.
type env struct {
	t       *testing.T
	manager *store.Manager
	sim     *simulate.Simulator
	cluster *store.Cluster
	client  client.Client // in-process, as Goofy's machine controller writes Nodes
	server  *httptest.Server
	cs      *kubernetes.Clientset
}

// newEnv starts a cluster; db, when set, keeps its state (for restarts).
func newEnv(t *testing.T, db *storage.DB) *env {
	t.Helper()
	return newEnvWith(t, db, simulate.Options{})
}

// newEnvWith starts a cluster with the simulator's options more (workloads and the timings are
// newEnv's).
func newEnvWith(t *testing.T, db *storage.DB, more simulate.Options) *env {
	t.Helper()
	more.Workloads, more.PodStartDelay, more.JobRunTime, more.PodStopDelay = true, 200*time.Millisecond, 300*time.Millisecond, 100*time.Millisecond
	sim := simulate.New(more)
	opts := []store.ManagerOption{store.WithSimulator(sim)}
	if db != nil {
		opts = append(opts, store.WithStorage(db))
	}
	m := store.NewManager(opts...)
	c, err := m.AddCluster("test", store.ClusterOptions{KubernetesVersion: testVersion})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, manager: m, sim: sim, cluster: c, client: c.Client()}
	e.server = httptest.NewServer(apiserver.NewHandler(c, apiserver.Options{}))
	t.Cleanup(e.stop)
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: e.server.URL, QPS: -1, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	e.cs = cs
	return e
}

// newWorkerEnv starts a cluster with kubeadm's objects and one Ready worker, worker-0.
func newWorkerEnv(t *testing.T) *env {
	t.Helper()
	e := newEnv(t, nil)
	e.addKubeadmObjects()
	e.addNode("worker-0", "10.0.0.20", false)
	return e
}

// newDurableWorkerEnv is newWorkerEnv with its state on disk: newEnv(t, db) restarts it.
func newDurableWorkerEnv(t *testing.T) (*env, *storage.DB) {
	t.Helper()
	db, err := storage.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	e := newEnv(t, db)
	e.addKubeadmObjects()
	e.addNode("worker-0", "10.0.0.20", false)
	return e, db
}

// stop ends the cluster's simulators and server, keeping its state on disk (a restart).
func (e *env) stop() {
	if e.server == nil {
		return
	}
	e.server.CloseClientConnections()
	e.server.Close()
	e.server = nil
	if e.manager.Durable() {
		e.manager.Close() // the state stays on disk: a new manager loads it again
		return
	}
	_ = e.manager.DeleteCluster("test")
}

// addNode registers a Ready node as the machine controller does (control-plane nodes keep
// their NoSchedule taint; the uninitialized taint is gone, as CAPI removes it).
func (e *env) addNode(name, ip string, controlPlane bool) {
	e.t.Helper()
	e.addNodeWith(workload.NodeSpec{Name: name, ProviderID: "goofy://" + name, KubeletVersion: testVersion,
		InternalIP: ip, ControlPlane: controlPlane, Ready: true})
}

// addBigNode registers a worker with 8 CPUs.
func (e *env) addBigNode(name, ip string) {
	e.t.Helper()
	capacity := workload.DefaultCapacity()
	capacity[corev1.ResourceCPU] = resource.MustParse("8")
	e.addNodeWith(workload.NodeSpec{Name: name, ProviderID: "goofy://" + name, KubeletVersion: testVersion,
		InternalIP: ip, Capacity: capacity, Ready: true})
}

func (e *env) addNodeWith(spec workload.NodeSpec) {
	e.t.Helper()
	n := workload.Node(spec, metav1.Now())
	var taints []corev1.Taint
	for _, tn := range n.Spec.Taints {
		if tn.Key != workload.UninitializedTaint.Key {
			taints = append(taints, tn)
		}
	}
	n.Spec.Taints = taints
	status := n.Status
	if err := e.client.Create(context.Background(), n); err != nil {
		e.t.Fatal(err)
	}
	// The node IPAM controller may write the node meanwhile: retry on conflicts, as kubelet does.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := e.client.Get(context.Background(), client.ObjectKeyFromObject(n), n); err != nil {
			return err
		}
		n.Status = status
		return e.client.Status().Update(context.Background(), n)
	}); err != nil {
		e.t.Fatal(err)
	}
}

// addKubeadmObjects creates what kubeadm puts in a new cluster (kubeadm-config with the pod
// subnet CAPI's templates use, CoreDNS, kube-proxy, RBAC), as Goofy's machine controller does.
func (e *env) addKubeadmObjects() {
	e.t.Helper()
	for _, obj := range workload.ClusterObjects(workload.ClusterSpec{ClusterName: "test", KubernetesVersion: testVersion,
		ControlPlaneEndpoint: "127.0.0.1:6443", PodSubnet: "192.168.0.0/16"}) {
		if err := e.client.Create(context.Background(), obj); err != nil {
			e.t.Fatal(err)
		}
	}
}

// kubectl runs the real kubectl against the cluster and returns its stdout; it fails the test
// when the exit status is not the one wanted.
func (e *env) kubectl(success bool, stdin string, args ...string) string {
	e.t.Helper()
	bin, ok := testenv.Binary("kubectl")
	if !ok {
		e.t.Skip("kubectl binary not found (run hack/envtest.sh)")
	}
	home := e.t.TempDir()
	kc := filepath.Join(home, "kubeconfig")
	cfg := fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: %s}\ncontexts:\n- name: c\n  context: {cluster: c, user: u, namespace: default}\ncurrent-context: c\nusers:\n- name: u\n  user: {}\n", e.server.URL)
	if err := os.WriteFile(kc, []byte(cfg), 0o600); err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"--kubeconfig", kc, "--cache-dir", filepath.Join(home, "cache")}, args...)...)
	cmd.Env = append(os.Environ(), "HOME="+home)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	start := time.Now()
	defer func() { e.t.Logf("kubectl %s: %s", strings.Join(args, " "), time.Since(start)) }()
	if err := cmd.Run(); (err == nil) != success {
		e.t.Fatalf("kubectl %s: %v (want success=%t)\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, success, out.String(), errOut.String())
	}
	if !success {
		return out.String() + errOut.String() // what it was refused with
	}
	return out.String()
}
