package apiserver

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/simulate"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// kubectl runs the real kubectl binary (from the envtest build) against a test cluster.
type kubectl struct {
	t          *testing.T
	bin        string
	kubeconfig string
	home       string
}

func newKubectl(t *testing.T, env *testEnv) *kubectl {
	t.Helper()
	dir := envtestAssets("kubectl")
	if dir == "" {
		t.Skip("kubectl binary not found (run hack/envtest.sh or set KUBEBUILDER_ASSETS)")
	}
	home := t.TempDir()
	kc := filepath.Join(home, "kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: goofy
  cluster:
    server: %s
contexts:
- name: goofy
  context: {cluster: goofy, user: goofy, namespace: default}
current-context: goofy
users:
- name: goofy
  user: {}
`, env.server.URL)
	if err := os.WriteFile(kc, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return &kubectl{t: t, bin: filepath.Join(dir, "kubectl"), kubeconfig: kc, home: home}
}

func (k *kubectl) cmd(c context.Context, stdin string, args ...string) *exec.Cmd {
	args = append([]string{"--kubeconfig", k.kubeconfig, "--cache-dir", filepath.Join(k.home, "cache")}, args...)
	cmd := exec.CommandContext(c, k.bin, args...)
	cmd.Env = append(os.Environ(), "HOME="+k.home, "KUBECONFIG="+k.kubeconfig)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	return cmd
}

// run executes kubectl and fails the test on a non-zero exit; it returns stdout and stderr.
func (k *kubectl) run(stdin string, args ...string) (string, string) {
	k.t.Helper()
	return k.runExpecting(true, stdin, args...)
}

// runFailing executes kubectl expecting a non-zero exit and returns stdout and stderr.
func (k *kubectl) runFailing(args ...string) (string, string) {
	k.t.Helper()
	return k.runExpecting(false, "", args...)
}

func (k *kubectl) runExpecting(success bool, stdin string, args ...string) (string, string) {
	k.t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := k.cmd(c, stdin, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); (err == nil) != success {
		k.t.Fatalf("kubectl %s: exit error %v, want success=%t\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, success, out.String(), errOut.String())
	}
	return out.String(), errOut.String()
}

const manifests = `apiVersion: v1
kind: Namespace
metadata:
  name: demo
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  namespace: demo
data:
  mode: fast
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: demo
spec:
  replicas: 1
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: nginx:1.27
        ports:
        - containerPort: 80
      - name: sidecar
        image: busybox
---
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: demo
spec:
  selector: {app: web}
  ports:
  - port: 80
    protocol: TCP
`

// TestKubectl drives the everyday kubectl commands against the handler.
func TestKubectl(t *testing.T) {
	g := NewWithT(t)
	env := newTestEnv(t, Options{})
	k := newKubectl(t, env)
	cs := env.clientset(t)
	c := ctx(t)

	out, _ := k.run("", "version", "-o", "json")
	g.Expect(out).To(ContainSubstring(`"gitVersion": "v1.36.3"`))

	out, _ = k.run("", "explain", "deployment.spec.replicas")
	g.Expect(out).To(ContainSubstring("FIELD: replicas <integer>"))

	out, _ = k.run("", "api-resources")
	g.Expect(out).To(MatchRegexp(`(?m)^pods\s+po\s+v1\s+true\s+Pod$`))
	g.Expect(out).To(MatchRegexp(`(?m)^deployments\s+deploy\s+apps/v1\s+true\s+Deployment$`))

	// Client-side apply with kubectl's default (strict) validation, twice: create, then a
	// three-way strategic merge patch computed from our OpenAPI.
	out, errOut := k.run(manifests, "apply", "-f", "-")
	g.Expect(out).To(ContainSubstring("deployment.apps/web created"))
	g.Expect(errOut).NotTo(ContainSubstring("Warning"))
	out, _ = k.run(strings.Replace(manifests, "image: busybox", "image: busybox:1.36", 1), "apply", "-f", "-")
	g.Expect(out).To(ContainSubstring("deployment.apps/web configured"))
	g.Expect(out).To(ContainSubstring("configmap/settings unchanged"))
	dep, err := cs.AppsV1().Deployments("demo").Get(c, "web", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(dep.Spec.Template.Spec.Containers).To(HaveLen(2))
	g.Expect(dep.Spec.Template.Spec.Containers[1].Image).To(Equal("busybox:1.36"))

	// Unknown fields are rejected by server-side validation.
	bad := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: bad, namespace: demo}\ndatta: {a: b}\n"
	cmd := k.cmd(c, bad, "apply", "-f", "-")
	res, err := cmd.CombinedOutput()
	g.Expect(err).To(HaveOccurred())
	g.Expect(string(res)).To(ContainSubstring(`unknown field "datta"`))

	// Server-side apply with a field manager.
	ssa := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ssa, namespace: demo}\ndata: {owner: kubectl}\n"
	out, _ = k.run(ssa, "apply", "--server-side", "-f", "-")
	g.Expect(out).To(ContainSubstring("configmap/ssa serverside-applied"))
	cm, err := cs.CoreV1().ConfigMaps("demo").Get(c, "ssa", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cm.ManagedFields).To(ContainElement(HaveField("Manager", "kubectl")))

	// get -o wide / yaml on nodes.
	createNode(t, env, readyNode("cp-0"))
	out, _ = k.run("", "get", "nodes", "-o", "wide")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	g.Expect(strings.Fields(lines[0])).To(Equal([]string{"NAME", "STATUS", "ROLES", "AGE", "VERSION", "INTERNAL-IP", "EXTERNAL-IP", "OS-IMAGE", "KERNEL-VERSION", "CONTAINER-RUNTIME"}))
	g.Expect(lines[1]).To(MatchRegexp(`^cp-0\s+Ready\s+control-plane\s+\S+\s+v1\.36\.3\s+10\.0\.0\.4\s+<none>\s+Ubuntu 24\.04\s+6\.8\.0\s+containerd://2\.1\.0$`))
	out, _ = k.run("", "get", "nodes")
	g.Expect(strings.Fields(strings.SplitN(out, "\n", 2)[0])).To(Equal([]string{"NAME", "STATUS", "ROLES", "AGE", "VERSION"}))
	out, _ = k.run("", "get", "deploy", "web", "-n", "demo", "-o", "yaml")
	g.Expect(out).To(ContainSubstring("kind: Deployment"))
	g.Expect(out).To(ContainSubstring("image: nginx:1.27"))
	out, _ = k.run("", "get", "svc,cm", "-n", "demo")
	g.Expect(out).To(MatchRegexp(`service/web\s+ClusterIP`))
	g.Expect(out).To(ContainSubstring("80/TCP"))

	// label, annotate, patch of all three kinds, scale.
	k.run("", "label", "cm", "settings", "-n", "demo", "tier=backend")
	k.run("", "annotate", "cm", "settings", "-n", "demo", "note=hello")
	k.run("", "patch", "cm", "settings", "-n", "demo", "--type", "json", "-p", `[{"op":"add","path":"/data/j","value":"1"}]`)
	k.run("", "patch", "cm", "settings", "-n", "demo", "--type", "merge", "-p", `{"data":{"m":"2"}}`)
	k.run("", "patch", "deploy", "web", "-n", "demo", "--type", "strategic", "-p", `{"spec":{"template":{"spec":{"containers":[{"name":"web","image":"nginx:1.28"}]}}}}`)
	cm, err = cs.CoreV1().ConfigMaps("demo").Get(c, "settings", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cm.Labels).To(HaveKeyWithValue("tier", "backend"))
	g.Expect(cm.Annotations).To(HaveKeyWithValue("note", "hello"))
	g.Expect(cm.Data).To(And(HaveKeyWithValue("j", "1"), HaveKeyWithValue("m", "2"), HaveKeyWithValue("mode", "fast")))
	dep, err = cs.AppsV1().Deployments("demo").Get(c, "web", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(dep.Spec.Template.Spec.Containers).To(HaveLen(2), "strategic merge keeps the sidecar")
	g.Expect(dep.Spec.Template.Spec.Containers[0].Image).To(Equal("nginx:1.28"))

	out, _ = k.run("", "scale", "deploy", "web", "-n", "demo", "--replicas=3")
	g.Expect(out).To(ContainSubstring("deployment.apps/web scaled"))
	dep, err = cs.AppsV1().Deployments("demo").Get(c, "web", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(*dep.Spec.Replicas).To(BeEquivalentTo(3))

	// logs.
	_, err = cs.CoreV1().Pods("demo").Create(c, testPod("demo", "solo", "cp-0", nil), metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	out, _ = k.run("", "logs", "solo", "-n", "demo")
	g.Expect(out).To(ContainSubstring(`simulated container "main" of pod demo/solo`))

	// delete.
	out, _ = k.run("", "delete", "cm", "settings", "-n", "demo")
	g.Expect(out).To(ContainSubstring(`configmap "settings" deleted`))
}

// TestKubectlWatchAndWait covers the streaming commands: get -w and wait --for=condition.
func TestKubectlWatchAndWait(t *testing.T) {
	g := NewWithT(t)
	env := newTestEnv(t, Options{})
	k := newKubectl(t, env)
	cs := env.clientset(t)
	c := ctx(t)

	// get -w: the first line is the table header plus existing objects; objects created later
	// stream in as rows. The command is stopped once the expected row arrives.
	_, err := cs.CoreV1().ConfigMaps("default").Create(c, configMap("", "existing", nil), metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	wctx, cancel := context.WithTimeout(c, 60*time.Second)
	defer cancel()
	cmd := k.cmd(wctx, "", "get", "configmaps", "-n", "default", "-w")
	stdout, err := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cmd.Start()).To(Succeed())
	sc := bufio.NewScanner(stdout)
	g.Expect(sc.Scan()).To(BeTrue())
	g.Expect(strings.Fields(sc.Text())).To(Equal([]string{"NAME", "DATA", "AGE"}))
	g.Expect(sc.Scan()).To(BeTrue())
	g.Expect(sc.Text()).To(HavePrefix("existing"))
	_, err = cs.CoreV1().ConfigMaps("default").Create(c, configMap("", "watched", map[string]string{"a": "1", "b": "2"}), metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	var row string
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "watched") {
			row = sc.Text()
			break
		}
	}
	g.Expect(strings.Fields(row)[:2]).To(Equal([]string{"watched", "2"}))
	cancel()
	_ = cmd.Wait()

	// wait --for=condition: satisfied by a status update made while kubectl watches (or already
	// visible to its initial list); either way kubectl must exit 0.
	n := readyNode("w1")
	n.Status.Conditions[0].Status = corev1.ConditionFalse
	createNode(t, env, n)
	wait := k.cmd(c, "", "wait", "--for=condition=Ready", "node/w1", "--timeout=60s")
	var waitOut bytes.Buffer
	wait.Stdout, wait.Stderr = &waitOut, &waitOut
	g.Expect(wait.Start()).To(Succeed())
	node, err := cs.CoreV1().Nodes().Get(c, "w1", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	node.Status.Conditions[0].Status = corev1.ConditionTrue
	_, err = cs.CoreV1().Nodes().UpdateStatus(c, node, metav1.UpdateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(wait.Wait()).To(Succeed(), waitOut.String())
	g.Expect(waitOut.String()).To(ContainSubstring("node/w1 condition met"))
}

// TestKubectlDrain drains a node whose pod is covered by a PodDisruptionBudget: kubectl cordons
// the node, finds the pod by spec.nodeName, evicts it through pods/eviction and waits until it
// is gone.
func TestKubectlDrain(t *testing.T) {
	g := NewWithT(t)
	k, cs, c := kubectlWithNode(t)
	pod := testPod("default", "app-0", "worker-0", map[string]string{"app": "app"})
	pod, err := cs.CoreV1().Pods("default").Create(c, pod, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	pod.Status.Phase = corev1.PodRunning
	_, err = cs.CoreV1().Pods("default").UpdateStatus(c, pod, metav1.UpdateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	pdb, err := cs.PolicyV1().PodDisruptionBudgets("default").Create(c, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "app"},
		Spec:       policyv1.PodDisruptionBudgetSpec{MaxUnavailable: ptr.To(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "app"}}},
	}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	pdb.Status = policyv1.PodDisruptionBudgetStatus{ObservedGeneration: pdb.Generation, DisruptionsAllowed: 1, CurrentHealthy: 1, DesiredHealthy: 0, ExpectedPods: 1}
	_, err = cs.PolicyV1().PodDisruptionBudgets("default").UpdateStatus(c, pdb, metav1.UpdateOptions{})
	g.Expect(err).NotTo(HaveOccurred())

	out, errOut := k.run("", "drain", "worker-0", "--force", "--ignore-daemonsets", "--timeout=60s")
	all := out + errOut
	g.Expect(all).To(ContainSubstring("node/worker-0 cordoned"))
	g.Expect(all).To(ContainSubstring("evicting pod default/app-0"))
	g.Expect(all).To(ContainSubstring("node/worker-0 drained"))

	node, err := cs.CoreV1().Nodes().Get(c, "worker-0", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(node.Spec.Unschedulable).To(BeTrue())
	pods, err := cs.CoreV1().Pods("default").List(c, metav1.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pods.Items).To(BeEmpty())
	pdb, err = cs.PolicyV1().PodDisruptionBudgets("default").Get(c, "app", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pdb.Status.DisruptionsAllowed).To(BeEquivalentTo(0), "the eviction consumed the budget")

	out, _ = k.run("", "delete", "node", "worker-0")
	g.Expect(out).To(ContainSubstring(`node "worker-0" deleted`))
}

// TestKubectlPodDeletion: deleting a pod on a node is graceful (Terminating, then gone), a forced
// delete is immediate, and exec says plainly that nothing runs behind the pod.
func TestKubectlPodDeletion(t *testing.T) {
	g := NewWithT(t)
	// The kubelet confirms a graceful deletion after PodStopDelay: 5 s, so that the pod is still
	// Terminating when a kubectl started after the delete reads it on a loaded machine (the
	// default second was not always enough beside the e2e suite).
	env := newTestEnvSimulated(t, Options{}, store.ClusterOptions{}, simulate.Options{PodStopDelay: 5 * time.Second})
	createNode(t, env, readyNode("worker-0"))
	k, cs, c := newKubectl(t, env), env.clientset(t), ctx(t)
	for _, name := range []string{"graceful", "forced"} {
		_, err := cs.CoreV1().Pods("default").Create(c, testPod("default", name, "worker-0", nil), metav1.CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
	}

	_, errOut := k.runFailing("exec", "graceful", "--", "ls")
	g.Expect(errOut).To(ContainSubstring("exec is not available in a simulated workload cluster"))
	_, errOut = k.runFailing("exec", "missing", "--", "ls")
	g.Expect(errOut).To(ContainSubstring(`pods "missing" not found`))

	out, _ := k.run("", "delete", "pod", "graceful", "--wait=false")
	g.Expect(out).To(ContainSubstring(`pod "graceful" deleted`))
	p, err := cs.CoreV1().Pods("default").Get(c, "graceful", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred(), "a pod on a node terminates gracefully")
	g.Expect(p.DeletionGracePeriodSeconds).To(HaveValue(BeEquivalentTo(30)))
	out, _ = k.run("", "get", "pod", "graceful")
	g.Expect(out).To(ContainSubstring("Terminating"))
	// kubectl delete waits until the simulated kubelet has confirmed.
	out, _ = k.run("", "delete", "pod", "graceful", "--ignore-not-found")
	_, err = cs.CoreV1().Pods("default").Get(c, "graceful", metav1.GetOptions{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "kubectl delete returned %q before the pod was gone: %v", out, err)

	_, errOut = k.run("", "delete", "pod", "forced", "--grace-period=0", "--force")
	g.Expect(errOut).To(ContainSubstring("Immediate deletion does not wait for confirmation"))
	_, err = cs.CoreV1().Pods("default").Get(c, "forced", metav1.GetOptions{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%v", err)
}

// TestKubectlDescribe: describe reads an object together with its related objects (a node's
// pods, lease and events; a pod's events) through field selectors, and must print them.
func TestKubectlDescribe(t *testing.T) {
	g := NewWithT(t)
	k, cs, c := kubectlWithNode(t)
	pod, err := cs.CoreV1().Pods("default").Create(c, testPod("default", "app-0", "worker-0", nil), metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = cs.CoreV1().Events("default").Create(c, &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: "app-0.1", Namespace: "default"},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: "app-0", UID: pod.UID, APIVersion: "v1"},
		Reason:         "Scheduled", Message: "Successfully assigned default/app-0 to worker-0", Type: corev1.EventTypeNormal,
		Source: corev1.EventSource{Component: "default-scheduler"}, Count: 1,
	}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())

	out, errOut := k.run("", "describe", "node", "worker-0")
	g.Expect(errOut).To(BeEmpty())
	g.Expect(out).To(ContainSubstring("Name:               worker-0"))
	g.Expect(out).To(MatchRegexp(`default\s+app-0`), "the node's pods, found by spec.nodeName")

	out, errOut = k.run("", "describe", "pod", "app-0")
	g.Expect(errOut).To(BeEmpty())
	g.Expect(out).To(MatchRegexp(`Node:\s+worker-0`))
	g.Expect(out).To(MatchRegexp(`Normal\s+Scheduled\s+.*default-scheduler\s+Successfully assigned default/app-0 to worker-0`), "the pod's events, found by involvedObject")
}

// kubectlWithNode sets up the tests about pods: a served store, kubectl, a clientset, a context,
// and a Ready node "worker-0".
func kubectlWithNode(t *testing.T) (*kubectl, *kubernetes.Clientset, context.Context) {
	t.Helper()
	env := newTestEnv(t, Options{})
	createNode(t, env, readyNode("worker-0"))
	return newKubectl(t, env), env.clientset(t), ctx(t)
}

// TestKubectlTop: `kubectl top` finds the metrics API through discovery and prints every node
// (a NotReady one, which has no metrics, as <unknown>) and the Running pods.
func TestKubectlTop(t *testing.T) {
	g := NewWithT(t)
	env, _ := newMetricsEnv(t)
	k := newKubectl(t, env)

	out, _ := k.run("", "top", "nodes")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	g.Expect(lines).To(HaveLen(4), out)
	g.Expect(strings.Fields(lines[0])).To(Equal([]string{"NAME", "CPU(cores)", "CPU(%)", "MEMORY(bytes)", "MEMORY(%)"}))
	g.Expect(out).To(MatchRegexp(`(?m)^cp-0\s+\d+m\s+\d+%\s+\d+Mi\s+\d+%\s*$`))
	g.Expect(out).To(MatchRegexp(`(?m)^worker-0\s+\d+m\s+\d+%\s+\d+Mi\s+\d+%\s*$`))
	g.Expect(out).To(MatchRegexp(`(?m)^worker-1\s+<unknown>\s+<unknown>\s+<unknown>\s+<unknown>\s*$`))

	out, _ = k.run("", "top", "pods", "-A")
	lines = strings.Split(strings.TrimSpace(out), "\n")
	g.Expect(lines).To(HaveLen(4), out)
	g.Expect(strings.Fields(lines[0])).To(Equal([]string{"NAMESPACE", "NAME", "CPU(cores)", "MEMORY(bytes)"}))
	for _, p := range []string{`default\s+web-0`, `demo\s+api-0`, `kube-system\s+etcd-cp-0`} {
		g.Expect(out).To(MatchRegexp(`(?m)^`+p+`\s+\d+m\s+\d+Mi\s*$`), p)
	}

	out, _ = k.run("", "top", "pod", "web-0", "--containers")
	g.Expect(out).To(MatchRegexp(`(?m)^web-0\s+web\s+\d+m\s+\d+Mi\s*$`))
	g.Expect(out).To(MatchRegexp(`(?m)^web-0\s+sidecar\s+\d+m\s+\d+Mi\s*$`))
	out, _ = k.run("", "top", "pods", "-n", "demo", "-l", "app=api")
	g.Expect(out).To(MatchRegexp(`(?m)^api-0\s+\d+m\s+\d+Mi\s*$`))
	out, _ = k.run("", "get", "nodes.metrics.k8s.io")
	g.Expect(strings.Fields(strings.SplitN(out, "\n", 2)[0])).To(Equal([]string{"NAME", "CPU", "MEMORY", "WINDOW"}))
	// Both are canonical quantities, as metrics-server's print: the cpu rate in nanocores (u or m
	// when it is a whole number of those, one value in a thousand), the working set in whole pages
	// (Mi when it is a whole number of MiB, one value in 256).
	g.Expect(out).To(MatchRegexp(`(?m)^worker-0\s+\d+[num]?\s+\d+[KMG]i\s+15s\s*$`))

	out, _ = k.run("", "get", "apiservice", "v1beta1.metrics.k8s.io")
	g.Expect(out).To(MatchRegexp(`(?m)^v1beta1\.metrics\.k8s\.io\s+kube-system/metrics-server\s+True\s+\S+\s*$`))
	out, _ = k.run("", "wait", "--for=condition=Available", "apiservice/v1beta1.metrics.k8s.io", "--timeout=10s")
	g.Expect(out).To(ContainSubstring("condition met"))

	_, errOut := k.runFailing("top", "pod", "pending-0", "-n", "demo")
	g.Expect(errOut).To(ContainSubstring(`podmetrics.metrics.k8s.io "demo/pending-0" not found`))
}
