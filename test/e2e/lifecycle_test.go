package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/goofy-capi/cluster-api-provider-goofy/api/v1alpha1"
	"github.com/goofy-capi/cluster-api-provider-goofy/test/e2e/harness"
)

const (
	ns = "e2e"
	// nodeNotReadyAnnotation on a GoofyMachine makes its simulated Node NotReady (controllers package).
	nodeNotReadyAnnotation = "goofy.infrastructure.cluster.x-k8s.io/node-not-ready"
	upgradeFrom            = "v1.35.0"
	upgradeTo              = "v1.36.3"
	upgradeCoreDNS         = "v1.14.2"
)

// begin skips when the plane is not up, records the scenario's duration, and on failure dumps the
// namespace's objects and the tail of every process log.
func begin(t *testing.T, timeout time.Duration) (context.Context, Gomega) {
	t.Helper()
	inOrder(t)
	startPlane()
	if skipReason != "" {
		t.Skip(skipReason)
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(func() {
		cancel()
		result := "ok"
		if t.Failed() {
			result = "FAILED"
			dctx, dcancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer dcancel()
			if f, err := plane.DumpObjects(dctx, ns); err == nil {
				t.Logf("objects dumped to %s", f)
			}
			harness.DumpLogs(logWriter{t}, plane.LogFiles(), 60)
		}
		addTiming("%-28s %6.0fs %s\n", t.Name(), time.Since(start).Seconds(), result)
	})
	g := NewWithT(t)
	g.SetDefaultEventuallyPollingInterval(time.Second)
	return ctx, g
}

type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// createCluster renders a repository template like `clusterctl generate cluster` and applies it.
func createCluster(ctx context.Context, g Gomega, vars map[string]string, templates ...string) {
	for _, tmpl := range templates {
		data, err := os.ReadFile(filepath.Join(repoRoot, "templates", tmpl))
		g.Expect(err).NotTo(HaveOccurred())
		vars["NAMESPACE"] = ns
		out, err := harness.RenderTemplate(data, vars)
		g.Expect(err).NotTo(HaveOccurred())
		_, err = plane.Apply(ctx, out)
		g.Expect(err).NotTo(HaveOccurred())
	}
}

// ensureCluster creates a cluster from the default template unless it exists, and waits until it
// is Available.
func ensureCluster(ctx context.Context, t *testing.T, g Gomega, name string, vars map[string]string) harness.ClusterStatus {
	t.Helper()
	err := plane.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &clusterv1.Cluster{})
	if apierrors.IsNotFound(err) {
		vars["CLUSTER_NAME"] = name
		createCluster(ctx, g, vars, "cluster-template.yaml")
	} else {
		g.Expect(err).NotTo(HaveOccurred())
	}
	return waitFor(ctx, t, g, name, 10*time.Minute, "Available", harness.Available)
}

func waitFor(ctx context.Context, t *testing.T, g Gomega, name string, timeout time.Duration, what string, done func(harness.ClusterStatus) bool) harness.ClusterStatus {
	t.Helper()
	s, err := plane.WaitForCluster(ctx, logWriter{t}, ns, name, timeout, what, done)
	g.Expect(err).NotTo(HaveOccurred())
	return s
}

func conditionTrue(conds []metav1.Condition, typ string) bool {
	for _, c := range conds {
		if c.Type == typ {
			return c.Status == metav1.ConditionTrue
		}
	}
	return false
}

// controlPlaneHealthy: KCP has want ready replicas, no others, and KCP's own etcd and component
// health checks (which go through the workload API server and the etcd port-forward) are true.
func controlPlaneHealthy(want int32) func(harness.ClusterStatus) bool {
	return func(s harness.ClusterStatus) bool {
		if s.KCP == nil || ptr.Deref(s.KCP.Status.ReadyReplicas, 0) != want || ptr.Deref(s.KCP.Status.Replicas, 0) != want {
			return false
		}
		return conditionTrue(s.KCP.Status.Conditions, controlplanev1.KubeadmControlPlaneEtcdClusterHealthyCondition) &&
			conditionTrue(s.KCP.Status.Conditions, controlplanev1.KubeadmControlPlaneControlPlaneComponentsHealthyCondition)
	}
}

// workersRunning: the MachineDeployments want n replicas in total and have exactly n machines, all
// Running with a node and ready.
func workersRunning(n int32) func(harness.ClusterStatus) bool { return topologyWorkersRunning(n, 0) }

func all(conds ...func(harness.ClusterStatus) bool) func(harness.ClusterStatus) bool {
	return func(s harness.ClusterStatus) bool {
		for _, c := range conds {
			if !c(s) {
				return false
			}
		}
		return true
	}
}

// readyNodes lists the workload cluster's nodes with the real kubectl and returns the Ready ones.
func readyNodes(ctx context.Context, g Gomega, name string) []corev1.Node {
	kubeconfig := filepath.Join(plane.OutputDir(), name+".kubeconfig")
	g.Expect(plane.WriteWorkloadKubeconfig(ctx, ns, name, kubeconfig)).To(Succeed())
	out, err := exec.CommandContext(ctx, bins.Kubectl(), "--kubeconfig", kubeconfig, "get", "nodes", "-o", "json").Output()
	g.Expect(err).NotTo(HaveOccurred(), "kubectl get nodes: %s", exitStderr(err))
	var list corev1.NodeList
	g.Expect(json.Unmarshal(out, &list)).To(Succeed())
	var ready []corev1.Node
	for _, n := range list.Items {
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				ready = append(ready, n)
			}
		}
	}
	return ready
}

func exitStderr(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}

// 1. Quick start: 3 control-plane + 2 workers reach Available with a healthy control plane, every
// machine Running with a node, and kubectl sees 5 Ready nodes in the workload cluster.
func TestQuickStart(t *testing.T) {
	ctx, g := begin(t, 12*time.Minute)
	ensureCluster(ctx, t, g, "qs", map[string]string{"CONTROL_PLANE_MACHINE_COUNT": "3", "WORKER_MACHINE_COUNT": "2"})
	s := waitFor(ctx, t, g, "qs", 3*time.Minute, "a healthy control plane and 2 workers", all(controlPlaneHealthy(3), workersRunning(2)))
	g.Expect(s.Machines).To(HaveLen(5))
	for _, m := range s.Machines {
		g.Expect(m.Status.Phase).To(Equal(string(clusterv1.MachinePhaseRunning)), m.Name)
		g.Expect(m.Status.NodeRef.Name).To(Equal(m.Name), "node name = machine name (%s)", m.Name)
	}
	g.Expect(readyNodes(ctx, g, "qs")).To(HaveLen(5))
}

// 2. Scale: workers 2 -> 5 -> 1, control plane 3 -> 5 -> 3 (etcd members added and removed; KCP's
// etcd health check compares members with machines, so it is true only when they match). Scaling
// the workers down, CAPI drains the removed nodes: a pod on each is evicted and terminates
// gracefully (drainProbes), and a Deployment under a PodDisruptionBudget never has fewer ready
// replicas than the budget's minAvailable while its pods move to the remaining worker
// (budgetedWorkload; a refused eviction costs one CAPI drain retry, 20 s).
func TestScale(t *testing.T) {
	ctx, g := begin(t, 15*time.Minute)
	s := ensureCluster(ctx, t, g, "qs", map[string]string{"CONTROL_PLANE_MACHINE_COUNT": "3", "WORKER_MACHINE_COUNT": "2"})
	g.Expect(s.MachineDeployments).To(HaveLen(1))
	md := &s.MachineDeployments[0]
	scaleMD := func(n int32) {
		patch := client.MergeFrom(md.DeepCopy())
		md.Spec.Replicas = ptr.To(n)
		g.Expect(plane.Client.Patch(ctx, md, patch)).To(Succeed())
		waitFor(ctx, t, g, "qs", 5*time.Minute, fmt.Sprintf("%d workers", n), all(harness.Available, workersRunning(n)))
	}
	scaleKCP := func(n int32) {
		kcp := &controlplanev1.KubeadmControlPlane{}
		g.Expect(plane.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "qs-control-plane"}, kcp)).To(Succeed())
		patch := client.MergeFrom(kcp.DeepCopy())
		kcp.Spec.Replicas = ptr.To(n)
		g.Expect(plane.Client.Patch(ctx, kcp, patch)).To(Succeed())
		waitFor(ctx, t, g, "qs", 8*time.Minute, fmt.Sprintf("%d healthy control-plane machines", n), all(harness.Available, controlPlaneHealthy(n)))
	}
	scaleMD(5)
	probes := startDrainProbes(ctx, t, g, "qs")
	budgeted := startBudgetedWorkload(ctx, t, g, probes.cs, onWorkers)
	scaleMD(1)
	probes.check(ctx, g)
	budgeted.check(ctx, g)
	scaleKCP(5)
	scaleKCP(3)
	g.Expect(readyNodes(ctx, g, "qs")).To(HaveLen(4))
}

// drainProbes is one unmanaged pod on every worker node and a watch on them. When CAPI scales a
// MachineDeployment down it drains each node it removes, evicting the pod through Goofy's
// pods/eviction: the pod terminates gracefully, seen as MODIFIED with a deletionTimestamp and a
// grace period (the pod's 30 s, as CAPI passes none) before DELETED. The pod garbage collector's force delete after
// the Node is gone would show DELETED alone, so the watch tells a drain from a clean-up.
type drainProbes struct {
	cs     *kubernetes.Clientset
	nodeOf map[string]string // pod -> node
	// seen is written by the watch goroutine only; check reads it after done is closed.
	seen map[string][]string // pod -> event types, "TERMINATING" for a graceful-deletion update
	stop context.CancelFunc
	done chan struct{}
}

func startDrainProbes(ctx context.Context, t *testing.T, g Gomega, cluster string) *drainProbes {
	t.Helper()
	kubeconfig := filepath.Join(plane.OutputDir(), cluster+".kubeconfig")
	g.Expect(plane.WriteWorkloadKubeconfig(ctx, ns, cluster, kubeconfig)).To(Succeed())
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	g.Expect(err).NotTo(HaveOccurred())
	p := &drainProbes{cs: kubernetes.NewForConfigOrDie(cfg), nodeOf: map[string]string{}, seen: map[string][]string{}, done: make(chan struct{})}
	for _, n := range readyNodes(ctx, g, cluster) {
		if _, cp := n.Labels["node-role.kubernetes.io/control-plane"]; cp {
			continue
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "drain-probe-" + n.Name, Namespace: metav1.NamespaceDefault},
			Spec:       corev1.PodSpec{NodeName: n.Name, Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}},
		}
		_, err := p.cs.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		p.nodeOf[pod.Name] = n.Name
	}
	g.Expect(p.nodeOf).NotTo(BeEmpty())
	list, err := p.cs.CoreV1().Pods(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	w, err := p.cs.CoreV1().Pods(metav1.NamespaceDefault).Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	g.Expect(err).NotTo(HaveOccurred())
	wctx, cancel := context.WithCancel(ctx)
	p.stop = cancel
	go func() {
		defer close(p.done)
		defer w.Stop()
		for {
			select {
			case <-wctx.Done():
				return
			case ev, ok := <-w.ResultChan():
				if !ok {
					return
				}
				pod, isPod := ev.Object.(*corev1.Pod)
				if !isPod {
					continue
				}
				kind := string(ev.Type)
				if ev.Type == watch.Modified && pod.DeletionTimestamp != nil && ptr.Deref(pod.DeletionGracePeriodSeconds, 0) > 0 {
					kind = "TERMINATING"
				}
				p.seen[pod.Name] = append(p.seen[pod.Name], kind)
			}
		}
	}()
	return p
}

// check asserts that the probes on removed nodes were evicted gracefully and are gone, and the
// others still run.
func (p *drainProbes) check(ctx context.Context, g Gomega) {
	p.stop()
	<-p.done
	nodes, err := p.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	remaining := map[string]bool{}
	for _, n := range nodes.Items {
		remaining[n.Name] = true
	}
	drained := 0
	for pod, node := range p.nodeOf {
		_, err := p.cs.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, pod, metav1.GetOptions{})
		if remaining[node] {
			g.Expect(err).NotTo(HaveOccurred(), "%s on the remaining node %s", pod, node)
			continue
		}
		drained++
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%s on the removed node %s: %v", pod, node, err)
		g.Expect(p.seen[pod]).To(ContainElement("TERMINATING"), "%s was not evicted by a drain (events %v)", pod, p.seen[pod])
		g.Expect(p.seen[pod][len(p.seen[pod])-1]).To(Equal(string(watch.Deleted)), "%s: events %v", pod, p.seen[pod])
	}
	g.Expect(drained).To(BeNumerically(">", 0), "no probe was on a removed node")
}

// 3. Upgrade: KCP and the MachineDeployment rolled from v1.35 to v1.36; KCP updates kubeadm-config,
// kube-proxy and (with a new imageTag) CoreDNS in the workload cluster. KCP's rollout drains the
// old control-plane node: pods under a PodDisruptionBudget move to the new one without the budget
// ever broken.
func TestUpgrade(t *testing.T) {
	ctx, g := begin(t, 15*time.Minute)
	ensureCluster(ctx, t, g, "upg", map[string]string{"KUBERNETES_VERSION": upgradeFrom, "CONTROL_PLANE_MACHINE_COUNT": "1", "WORKER_MACHINE_COUNT": "1"})
	waitFor(ctx, t, g, "upg", 3*time.Minute, "a healthy control plane", all(controlPlaneHealthy(1), workersRunning(1)))
	// Two replicas under a budget of minAvailable 1 on the only control-plane node: KCP's rollout
	// replaces that node, and the drain must move them one at a time.
	budgeted := startBudgetedWorkload(ctx, t, g, workloadREST(ctx, g, "upg"), onControlPlane)

	kcp := &controlplanev1.KubeadmControlPlane{}
	g.Expect(plane.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "upg-control-plane"}, kcp)).To(Succeed())
	patch := client.MergeFrom(kcp.DeepCopy())
	kcp.Spec.Version = upgradeTo
	kcp.Spec.KubeadmConfigSpec.ClusterConfiguration.DNS.ImageTag = upgradeCoreDNS
	g.Expect(plane.Client.Patch(ctx, kcp, patch)).To(Succeed())
	md := &clusterv1.MachineDeployment{}
	g.Expect(plane.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "upg-md-0"}, md)).To(Succeed())
	mdPatch := client.MergeFrom(md.DeepCopy())
	md.Spec.Template.Spec.Version = upgradeTo
	g.Expect(plane.Client.Patch(ctx, md, mdPatch)).To(Succeed())

	upgraded := func(s harness.ClusterStatus) bool {
		// status.versions lists the versions of KCP's machines: one entry once all run upgradeTo.
		if len(s.Machines) != 2 || s.KCP == nil || len(s.KCP.Status.Versions) != 1 || s.KCP.Status.Versions[0].Version != upgradeTo {
			return false
		}
		for _, m := range s.Machines {
			if m.Spec.Version != upgradeTo || m.DeletionTimestamp != nil {
				return false
			}
		}
		return true
	}
	waitFor(ctx, t, g, "upg", 10*time.Minute, "the rollout to "+upgradeTo, all(harness.Available, upgraded, controlPlaneHealthy(1), workersRunning(1)))
	budgeted.check(ctx, g)

	wl, err := plane.WorkloadClient(ctx, ns, "upg")
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func(g Gomega) {
		cm := &corev1.ConfigMap{}
		g.Expect(wl.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "kubeadm-config"}, cm)).To(Succeed())
		g.Expect(cm.Data["ClusterConfiguration"]).To(ContainSubstring("kubernetesVersion: " + upgradeTo))
		proxy := &appsv1.DaemonSet{}
		g.Expect(wl.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "kube-proxy"}, proxy)).To(Succeed())
		g.Expect(proxy.Spec.Template.Spec.Containers[0].Image).To(HaveSuffix(":" + upgradeTo))
		dns := &appsv1.Deployment{}
		g.Expect(wl.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "coredns"}, dns)).To(Succeed())
		g.Expect(dns.Spec.Template.Spec.Containers[0].Image).To(HaveSuffix(":" + upgradeCoreDNS))
	}, 2*time.Minute).Should(Succeed())
	for _, n := range readyNodes(ctx, g, "upg") {
		g.Expect(n.Status.NodeInfo.KubeletVersion).To(Equal(upgradeTo), n.Name)
	}
}

// 4. Remediation: the node-not-ready annotation on a worker's GoofyMachine makes its Node NotReady;
// the MachineHealthCheck has CAPI replace the machine.
func TestRemediation(t *testing.T) {
	ctx, g := begin(t, 10*time.Minute)
	s := ensureCluster(ctx, t, g, "qs", map[string]string{"CONTROL_PLANE_MACHINE_COUNT": "3", "WORKER_MACHINE_COUNT": "2"})
	var victim *clusterv1.Machine
	for i, m := range s.Machines {
		if _, cp := m.Labels[clusterv1.MachineControlPlaneLabel]; !cp && m.Status.Phase == string(clusterv1.MachinePhaseRunning) {
			victim = &s.Machines[i]
			break
		}
	}
	g.Expect(victim).NotTo(BeNil(), "no running worker machine")
	workers := int32(0)
	for _, md := range s.MachineDeployments {
		workers += ptr.Deref(md.Spec.Replicas, 0)
	}
	gm := &infrav1.GoofyMachine{}
	g.Expect(plane.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: victim.Spec.InfrastructureRef.Name}, gm)).To(Succeed())
	patch := client.MergeFrom(gm.DeepCopy())
	if gm.Annotations == nil {
		gm.Annotations = map[string]string{}
	}
	gm.Annotations[nodeNotReadyAnnotation] = "true"
	g.Expect(plane.Client.Patch(ctx, gm, patch)).To(Succeed())
	t.Logf("made the node of %s NotReady", victim.Name)

	replaced := func(s harness.ClusterStatus) bool {
		return !slices.ContainsFunc(s.Machines, func(m clusterv1.Machine) bool { return m.UID == victim.UID })
	}
	waitFor(ctx, t, g, "qs", 6*time.Minute, "the MachineHealthCheck to replace "+victim.Name, all(replaced, workersRunning(workers), harness.Available))
}

// 5. ClusterClass: the topology flavor, as the real `clusterctl generate cluster --flavor topology`
// renders it from the local repository (with clusterclass-goofy.yaml), with the machine pool of the
// topology-machinepool flavor added (ccManifests), reaches Available: CAPI's topology controller
// makes the MachineDeployment of class default-worker and the MachinePool of class
// default-worker-pool (a GoofyMachinePool from the GoofyMachinePoolTemplate, patched with the
// cluster's vmStartupDuration, and a KubeadmConfig from the class's KubeadmConfigTemplate), whose
// instance is Running with its Node Ready.
func TestClusterClass(t *testing.T) {
	ctx, g := begin(t, 12*time.Minute)
	err := plane.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "cc"}, &clusterv1.Cluster{})
	if apierrors.IsNotFound(err) {
		manifests, err := ccManifests(ctx, clusterctlRepository(ctx, t, g), ns, "cc", "1", "1")
		g.Expect(err).NotTo(HaveOccurred())
		_, err = plane.Apply(ctx, manifests)
		g.Expect(err).NotTo(HaveOccurred())
	}
	waitFor(ctx, t, g, "cc", 10*time.Minute, "Available with 1 control-plane, 1 MachineDeployment worker and 1 MachinePool instance",
		all(harness.Available, controlPlaneHealthy(1), topologyWorkersRunning(1, 1)))
	c := &clusterv1.Cluster{}
	g.Expect(plane.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "cc"}, c)).To(Succeed())
	g.Expect(c.Spec.InfrastructureRef.Kind).To(Equal("GoofyCluster"), "the topology controller created the GoofyCluster from the class")

	// The MachinePool of the topology: Running, 1 ready replica, its GoofyMachinePool made from the
	// class's template, one Machine Running, and a Ready Node with the pool's provider ID.
	start := time.Now()
	g.Eventually(func(g Gomega) {
		var mps clusterv1.MachinePoolList
		g.Expect(plane.Client.List(ctx, &mps, client.InNamespace(ns), client.MatchingLabels{clusterv1.ClusterNameLabel: "cc"})).To(Succeed())
		g.Expect(mps.Items).To(HaveLen(1), "MachinePools of cc")
		mp := mps.Items[0]
		g.Expect(mp.Labels).To(HaveKeyWithValue(clusterv1.ClusterTopologyMachinePoolNameLabel, "mp-0"))
		g.Expect(mp.Status.Phase).To(Equal(string(clusterv1.MachinePoolPhaseRunning)))
		g.Expect(mp.Status.ReadyReplicas).To(Equal(ptr.To[int32](1)), "ready replicas")
		g.Expect(mp.Spec.Template.Spec.Bootstrap.ConfigRef.Kind).To(Equal("KubeadmConfig"))
		g.Expect(mp.Spec.Template.Spec.InfrastructureRef.Kind).To(Equal("GoofyMachinePool"))
		pool := &infrav1.GoofyMachinePool{}
		g.Expect(plane.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: mp.Spec.Template.Spec.InfrastructureRef.Name}, pool)).To(Succeed())
		g.Expect(pool.Labels).To(HaveKey(clusterv1.ClusterTopologyOwnedLabel))
		g.Expect(pool.Spec.Template.Spec.InMemory).NotTo(BeNil(), "the class's instance template")
		g.Expect(pool.Spec.Template.Spec.InMemory.Node.Provisioning.StartupDuration.Duration).To(Equal(time.Second), "the template's node timing")
		g.Expect(pool.Spec.Template.Spec.InMemory.VM.Provisioning.StartupDuration.Duration).To(Equal(ccVMStartupDuration),
			"the cluster's vmStartupDuration, set by the class's workerTimings patch")
		g.Expect(pool.Spec.ProviderIDList).To(HaveLen(1))
		g.Expect(mp.Spec.ProviderIDList).To(Equal(pool.Spec.ProviderIDList))
		var machines clusterv1.MachineList
		g.Expect(plane.Client.List(ctx, &machines, client.InNamespace(ns),
			client.MatchingLabels{clusterv1.ClusterNameLabel: "cc", clusterv1.MachinePoolNameLabel: mp.Name})).To(Succeed())
		g.Expect(machines.Items).To(ConsistOf(HaveField("Status.Phase", string(clusterv1.MachinePhaseRunning))), "Machines of the pool")
		var providerIDs []string
		for _, n := range readyNodes(ctx, g, "cc") {
			providerIDs = append(providerIDs, n.Spec.ProviderID)
		}
		g.Expect(providerIDs).To(ContainElement(pool.Spec.ProviderIDList[0]), "a Ready Node with the instance's provider ID")
	}, 3*time.Minute, time.Second).Should(Succeed(), "the topology's MachinePool Running with its Node Ready")
	t.Logf("the topology's MachinePool Running with its Node Ready (checked in %.0fs once cc was Available with 3 machines Running)", time.Since(start).Seconds())
}

// topologyWorkersRunning: workersRunning for a cluster whose workers are md MachineDeployment
// machines and pool MachinePool machines: the MachineDeployments want and have md ready replicas,
// and there are exactly md+pool worker machines, all Running with a node.
func topologyWorkersRunning(md, pool int32) func(harness.ClusterStatus) bool {
	return func(s harness.ClusterStatus) bool {
		var ready, desired int32
		for _, d := range s.MachineDeployments {
			ready += ptr.Deref(d.Status.ReadyReplicas, 0)
			desired += ptr.Deref(d.Spec.Replicas, 0)
		}
		var machines int32
		for _, m := range s.Machines {
			if _, cp := m.Labels[clusterv1.MachineControlPlaneLabel]; cp {
				continue
			}
			if m.Status.Phase != string(clusterv1.MachinePhaseRunning) || !m.Status.NodeRef.IsDefined() {
				return false
			}
			machines++
		}
		return desired == md && ready == md && machines == md+pool
	}
}

// 6. Restart: the Goofy manager is killed with SIGKILL and started again; every cluster answers and
// is Available again within 30 s, on the same endpoint, and no Machine is replaced. What users and
// ClusterResourceSets wrote into a workload cluster is still there, an informer that ran across
// the restart sees every later change, and CAPI scales the cluster up afterwards.
func TestRestart(t *testing.T) {
	ctx, g := begin(t, 20*time.Minute)
	ensureCluster(ctx, t, g, "qs", map[string]string{"CONTROL_PLANE_MACHINE_COUNT": "3", "WORKER_MACHINE_COUNT": "2"})
	ensureCluster(ctx, t, g, "upg", map[string]string{"KUBERNETES_VERSION": upgradeTo, "CONTROL_PLANE_MACHINE_COUNT": "1", "WORKER_MACHINE_COUNT": "1"})
	state := prepareWorkloadState(ctx, t, g, "upg")
	var clusters clusterv1.ClusterList
	g.Expect(plane.Client.List(ctx, &clusters, client.InNamespace(ns))).To(Succeed())
	before := map[types.UID]string{}
	endpoints := map[string]clusterv1.APIEndpoint{}
	var names []string
	for _, c := range clusters.Items {
		s := waitFor(ctx, t, g, c.Name, 10*time.Minute, "Available", harness.Available)
		for _, m := range s.Machines {
			before[m.UID] = m.Name
		}
		endpoints[c.Name] = c.Spec.ControlPlaneEndpoint
		names = append(names, c.Name)
	}

	pid := plane.Goofy.Pid()
	plane.Goofy.Kill()
	g.Expect(syscall.Kill(pid, 0)).To(MatchError(syscall.ESRCH), "the manager survived SIGKILL")
	for name, ep := range endpoints {
		g.Eventually(func() error { return dial(ep) }, 10*time.Second).ShouldNot(Succeed(), "listener of %s still open after the kill", name)
	}
	g.Expect(plane.StartGoofy(ctx)).To(Succeed())
	restarted := time.Now()

	for _, name := range names {
		remaining := 30*time.Second - time.Since(restarted)
		g.Expect(remaining).To(BeNumerically(">", 0), "30 s passed before %s was checked", name)
		// The listener must come back on the recorded endpoint (HotRestart), then CAPI sees the
		// cluster Available; both inside the 30 s.
		ep := endpoints[name]
		g.Eventually(func() error { return dial(ep) }, remaining, 200*time.Millisecond).Should(Succeed(), "%s's endpoint did not come back on %s:%d", name, ep.Host, ep.Port)
		waitFor(ctx, t, g, name, 30*time.Second-time.Since(restarted), "Available after the restart", harness.Available)
	}
	t.Logf("all %d clusters Available %.1fs after the restart", len(names), time.Since(restarted).Seconds())
	for _, name := range names {
		s, err := plane.GetClusterStatus(ctx, ns, name)
		g.Expect(err).NotTo(HaveOccurred())
		// The workload cluster's state survived: one Ready node per machine, named after it.
		var nodeNames, machineNames []string
		for _, n := range readyNodes(ctx, g, name) {
			nodeNames = append(nodeNames, n.Name)
		}
		for _, m := range s.Machines {
			machineNames = append(machineNames, m.Name)
		}
		g.Expect(nodeNames).To(ConsistOf(machineNames), "nodes of %s after the restart", name)
		for _, m := range s.Machines {
			g.Expect(before).To(HaveKey(m.UID), "machine %s of %s was created after the restart", m.Name, name)
			g.Expect(m.DeletionTimestamp).To(BeNil(), "machine %s of %s is being replaced", m.Name, name)
		}
	}
	state.checkAfterRestart(ctx, t, g)
}

func dial(ep clusterv1.APIEndpoint) error {
	c, err := net.DialTimeout("tcp", net.JoinHostPort(ep.Host, fmt.Sprint(ep.Port)), time.Second)
	if err != nil {
		return err
	}
	return c.Close()
}

// 7. Delete: deleting a Cluster removes its machines and closes its listener, and the next cluster
// gets the freed port (the suite's port range holds exactly as many ports as it has clusters);
// deleting the machine-pool cluster leaves no MachinePool, GoofyMachinePool, instance or listener.
func TestDelete(t *testing.T) {
	ctx, g := begin(t, 15*time.Minute)
	victim := "cc"
	c := &clusterv1.Cluster{}
	if err := plane.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: victim}, c); apierrors.IsNotFound(err) {
		victim = "del"
		ensureCluster(ctx, t, g, victim, map[string]string{"CONTROL_PLANE_MACHINE_COUNT": "1", "WORKER_MACHINE_COUNT": "1"})
		g.Expect(plane.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: victim}, c)).To(Succeed())
	}
	var gcs infrav1.GoofyClusterList
	g.Expect(plane.Client.List(ctx, &gcs, client.InNamespace(ns))).To(Succeed())
	rangeFull := len(gcs.Items) == maxClusters
	ep := c.Spec.ControlPlaneEndpoint
	g.Expect(ep.Port).To(BeNumerically(">=", portRange[0]))
	g.Expect(dial(ep)).To(Succeed())

	g.Expect(plane.Client.Delete(ctx, c)).To(Succeed())
	g.Eventually(func(g Gomega) {
		err := plane.Client.Get(ctx, client.ObjectKeyFromObject(c), &clusterv1.Cluster{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "cluster still there")
		var machines clusterv1.MachineList
		g.Expect(plane.Client.List(ctx, &machines, client.InNamespace(ns), client.MatchingLabels{clusterv1.ClusterNameLabel: victim})).To(Succeed())
		g.Expect(machines.Items).To(BeEmpty())
		var gms infrav1.GoofyMachineList
		g.Expect(plane.Client.List(ctx, &gms, client.InNamespace(ns), client.MatchingLabels{clusterv1.ClusterNameLabel: victim})).To(Succeed())
		g.Expect(gms.Items).To(BeEmpty())
	}, 5*time.Minute, 2*time.Second).Should(Succeed())
	g.Expect(dial(ep)).NotTo(Succeed(), "the listener of the deleted cluster still accepts connections")

	// The next cluster comes from the real `clusterctl generate cluster` (default flavor).
	_, err := plane.Apply(ctx, generateCluster(ctx, t, g, "reuse", "", "1", "0"))
	g.Expect(err).NotTo(HaveOccurred())
	s := waitFor(ctx, t, g, "reuse", 10*time.Minute, "Available", harness.Available)
	newPort := s.Cluster.Spec.ControlPlaneEndpoint.Port
	if rangeFull {
		g.Expect(newPort).To(Equal(ep.Port), "the next cluster did not get the freed port")
	} else {
		t.Logf("port range was not full (%d clusters); the new cluster got port %d, the freed one was %d", len(gcs.Items), newPort, ep.Port)
	}
	g.Expect(dial(s.Cluster.Spec.ControlPlaneEndpoint)).To(Succeed())

	// The machine-pool cluster goes too, its pool and instances with it.
	deleteMachinePoolCluster(ctx, g)
}
