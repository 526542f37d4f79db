package portforward_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/etcd"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/etcd/etcdtest"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/portforward"
)

// envtestBinary finds a binary that hack/envtest.sh builds, or skips.
func envtestBinary(t *testing.T, name string) string {
	t.Helper()
	dirs := []string{os.Getenv("KUBEBUILDER_ASSETS")}
	if cache, err := os.UserCacheDir(); err == nil {
		dirs = append(dirs, filepath.Join(cache, "goofy", "envtest", "k8s-v1.36.3-etcd-v3.6.14"))
	}
	for _, d := range dirs {
		if d == "" {
			continue
		}
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p
		}
	}
	t.Skipf("%s not found in KUBEBUILDER_ASSETS or the envtest cache; run hack/envtest.sh", name)
	return ""
}

// serveKubectlBasics adds what kubectl port-forward reads before it forwards:
// discovery (to map pod/<name>) and the pod itself (it must be Running).
func serveKubectlBasics(e *env, mux *http.ServeMux) {
	writeJSON := func(w http.ResponseWriter, v any) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(v)
	}
	mux.HandleFunc("GET /api", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, &metav1.APIVersions{TypeMeta: metav1.TypeMeta{Kind: "APIVersions"}, Versions: []string{"v1"},
			ServerAddressByClientCIDRs: []metav1.ServerAddressByClientCIDR{{ClientCIDR: "0.0.0.0/0", ServerAddress: "127.0.0.1"}}})
	})
	mux.HandleFunc("GET /apis", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, &metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}})
	})
	mux.HandleFunc("GET /api/v1", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, &metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: "v1",
			APIResources: []metav1.APIResource{
				{Name: "pods", SingularName: "pod", Namespaced: true, Kind: "Pod", Verbs: []string{"get", "list"}, ShortNames: []string{"po"}},
				{Name: "pods/portforward", Namespaced: true, Kind: "PodPortForwardOptions", Verbs: []string{"create", "get"}},
			}})
	})
	mux.HandleFunc("GET /api/v1/namespaces/{namespace}/pods/{name}", func(w http.ResponseWriter, r *http.Request) {
		p, ok := e.pod(r.PathValue("namespace"), r.PathValue("name"))
		if !ok {
			http.NotFound(w, r)
			return
		}
		writeJSON(w, &corev1.Pod{
			TypeMeta:   metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
			ObjectMeta: metav1.ObjectMeta{Namespace: r.PathValue("namespace"), Name: r.PathValue("name")},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "etcd", Image: "etcd"}}},
			Status:     corev1.PodStatus{Phase: p.phase},
		})
	})
}

// kubectlPortForward runs `kubectl port-forward pod/<pod> :<port>` until the
// test ends and returns the local address it listens on.
func kubectlPortForward(t *testing.T, kubectl, kubeconfig, pod string, port int32) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, kubectl, "--kubeconfig", kubeconfig, "-n", "kube-system",
		"port-forward", "--address", "127.0.0.1", "pod/"+pod, fmt.Sprintf(":%d", port))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
	})
	forwarding := regexp.MustCompile(`Forwarding from (127\.0\.0\.1:\d+) ->`)
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := forwarding.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
				break
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
		close(found)
	}()
	select {
	case addr, ok := <-found:
		if !ok {
			t.Fatalf("kubectl port-forward exited: %s", stderr.String())
		}
		return addr
	case <-time.After(30 * time.Second):
		t.Fatalf("kubectl port-forward did not start: %s", stderr.String())
	}
	return ""
}

// The end-to-end path: kubectl port-forward to pod etcd-<node>, then
// the real etcdctl through the forwarded ports.
func TestKubectlPortForwardWithEtcdctl(t *testing.T) {
	kubectl := envtestBinary(t, "kubectl")
	etcdctl := envtestBinary(t, "etcdctl")
	g := NewWithT(t)

	srv, err := etcd.NewServer(t.Context(), fake.NewClientBuilder().Build(), wl)
	g.Expect(err).NotTo(HaveOccurred())
	pki := etcdtest.NewPKI(t)

	// The handler is mounted on a server that also answers kubectl's reads.
	e := &env{t: t, pods: map[string]pod{}}
	h, err := portforward.NewHandler(portforward.Options{FindPod: e.findPod, Lookup: e.lookup, Dial: e.dial})
	g.Expect(err).NotTo(HaveOccurred())
	mux := http.NewServeMux()
	mux.Handle("/api/v1/namespaces/{namespace}/pods/{name}/portforward", h)
	serveKubectlBasics(e, mux)
	e.start(h, mux)

	// Each member on a listener of its own: the connection names the member,
	// as the mux's routing does for a forwarded connection.
	for _, p := range []string{"etcd-a", "etcd-b"} {
		_, err := srv.AddMember(t.Context(), p)
		g.Expect(err).NotTo(HaveOccurred())
		e.addPod("kube-system", p, corev1.PodRunning, map[int32]string{2379: etcdtest.ServeMember(t, srv, pki, p)})
	}
	e.addPod("kube-system", "etcd-pending", corev1.PodPending, nil)

	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	g.Expect(clientcmd.WriteToFile(clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"wl": {Server: e.config.Host, CertificateAuthorityData: e.config.CAData}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{"admin": {Token: "unused"}}, // empty credentials make kubectl prompt
		Contexts:       map[string]*clientcmdapi.Context{"wl": {Cluster: "wl", AuthInfo: "admin"}},
		CurrentContext: "wl",
	}, kubeconfig)).To(Succeed())

	before := forwarded("websocket")
	a := kubectlPortForward(t, kubectl, kubeconfig, "etcd-a", 2379)
	b := kubectlPortForward(t, kubectl, kubeconfig, "etcd-b", 2379)
	endpoints := "https://" + a + ",https://" + b

	ca, cert, key := pki.WriteClientFiles(t, t.TempDir())
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.CommandContext(t.Context(), etcdctl, append([]string{
			"--endpoints=" + endpoints, "--cacert=" + ca, "--cert=" + cert, "--key=" + key,
			"--dial-timeout=10s", "--command-timeout=20s",
		}, args...)...).CombinedOutput()
		g.Expect(err).NotTo(HaveOccurred(), "etcdctl %v: %s", args, out)
		return string(out)
	}
	g.Expect(run("member", "list")).To(And(ContainSubstring(", a, https://a:2380"), ContainSubstring(", b, https://b:2380")))
	g.Expect(run("endpoint", "health")).To(ContainSubstring("is healthy"))
	g.Expect(run("endpoint", "status")).To(ContainSubstring("3.6."))
	g.Expect(run("move-leader", fmt.Sprintf("%x", etcd.MemberIDFor(wl, "b")))).To(ContainSubstring("Leadership transferred"))
	g.Expect(srv.Leader()).To(Equal("etcd-b"))
	g.Expect(forwarded("websocket")-before).To(BeNumerically(">", 0), "kubectl tunnels through a WebSocket")

	// kubectl itself refuses a pod that is not running.
	out, err := exec.CommandContext(t.Context(), kubectl, "--kubeconfig", kubeconfig, "-n", "kube-system",
		"port-forward", "pod/etcd-pending", ":2379").CombinedOutput()
	g.Expect(err).To(HaveOccurred())
	g.Expect(string(out)).To(ContainSubstring("not running"))
}
