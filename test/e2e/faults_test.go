package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/goofy-capi/cluster-api-provider-goofy/api/v1alpha1"
	"github.com/goofy-capi/cluster-api-provider-goofy/test/e2e/harness"
)

// Fault injection (docs/faults.md) proven by CAPI's own reactions. The scenarios share the quick
// start cluster "qs" (3 control-plane machines, 2 workers; TestQuickStart reuses it) and leave it
// healthy, without faults. GOOFY_E2E_FAULTS_SLOW=1 adds the slower ones: cluster creation with
// 200 ms of API latency against none, and KCP remediating a machine with an unhealthy etcd member.

var qsVars = func() map[string]string {
	return map[string]string{"CONTROL_PLANE_MACHINE_COUNT": "3", "WORKER_MACHINE_COUNT": "2"}
}

func slowFaults(t *testing.T) {
	inOrder(t) // before the skip: the scenarios after this one wait for it to end
	if os.Getenv("GOOFY_E2E_FAULTS_SLOW") != "1" {
		t.Skip("slow fault scenario: set GOOFY_E2E_FAULTS_SLOW=1")
	}
}

func clusterCondition(s harness.ClusterStatus, typ string) *metav1.Condition {
	for i := range s.Cluster.Status.Conditions {
		if s.Cluster.Status.Conditions[i].Type == typ {
			return &s.Cluster.Status.Conditions[i]
		}
	}
	return nil
}

func kcpCondition(s harness.ClusterStatus, typ string) *metav1.Condition {
	if s.KCP == nil {
		return nil
	}
	for i := range s.KCP.Status.Conditions {
		if s.KCP.Status.Conditions[i].Type == typ {
			return &s.KCP.Status.Conditions[i]
		}
	}
	return nil
}

func conditionIs(c *metav1.Condition, status metav1.ConditionStatus) bool {
	return c != nil && c.Status == status
}

// setClusterFaults patches the GoofyCluster's spec.simulation (nil removes it).
func setClusterFaults(ctx context.Context, g Gomega, name string, sim *infrav1.ClusterSimulation) {
	gc := &infrav1.GoofyCluster{}
	g.Expect(plane.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, gc)).To(Succeed())
	patch := client.MergeFrom(gc.DeepCopy())
	gc.Spec.Simulation = sim
	g.Expect(plane.Client.Patch(ctx, gc, patch)).To(Succeed())
}

// setMachineFaults patches the spec.simulation of the Machine's GoofyMachine.
func setMachineFaults(ctx context.Context, g Gomega, m *clusterv1.Machine, sim *infrav1.MachineSimulation) {
	gm := &infrav1.GoofyMachine{}
	g.Expect(plane.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: m.Spec.InfrastructureRef.Name}, gm)).To(Succeed())
	patch := client.MergeFrom(gm.DeepCopy())
	gm.Spec.Simulation = sim
	g.Expect(plane.Client.Patch(ctx, gm, patch)).To(Succeed())
}

func machineUIDs(s harness.ClusterStatus) map[types.UID]string {
	out := map[types.UID]string{}
	for _, m := range s.Machines {
		out[m.UID] = m.Name
	}
	return out
}

// noneReplaced: every machine of before is still there and not being deleted.
func noneReplaced(before map[types.UID]string) func(harness.ClusterStatus) bool {
	return func(s harness.ClusterStatus) bool {
		for uid := range before {
			if !slices.ContainsFunc(s.Machines, func(m clusterv1.Machine) bool { return m.UID == uid && m.DeletionTimestamp == nil }) {
				return false
			}
		}
		return true
	}
}

func replacedMachine(uid types.UID) func(harness.ClusterStatus) bool {
	return func(s harness.ClusterStatus) bool {
		return !slices.ContainsFunc(s.Machines, func(m clusterv1.Machine) bool { return m.UID == uid })
	}
}

func scaleWorkers(ctx context.Context, g Gomega, s harness.ClusterStatus, replicas int32) {
	g.Expect(s.MachineDeployments).To(HaveLen(1))
	md := s.MachineDeployments[0].DeepCopy()
	patch := client.MergeFrom(md.DeepCopy())
	md.Spec.Replicas = ptr.To(replicas)
	g.Expect(plane.Client.Patch(ctx, md, patch)).To(Succeed())
}

// nudgeKCP makes KCP reconcile now: it reads the workload cluster's pods only when it reconciles,
// and nothing it watches changes when a pod turns not ready (KCP's own comment: it waits for a full
// resync, 10 minutes by default, unless ControlPlaneComponentsHealthy is already False).
func nudgeKCP(ctx context.Context, g Gomega, s harness.ClusterStatus) {
	kcp := s.KCP.DeepCopy()
	patch := client.MergeFrom(kcp.DeepCopy())
	if kcp.Annotations == nil {
		kcp.Annotations = map[string]string{}
	}
	kcp.Annotations["e2e.goofy.dev/nudge"] = time.Now().Format(time.RFC3339Nano)
	g.Expect(plane.Client.Patch(ctx, kcp, patch)).To(Succeed())
}

func healthyQS(ctx context.Context, t *testing.T, g Gomega) harness.ClusterStatus {
	ensureCluster(ctx, t, g, "qs", qsVars())
	return waitFor(ctx, t, g, "qs", 5*time.Minute, "a healthy control plane and 2 workers",
		all(harness.Available, controlPlaneHealthy(3), workersRunning(2)))
}

// unreachable: CAPI's Cluster reports the remote connection probe failing, no Machine is replaced
// and KCP changes nothing; a MachineDeployment scaled meanwhile catches up once the cluster answers
// again, with every machine of before still there.
func TestFaultUnreachable(t *testing.T) {
	ctx, g := begin(t, 15*time.Minute)
	s := healthyQS(ctx, t, g)
	before := machineUIDs(s)

	start := time.Now()
	t.Cleanup(func() { setClusterFaults(context.Background(), NewWithT(t), "qs", nil) })
	setClusterFaults(ctx, g, "qs", &infrav1.ClusterSimulation{Unreachable: true})
	g.Eventually(func() error { return dial(s.Cluster.Spec.ControlPlaneEndpoint) }, 10*time.Second).ShouldNot(Succeed(), "the endpoint still accepts connections")
	s = waitFor(ctx, t, g, "qs", 3*time.Minute, "RemoteConnectionProbe False", func(s harness.ClusterStatus) bool {
		return conditionIs(clusterCondition(s, clusterv1.ClusterRemoteConnectionProbeCondition), metav1.ConditionFalse)
	})
	t.Logf("RemoteConnectionProbe False %.0fs after the cluster became unreachable: %s", time.Since(start).Seconds(),
		clusterCondition(s, clusterv1.ClusterRemoteConnectionProbeCondition).Message)
	gc := &infrav1.GoofyCluster{}
	g.Expect(plane.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "qs"}, gc)).To(Succeed())
	g.Expect(gc.Status.Conditions).To(ContainElement(And(HaveField("Type", infrav1.FaultsInjectedCondition),
		HaveField("Status", metav1.ConditionTrue), HaveField("Message", "unreachable"))))

	// Scale the workers while nobody can reach the cluster, and give CAPI time to act wrongly.
	scaleWorkers(ctx, g, s, 3)
	time.Sleep(20 * time.Second)
	s, err := plane.GetClusterStatus(ctx, ns, "qs")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(noneReplaced(before)(s)).To(BeTrue(), "a machine was deleted while the cluster was unreachable")
	g.Expect(ptr.Deref(s.KCP.Spec.Replicas, 0)).To(Equal(int32(3)))
	g.Expect(ptr.Deref(s.KCP.Status.Replicas, 0)).To(Equal(int32(3)), "KCP changed the control plane of an unreachable cluster")

	recovered := time.Now()
	setClusterFaults(ctx, g, "qs", nil)
	waitFor(ctx, t, g, "qs", 5*time.Minute, "reachable, Available, 3 workers, no machine replaced",
		all(func(s harness.ClusterStatus) bool {
			return conditionIs(clusterCondition(s, clusterv1.ClusterRemoteConnectionProbeCondition), metav1.ConditionTrue)
		}, harness.Available, controlPlaneHealthy(3), workersRunning(3), noneReplaced(before)))
	t.Logf("healthy with the scaled MachineDeployment %.0fs after the fault was removed", time.Since(recovered).Seconds())

	s, err = plane.GetClusterStatus(ctx, ns, "qs")
	g.Expect(err).NotTo(HaveOccurred())
	scaleWorkers(ctx, g, s, 2)
	waitFor(ctx, t, g, "qs", 3*time.Minute, "back to 2 workers", all(harness.Available, workersRunning(2)))
}

// etcdMemberUnhealthy on one of three control-plane machines: its etcd member fails KCP's calls and
// its etcd pod is not ready; KCP reports it on that Machine and in ControlPlaneComponentsHealthy,
// naming the machine, at its next reconcile (nudged: see nudgeKCP). Removing the fault makes the
// control plane healthy again.
func TestFaultEtcdMemberUnhealthy(t *testing.T) {
	ctx, g := begin(t, 10*time.Minute)
	s := healthyQS(ctx, t, g)
	before := machineUIDs(s)
	var victim *clusterv1.Machine
	for i, m := range s.Machines {
		if _, cp := m.Labels[clusterv1.MachineControlPlaneLabel]; cp {
			victim = &s.Machines[i]
			break
		}
	}
	g.Expect(victim).NotTo(BeNil())

	start := time.Now()
	t.Cleanup(func() { setMachineFaults(context.Background(), NewWithT(t), victim, nil) })
	setMachineFaults(ctx, g, victim, &infrav1.MachineSimulation{EtcdMemberUnhealthy: true})
	gm := &infrav1.GoofyMachine{}
	g.Eventually(func() []metav1.Condition {
		_ = plane.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: victim.Spec.InfrastructureRef.Name}, gm)
		return gm.Status.Conditions
	}, 30*time.Second).Should(ContainElement(And(HaveField("Type", infrav1.FaultsInjectedCondition), HaveField("Status", metav1.ConditionTrue))))
	nudgeKCP(ctx, g, s)
	s = waitFor(ctx, t, g, "qs", 3*time.Minute, "KCP to report the etcd member of "+victim.Name, func(s harness.ClusterStatus) bool {
		c := kcpCondition(s, controlplanev1.KubeadmControlPlaneControlPlaneComponentsHealthyCondition)
		return conditionIs(c, metav1.ConditionFalse) && strings.Contains(c.Message, victim.Name)
	})
	t.Logf("KCP reported it %.0fs after the fault was set: ControlPlaneComponentsHealthy: %s", time.Since(start).Seconds(),
		kcpCondition(s, controlplanev1.KubeadmControlPlaneControlPlaneComponentsHealthyCondition).Message)
	if c := kcpCondition(s, controlplanev1.KubeadmControlPlaneEtcdClusterHealthyCondition); c != nil {
		t.Logf("EtcdClusterHealthy=%s (%s): %s", c.Status, c.Reason, c.Message)
	}
	m := &clusterv1.Machine{}
	g.Expect(plane.Client.Get(ctx, client.ObjectKeyFromObject(victim), m)).To(Succeed())
	g.Expect(m.Status.Conditions).To(ContainElement(And(HaveField("Type", controlplanev1.KubeadmControlPlaneMachineEtcdPodHealthyCondition),
		HaveField("Status", metav1.ConditionFalse))))

	setMachineFaults(ctx, g, victim, nil)
	waitFor(ctx, t, g, "qs", 3*time.Minute, "a healthy control plane again, no machine replaced",
		all(harness.Available, controlPlaneHealthy(3), noneReplaced(before)))
}

// etcdMemberUnhealthy with a MachineHealthCheck on the control plane's EtcdPodHealthy: KCP
// remediates the machine (deletes it and creates a new one) and the control plane is healthy again.
func TestFaultEtcdMemberRemediation(t *testing.T) {
	slowFaults(t)
	ctx, g := begin(t, 12*time.Minute)
	s := healthyQS(ctx, t, g)
	var victim *clusterv1.Machine
	for i, m := range s.Machines {
		if _, cp := m.Labels[clusterv1.MachineControlPlaneLabel]; cp {
			victim = &s.Machines[i]
		}
	}
	g.Expect(victim).NotTo(BeNil())
	mhc := &clusterv1.MachineHealthCheck{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "qs-control-plane-etcd"},
		Spec: clusterv1.MachineHealthCheckSpec{
			ClusterName: "qs",
			Selector: metav1.LabelSelector{MatchLabels: map[string]string{
				clusterv1.ClusterNameLabel: "qs", clusterv1.MachineControlPlaneLabel: ""}},
			Checks: clusterv1.MachineHealthCheckChecks{
				UnhealthyMachineConditions: []clusterv1.UnhealthyMachineCondition{{
					Type: controlplanev1.KubeadmControlPlaneMachineEtcdPodHealthyCondition, Status: metav1.ConditionFalse, TimeoutSeconds: ptr.To(int32(10)),
				}},
			},
		},
	}
	g.Expect(plane.Client.Create(ctx, mhc)).To(Succeed())
	t.Cleanup(func() { _ = plane.Client.Delete(context.Background(), mhc) })
	start := time.Now()
	setMachineFaults(ctx, g, victim, &infrav1.MachineSimulation{EtcdMemberUnhealthy: true})
	gm := &infrav1.GoofyMachine{}
	g.Eventually(func() []metav1.Condition {
		_ = plane.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: victim.Spec.InfrastructureRef.Name}, gm)
		return gm.Status.Conditions
	}, 30*time.Second).Should(ContainElement(And(HaveField("Type", infrav1.FaultsInjectedCondition), HaveField("Status", metav1.ConditionTrue))))
	nudgeKCP(ctx, g, s)
	waitFor(ctx, t, g, "qs", 8*time.Minute, "KCP to remediate "+victim.Name,
		all(replacedMachine(victim.UID), harness.Available, controlPlaneHealthy(3), workersRunning(2)))
	t.Logf("remediated and healthy %.0fs after the member turned unhealthy", time.Since(start).Seconds())
}

// processMetric sums the samples of a metric on a manager's diagnostics endpoint (insecure in the
// plane) whose labels contain every one of labels.
func processMetric(ctx context.Context, g Gomega, process, metric string, labels ...string) float64 {
	var addr string
	for _, p := range plane.Processes() {
		if p.Name != process {
			continue
		}
		for _, a := range p.Args {
			if v, ok := strings.CutPrefix(a, "--diagnostics-address="); ok {
				addr = v
			}
		}
	}
	g.Expect(addr).NotTo(BeEmpty(), "no diagnostics address of %s", process)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	g.Expect(err).NotTo(HaveOccurred())
	resp, err := http.DefaultClient.Do(req)
	g.Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	g.Expect(err).NotTo(HaveOccurred())
	var sum float64
	for _, line := range strings.Split(string(body), "\n") {
		name, rest, _ := strings.Cut(line, "{")
		if name != metric {
			continue
		}
		lbls, value, _ := strings.Cut(rest, "} ")
		if !slices.ContainsFunc(labels, func(l string) bool { return !strings.Contains(lbls, l) }) {
			v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
			g.Expect(err).NotTo(HaveOccurred(), line)
			sum += v
		}
	}
	return sum
}

// apiServer.errors 503 on nodes: kubectl shows kube-apiserver's error, everything else answers;
// CAPI retries (its logs say so) and its reconcile rate stays bounded (from its metrics).
func TestFaultAPIServerErrors(t *testing.T) {
	ctx, g := begin(t, 8*time.Minute)
	s := healthyQS(ctx, t, g)
	kubeconfig := filepath.Join(plane.OutputDir(), "qs.kubeconfig")
	g.Expect(plane.WriteWorkloadKubeconfig(ctx, ns, "qs", kubeconfig)).To(Succeed())
	kubectl := func(args ...string) (string, error) {
		out, err := exec.CommandContext(ctx, bins.Kubectl(), append([]string{"--kubeconfig", kubeconfig}, args...)...).CombinedOutput()
		return string(out), err
	}
	setClusterFaults(ctx, g, "qs", &infrav1.ClusterSimulation{APIServer: &infrav1.APIServerSimulation{Errors: []infrav1.APIErrorFault{
		{Resources: []string{"nodes"}, Code: 503, Ratio: "1"},
	}}})
	g.Eventually(func() string { out, _ := kubectl("get", "nodes"); return out }, time.Minute).
		Should(ContainSubstring("Error from server (ServiceUnavailable): the server is currently unable to handle the request"))
	out, err := kubectl("get", "pods", "-n", "kube-system")
	g.Expect(err).NotTo(HaveOccurred(), out)

	// CAPI's informers keep the watches they opened before the fault: break the connections for a
	// moment, so that every client of the cluster has to list its Nodes again, and count over a
	// window what they do against the failing API: their retries (Goofy's counter of 503 answers
	// to node requests, CAPI's logs) and CAPI core's Machine reconciles.
	rejected := func() float64 {
		return processMetric(ctx, g, "goofy", "goofy_mux_requests_total", `resource="nodes"`, `code="503"`)
	}
	reconciles := func() (total, errs float64) {
		return processMetric(ctx, g, "capi", "controller_runtime_reconcile_total", `controller="machine"`),
			processMetric(ctx, g, "capi", "controller_runtime_reconcile_errors_total", `controller="machine"`)
	}
	sim := &infrav1.ClusterSimulation{APIServer: &infrav1.APIServerSimulation{Errors: []infrav1.APIErrorFault{
		{Resources: []string{"nodes"}, Code: 503, Ratio: "1"},
	}}}
	setClusterFaults(ctx, g, "qs", &infrav1.ClusterSimulation{Unreachable: true, APIServer: sim.APIServer})
	g.Eventually(func() error { return dial(s.Cluster.Spec.ControlPlaneEndpoint) }, 10*time.Second).ShouldNot(Succeed())
	setClusterFaults(ctx, g, "qs", sim)
	const window = 30 * time.Second
	rejected0 := rejected()
	total0, errs0 := reconciles()
	time.Sleep(window)
	rejected1 := rejected()
	total1, errs1 := reconciles()
	logged := 0
	for _, name := range []string{"capi", "capi-kubeadm-control-plane", "capi-kubeadm-bootstrap"} {
		if data, err := os.ReadFile(plane.LogFiles()[name]); err == nil {
			logged += strings.Count(string(data), "the server is currently unable to handle the request")
		}
	}
	retries, rate := (rejected1-rejected0)/window.Seconds(), (total1-total0)/window.Seconds()
	t.Logf("over %s with 503 on nodes after the connections broke: %.0f node requests answered 503 (%.2f/s), "+
		"CAPI core's machine controller %.0f reconciles (%.2f/s, %.0f errors); %d lines of the CAPI managers' logs carry the 503",
		window, rejected1-rejected0, retries, total1-total0, rate, errs1-errs0, logged)
	g.Expect(rejected1-rejected0).To(BeNumerically(">", 0), "nobody retried the node requests")
	g.Expect(logged).To(BeNumerically(">", 0), "the CAPI managers' logs do not show the failing requests")
	g.Expect(retries).To(BeNumerically("<", 20), "the clients of the failing cluster retry without bound")
	g.Expect(rate).To(BeNumerically("<", 10), "CAPI's machine controller spins on the failing cluster")
	setClusterFaults(ctx, g, "qs", nil)
	g.Eventually(func() error { _, err := kubectl("get", "nodes"); return err }, time.Minute).Should(Succeed())
	waitFor(ctx, t, g, "qs", 3*time.Minute, "a healthy control plane and 2 workers",
		all(harness.Available, controlPlaneHealthy(3), workersRunning(2)))
}

// vmFailed on a worker: its Node stops posting status and the MachineHealthCheck replaces it.
func TestFaultVMFailed(t *testing.T) {
	ctx, g := begin(t, 10*time.Minute)
	s := healthyQS(ctx, t, g)
	var victim *clusterv1.Machine
	for i, m := range s.Machines {
		if _, cp := m.Labels[clusterv1.MachineControlPlaneLabel]; !cp {
			victim = &s.Machines[i]
			break
		}
	}
	g.Expect(victim).NotTo(BeNil())
	start := time.Now()
	setMachineFaults(ctx, g, victim, &infrav1.MachineSimulation{VMFailed: true})
	waitFor(ctx, t, g, "qs", 6*time.Minute, "the MachineHealthCheck to replace "+victim.Name,
		all(replacedMachine(victim.UID), workersRunning(2), harness.Available))
	t.Logf("replaced and healthy %.0fs after the VM failed", time.Since(start).Seconds())
}

// apiServer.latency 200 ms: a cluster created with it against one created at the same time without
// (1 control-plane machine, 1 worker each); both are deleted again.
func TestFaultAPILatency(t *testing.T) {
	slowFaults(t)
	ctx, g := begin(t, 15*time.Minute)
	data, err := os.ReadFile(filepath.Join(repoRoot, "templates", "cluster-template.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	const gcSpec = "kind: GoofyCluster\nmetadata:\n  name: ${CLUSTER_NAME}\n  namespace: ${NAMESPACE}\nspec:\n"
	g.Expect(string(data)).To(ContainSubstring(gcSpec))
	slow := strings.Replace(string(data), gcSpec, gcSpec+"  simulation:\n    apiServer:\n      latency: {base: 200ms}\n", 1)
	created := map[string]time.Time{}
	for name, tmpl := range map[string]string{"lat0": string(data), "lat200": slow} {
		out, err := harness.RenderTemplate([]byte(tmpl), map[string]string{"CLUSTER_NAME": name, "NAMESPACE": ns,
			"CONTROL_PLANE_MACHINE_COUNT": "1", "WORKER_MACHINE_COUNT": "1"})
		g.Expect(err).NotTo(HaveOccurred())
		_, err = plane.Apply(ctx, out)
		g.Expect(err).NotTo(HaveOccurred())
		created[name] = time.Now()
	}
	took := map[string]float64{}
	for _, name := range []string{"lat0", "lat200"} {
		waitFor(ctx, t, g, name, 10*time.Minute, "Available", all(harness.Available, controlPlaneHealthy(1), workersRunning(1)))
		took[name] = time.Since(created[name]).Seconds()
	}
	t.Logf("creation to Available: %.0fs without latency, %.0fs with 200 ms of API server latency", took["lat0"], took["lat200"])
	for _, name := range []string{"lat0", "lat200"} {
		g.Expect(client.IgnoreNotFound(plane.Client.Delete(ctx, &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}))).To(Succeed())
	}
	for _, name := range []string{"lat0", "lat200"} {
		g.Eventually(func() bool {
			err := plane.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &infrav1.GoofyCluster{})
			return apierrors.IsNotFound(err)
		}, 5*time.Minute, 2*time.Second).Should(BeTrue(), "GoofyCluster %s not deleted", name)
	}
}

// apiServer.errors 503 with ratio 0.2 on all verbs across 20 clusters: every cluster still reaches
// Available. A round without faults, then one with them, through a manager of their own in the
// stress namespace (as TestStress; its listener ports).
func TestFaultErrorsAtScale(t *testing.T) {
	slowFaults(t)
	const clusters = 20
	ctx, g := begin(t, 2*(stressAvailableTimeout+stressDeleteTimeout)+2*time.Minute)
	first, err := freeConsecutivePorts(2*clusters, stressPorts)
	g.Expect(err).NotTo(HaveOccurred())
	mgr, err := plane.StartGoofyManager(ctx, harness.GoofyManagerSpec{
		Name:              "goofy-faults",
		ListenerPortRange: fmt.Sprintf("%d-%d", first, first+2*clusters-1),
		Args:              []string{"--namespace=" + stressNamespace, "--kube-api-qps=100", "--kube-api-burst=200"},
	})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() {
		if err := deleteStressClusters(context.Background()); err != nil {
			t.Logf("cleaning up: %v", err)
		}
		mgr.Stop(10 * time.Second)
	})
	g.Expect(plane.EnsureNamespace(ctx, stressNamespace)).To(Succeed())
	data, err := os.ReadFile(filepath.Join(repoRoot, "templates", "cluster-template.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	const gcSpec = "kind: GoofyCluster\nmetadata:\n  name: ${CLUSTER_NAME}\n  namespace: ${NAMESPACE}\nspec:\n"
	faulty := strings.Replace(string(data), gcSpec, gcSpec+"  simulation:\n    apiServer:\n      errors:\n      - {code: 503, ratio: \"0.2\"}\n", 1)
	took := map[string]float64{}
	for round, tmpl := range []string{string(data), faulty} {
		label := []string{"without faults", "with 503 on a fifth of all requests"}[round]
		names := make([]string, clusters)
		manifests := make([][]byte, clusters)
		for i := range clusters {
			names[i] = fmt.Sprintf("faults-%d-%02d", round, i)
			manifests[i], err = harness.RenderTemplate([]byte(tmpl), map[string]string{
				"CLUSTER_NAME": names[i], "NAMESPACE": stressNamespace,
				"CONTROL_PLANE_MACHINE_COUNT": "1", "WORKER_MACHINE_COUNT": strconv.Itoa(i % 2),
				"GOOFY_VM_STARTUP_DURATION": stressPhase, "GOOFY_NODE_STARTUP_DURATION": stressPhase,
				"GOOFY_ETCD_STARTUP_DURATION": stressPhase, "GOOFY_APISERVER_STARTUP_DURATION": stressPhase,
			})
			g.Expect(err).NotTo(HaveOccurred())
		}
		start := time.Now()
		applyAll(ctx, g, manifests, names)
		waitStressAvailable(ctx, t, g, names, start)
		took[label] = time.Since(start).Seconds()
		failed := processMetric(ctx, g, "goofy-faults", "goofy_mux_requests_total", `code="503"`)
		t.Logf("%d clusters %s: all Available %.1fs after the first apply (%.0f requests answered 503 so far)", clusters, label, took[label], failed)
		if round == 1 {
			g.Expect(failed).To(BeNumerically(">", 0), "no request failed")
		}
		g.Expect(deleteStressClusters(ctx)).To(Succeed())
	}
	g.Expect(mgr.Running()).To(BeTrue(), "the manager exited (log: %s)", mgr.LogFile)
}
