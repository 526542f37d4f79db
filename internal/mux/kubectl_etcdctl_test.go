package mux

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/cluster-api/util/kubeconfig"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/testenv"
)

// TestKubectlPortForwardAndEtcdctl is the operator's path: `kubectl port-forward pod/etcd-<node>`
// with a kubeconfig built as CAPI builds it, then the real etcdctl through the forwarded port.
// etcdctl's TLS server name is then "127.0.0.1", so the mux must know from the tunnel which member
// the connection is for.
func TestKubectlPortForwardAndEtcdctl(t *testing.T) {
	kubectl, ok1 := testenv.Binary("kubectl")
	etcdctl, ok2 := testenv.Binary("etcdctl")
	if !ok1 || !ok2 {
		t.Skipf("kubectl/etcdctl not built (run 'make envtest'); looked in %s", testenv.AssetsDir())
	}
	g := NewWithT(t)
	m := newTestMux(t)
	cc := newClusterCerts(t)
	const wcl = "ns/ctl"
	l, err := m.InitWorkloadClusterListener(wcl)
	g.Expect(err).NotTo(HaveOccurred())
	for _, n := range []string{"n0", "n1"} {
		runningPod(t, l, "etcd-"+n)
		g.Expect(m.AddEtcdMember(wcl, "etcd-"+n, cc.etcdCA, cc.etcdCAKey)).To(Succeed())
	}
	g.Expect(m.AddAPIServer(wcl, "kube-apiserver-n0", cc.ca, cc.caKey)).To(Succeed())

	dir := t.TempDir()
	cfg, err := kubeconfig.New("ctl", l.Address(), cc.ca, cc.caKey)
	g.Expect(err).NotTo(HaveOccurred())
	kc := filepath.Join(dir, "kubeconfig")
	g.Expect(clientcmd.WriteToFile(*cfg, kc)).To(Succeed())
	certPEM, keyPEM := clientCertFrom(t, cc.etcdCA, cc.etcdCAKey, "kube-etcd-healthcheck-client")
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		g.Expect(os.WriteFile(p, data, 0o600)).To(Succeed())
		return p
	}
	caFile, certFile, keyFile := write("ca.crt", pemCert(cc.etcdCA)), write("client.crt", certPEM), write("client.key", keyPEM)

	addr := portForward(t, kubectl, kc, "etcd-n0", 2379)
	run := func(args ...string) string {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, etcdctl, append([]string{"--endpoints", "https://" + addr,
			"--cacert", caFile, "--cert", certFile, "--key", keyFile, "--dial-timeout", "10s"}, args...)...).CombinedOutput()
		g.Expect(err).NotTo(HaveOccurred(), "etcdctl %v: %s", args, out)
		return string(out)
	}

	out := run("member", "list", "-w", "simple")
	g.Expect(out).To(ContainSubstring("n0"))
	g.Expect(out).To(ContainSubstring("n1"))
	g.Expect(run("endpoint", "health")).To(ContainSubstring("is healthy"))
	status := run("endpoint", "status", "-w", "simple")
	g.Expect(status).To(ContainSubstring("3.6")) // etcd version column

	// n0 leads (first member): move leadership to n1 and see it in the status.
	var n1ID string
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, ", n1,") {
			n1ID = strings.TrimSpace(strings.SplitN(line, ",", 2)[0])
		}
	}
	g.Expect(n1ID).NotTo(BeEmpty(), out)
	g.Expect(run("move-leader", n1ID)).To(ContainSubstring("Leadership transferred"))
	status = run("endpoint", "status", "-w", "json")
	g.Expect(status).To(ContainSubstring(`"leader":`))
	g.Expect(status).NotTo(ContainSubstring(`"is_leader":true`)) // n0 answers, and no longer leads
}

// portForward runs `kubectl port-forward pod/<pod> :<port>` for the test's lifetime and returns
// the local address.
func portForward(t *testing.T, kubectl, kubeconfigPath, pod string, port int) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, kubectl, "--kubeconfig", kubeconfigPath, "-n", "kube-system",
		"port-forward", "--address", "127.0.0.1", "pod/"+pod, ":"+strconv.Itoa(port))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = cmd.Wait() })
	re := regexp.MustCompile(`Forwarding from (127\.0\.0\.1:\d+) ->`)
	found := make(chan string, 1)
	go func() {
		defer close(found)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
				break
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
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
