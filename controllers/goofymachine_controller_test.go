package controllers

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	kubeadmtypes "sigs.k8s.io/cluster-api/bootstrap/kubeadm/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/goofy-capi/cluster-api-provider-goofy/api/v1alpha1"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/mux"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/workload"
)

func phaseOf(d time.Duration, jitter string) infrav1.PhaseSpec {
	return infrav1.PhaseSpec{Provisioning: infrav1.ProvisioningSpec{StartupDuration: metav1.Duration{Duration: d}, StartupJitter: jitter}}
}

// workloadClient is a client-go clientset over the listener's TLS endpoint, as a user would have.
func workloadClient(t testing.TB, l *mux.WorkloadClusterListener) kubernetes.Interface {
	t.Helper()
	rc, err := l.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	rc.Timeout = 10 * time.Second
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// storeGet reads an object straight from the workload cluster's store.
func storeGet(h *harness, f *fixture, obj client.Object) error {
	l, ok := h.mux.Listener(mux.ClusterKey(f.ns, f.cluster.Name))
	if !ok {
		return fmt.Errorf("no listener")
	}
	c, _ := l.GetClient()
	return c.Get(context.Background(), client.ObjectKeyFromObject(obj), obj)
}

// TestMachinePhaseProgression drives a control-plane machine through VM, Node, etcd and API server
// phases with a fake clock: every phase starts when the previous one ends, the reconciler requeues
// at exactly the phase's deadline (which never moves), completes it at the deadline and not a
// nanosecond earlier, and each phase adds exactly its part of the workload cluster.
func TestMachinePhaseProgression(t *testing.T) {
	requireEnv(t)
	g := NewWithT(t)
	h := newHarness(t)
	f := newFixture(t, newNamespace(t), "prog", nil)
	h.provisionCluster(t, f)
	backend := &infrav1.InMemoryMachineBackend{
		VM: phaseOf(10*time.Second, "0.5"), Node: phaseOf(20*time.Second, "0.3"),
		Etcd: phaseOf(5*time.Second, ""), APIServer: phaseOf(7*time.Second, "0.2"),
	}
	_, gm := newMachine(t, f, "prog-cp-0", machineOpts{controlPlane: true, failureDomain: "fd-1", backend: backend})

	phases := []struct {
		condition string
		spec      infrav1.ProvisioningSpec
		// before checks the workload cluster when the phase starts (the previous one just ended).
		before func()
	}{
		{infrav1.VMProvisionedCondition, backend.VM.Provisioning, func() {
			g.Expect(gm.Status.Conditions).To(haveCondition(infrav1.PausedCondition, metav1.ConditionFalse, clusterv1.NotPausedReason))
			// Nothing outside the GoofyMachine exists yet, so there is nothing to release on deletion.
			g.Expect(gm.Finalizers).To(BeEmpty())
			g.Expect(gm.Spec.ProviderID).To(BeEmpty())
			g.Expect(gm.Status.Initialization.Provisioned).To(BeNil())
		}},
		{infrav1.NodeProvisionedCondition, backend.Node.Provisioning, func() {
			g.Expect(gm.Finalizers).To(ConsistOf(infrav1.MachineFinalizer))
			g.Expect(gm.Spec.ProviderID).To(Equal("goofy://" + f.ns + "/prog/prog-cp-0"))
			g.Expect(gm.Status.Initialization.Provisioned).To(Equal(ptr.To(true)))
			g.Expect(gm.Status.FailureDomain).To(Equal("fd-1"))
			g.Expect(gm.Status.Addresses).To(Equal([]clusterv1.MachineAddress{
				{Type: clusterv1.MachineHostName, Address: "prog-cp-0"},
				{Type: clusterv1.MachineInternalIP, Address: "10.10.0.10"},
			}))
			g.Expect(apierrors.IsNotFound(storeGet(h, f, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "prog-cp-0"}}))).To(BeTrue())
		}},
		{infrav1.EtcdProvisionedCondition, backend.Etcd.Provisioning, func() {
			g.Expect(storeGet(h, f, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "prog-cp-0"}})).To(Succeed())
			g.Expect(apierrors.IsNotFound(storeGet(h, f, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "etcd-prog-cp-0"}}))).To(BeTrue())
			g.Expect(h.mux.HasEtcdMember(mux.ClusterKey(f.ns, "prog"), "etcd-prog-cp-0")).To(BeFalse())
		}},
		{infrav1.APIServerProvisionedCondition, backend.APIServer.Provisioning, func() {
			g.Expect(storeGet(h, f, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "etcd-prog-cp-0"}})).To(Succeed())
			g.Expect(h.mux.HasEtcdMember(mux.ClusterKey(f.ns, "prog"), "etcd-prog-cp-0")).To(BeTrue())
			g.Expect(h.mux.HasAPIServer(mux.ClusterKey(f.ns, "prog"), "kube-apiserver-prog-cp-0")).To(BeFalse())
			// Nothing serves yet: no API server, so the port refuses connections.
			_, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(f.gc.Spec.ControlPlaneEndpoint.Port))), time.Second)
			g.Expect(err).To(HaveOccurred())
		}},
	}
	// Writes to the management API server per phase boundary: the status patch, plus the object
	// patch (finalizer + provider ID) when the VM is provisioned, in a reconcile of its own that
	// ends there (its watch event starts the next); none between boundaries.
	wantWrites := map[string]int64{infrav1.VMProvisionedCondition: 1, infrav1.NodeProvisionedCondition: 2,
		infrav1.EtcdProvisionedCondition: 1, infrav1.APIServerProvisionedCondition: 1}
	prevEnd := h.clock.Now()
	for _, p := range phases {
		var res ctrl.Result
		g.Expect(h.writesDuring(func() {
			if p.condition == infrav1.NodeProvisionedCondition {
				h.reconcileMachine(t, gm) // the finalizer and provider ID, nothing else
			}
			res = h.reconcileMachine(t, gm)
		})).To(Equal(wantWrites[p.condition]), "writes starting %s", p.condition)
		get(t, gm)
		c := condition(gm, p.condition)
		g.Expect(c).NotTo(BeNil(), p.condition)
		g.Expect(c.Status).To(Equal(metav1.ConditionFalse), p.condition)
		g.Expect(c.Reason).To(Equal(infrav1.ProvisioningReason), p.condition)
		// The phase starts when the previous one ended (to the second, as Kubernetes stores times).
		g.Expect(c.LastTransitionTime.Time).To(BeTemporally("==", prevEnd.Truncate(time.Second)), p.condition)
		g.Expect(gm.Status.Conditions).To(haveCondition(infrav1.ReadyCondition, metav1.ConditionFalse, infrav1.ProvisioningReason))
		p.before()

		d := phaseDuration(p.spec, string(gm.UID)+"/"+p.condition)
		g.Expect(d).To(BeNumerically(">=", p.spec.StartupDuration.Duration))
		deadline := c.LastTransitionTime.Add(d)
		g.Expect(h.clock.Now().Add(res.RequeueAfter)).To(BeTemporally("==", deadline), "%s: requeue at the deadline", p.condition)

		// Half way, the deadline stays where it was, and nothing is written.
		h.clock.Step(d / 2)
		g.Expect(h.writesDuring(func() { res = h.reconcileMachine(t, gm) })).To(BeZero(), p.condition)
		g.Expect(h.clock.Now().Add(res.RequeueAfter)).To(BeTemporally("==", deadline), p.condition)
		// A nanosecond early, the phase is still running.
		h.clock.SetTime(deadline.Add(-time.Nanosecond))
		g.Expect(h.writesDuring(func() { res = h.reconcileMachine(t, gm) })).To(BeZero(), p.condition)
		g.Expect(res.RequeueAfter).To(Equal(time.Nanosecond), p.condition)
		get(t, gm)
		g.Expect(condition(gm, p.condition).Status).To(Equal(metav1.ConditionFalse), p.condition)
		h.clock.SetTime(deadline)
		prevEnd = deadline
	}
	g.Expect(h.writesDuring(func() { g.Expect(h.reconcileMachine(t, gm)).To(Equal(ctrl.Result{})) })).To(BeEquivalentTo(1))
	get(t, gm)
	for _, p := range phases {
		g.Expect(gm.Status.Conditions).To(haveCondition(p.condition, metav1.ConditionTrue, infrav1.ProvisionedReason))
	}
	g.Expect(gm.Status.Conditions).To(haveCondition(infrav1.ReadyCondition, metav1.ConditionTrue, infrav1.ReadyReason))
	// A Ready machine needs no more requeues, and reconciling it again writes nothing.
	g.Expect(h.writesDuring(func() { g.Expect(h.reconcileMachine(t, gm)).To(Equal(ctrl.Result{})) })).To(BeZero())

	// The listener serves: a client-go client over TLS with a client certificate from the cluster CA.
	l, ok := h.mux.Listener(mux.ClusterKey(f.ns, "prog"))
	g.Expect(ok).To(BeTrue())
	g.Expect(l.Port()).To(BeEquivalentTo(f.gc.Spec.ControlPlaneEndpoint.Port))
	cs := workloadClient(t, l)
	v, err := cs.Discovery().ServerVersion()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(v.GitVersion).To(Equal(kubernetesVersion))
	expectKubeadmNode(t, cs, "prog-cp-0", gm.Spec.ProviderID, "10.10.0.10", true)
	expectControlPlanePods(t, cs, "prog-cp-0", "10.10.0.10")
	expectKubeadmClusterObjects(t, cs, f)
}

// expectKubeadmNode checks the Node as kubelet registers it after kubeadm init/join.
func expectKubeadmNode(t testing.TB, cs kubernetes.Interface, name, providerID, ip string, controlPlane bool) {
	t.Helper()
	g := NewWithT(t)
	node, err := cs.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(node.Spec.ProviderID).To(Equal(providerID))
	g.Expect(node.Status.NodeInfo.KubeletVersion).To(Equal(kubernetesVersion))
	g.Expect(node.Status.Addresses).To(ContainElement(corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip}))
	g.Expect(node.Spec.Taints).To(ContainElement(HaveField("Key", clusterv1.NodeUninitializedTaint.Key)))
	g.Expect(node.Status.Capacity.Cpu().IsZero()).To(BeFalse())
	g.Expect(node.Status.Conditions).To(ContainElement(And(HaveField("Type", corev1.NodeReady), HaveField("Status", corev1.ConditionTrue))))
	g.Expect(node.Status.Conditions).To(ContainElement(And(HaveField("Type", corev1.NodeMemoryPressure), HaveField("Status", corev1.ConditionFalse))))
	if controlPlane {
		g.Expect(node.Labels).To(HaveKey(workload.ControlPlaneNodeLabel))
		g.Expect(node.Spec.Taints).To(ContainElement(corev1.Taint{Key: workload.ControlPlaneNodeLabel, Effect: corev1.TaintEffectNoSchedule}))
	} else {
		g.Expect(node.Labels).NotTo(HaveKey(workload.ControlPlaneNodeLabel))
		g.Expect(node.Spec.Taints).NotTo(ContainElement(HaveField("Key", workload.ControlPlaneNodeLabel)))
	}
}

// expectControlPlanePods checks the four static pods kubeadm runs on a control-plane node.
func expectControlPlanePods(t testing.TB, cs kubernetes.Interface, node, ip string) {
	t.Helper()
	g := NewWithT(t)
	pods, err := cs.CoreV1().Pods(metav1.NamespaceSystem).List(context.Background(), metav1.ListOptions{
		LabelSelector: "tier=control-plane", FieldSelector: "spec.nodeName=" + node,
	})
	g.Expect(err).NotTo(HaveOccurred())
	byName := map[string]corev1.Pod{}
	for _, p := range pods.Items {
		byName[p.Name] = p
	}
	for _, component := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		p, ok := byName[component+"-"+node]
		g.Expect(ok).To(BeTrue(), "pod %s-%s", component, node)
		g.Expect(p.Labels).To(HaveKeyWithValue("component", component))
		g.Expect(p.Status.Phase).To(Equal(corev1.PodRunning))
		g.Expect(p.Status.PodIP).To(Equal(ip))
		g.Expect(p.Status.Conditions).To(ContainElement(And(HaveField("Type", corev1.PodReady), HaveField("Status", corev1.ConditionTrue))))
	}
	g.Expect(byName).To(HaveLen(4))
}

// expectKubeadmClusterObjects checks what kubeadm init creates cluster-wide, parsed with CAPI's own
// kubeadm types.
func expectKubeadmClusterObjects(t testing.TB, cs kubernetes.Interface, f *fixture) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	cm, err := cs.CoreV1().ConfigMaps(metav1.NamespaceSystem).Get(ctx, "kubeadm-config", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	cc, data, err := kubeadmtypes.UnmarshalClusterConfiguration(cm.Data["ClusterConfiguration"])
	g.Expect(err).NotTo(HaveOccurred())
	ep := f.gc.Spec.ControlPlaneEndpoint
	g.Expect(cc.ControlPlaneEndpoint).To(Equal(net.JoinHostPort(ep.Host, strconv.Itoa(int(ep.Port)))))
	g.Expect(cc.Etcd.Local.DataDir).To(Equal("/var/lib/etcd"))
	g.Expect(ptr.Deref(data.KubernetesVersion, "")).To(Equal(kubernetesVersion))
	g.Expect(ptr.Deref(data.ClusterName, "")).To(Equal(f.cluster.Name))
	g.Expect(ptr.Deref(data.PodSubnet, "")).To(Equal("192.168.0.0/16"))
	g.Expect(ptr.Deref(data.ServiceSubnet, "")).To(Equal("10.128.0.0/12"))
	g.Expect(ptr.Deref(data.DNSDomain, "")).To(Equal("cluster.local"))

	corefile, err := cs.CoreV1().ConfigMaps(metav1.NamespaceSystem).Get(ctx, "coredns", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(corefile.Data).To(HaveKey("Corefile"))
	dns, err := cs.AppsV1().Deployments(metav1.NamespaceSystem).Get(ctx, "coredns", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(dns.Spec.Template.Spec.Containers[0].Image).To(Equal("registry.k8s.io/coredns/coredns:" + workload.CoreDNSVersion(kubernetesVersion)))
	proxy, err := cs.AppsV1().DaemonSets(metav1.NamespaceSystem).Get(ctx, "kube-proxy", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(proxy.Spec.Template.Spec.Containers[0].Image).To(Equal("registry.k8s.io/kube-proxy:" + kubernetesVersion))
	_, err = cs.RbacV1().ClusterRoleBindings().Get(ctx, "kubeadm:apiserver-kubelet-client", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
}

// TestWorkerWaitsForControlPlane: a worker records why it waits until the Cluster reports its
// control plane initialized, then provisions as a worker (VM and Node only).
func TestWorkerWaitsForControlPlane(t *testing.T) {
	requireEnv(t)
	g := NewWithT(t)
	ctx := context.Background()
	h := newHarness(t)
	f := newFixture(t, newNamespace(t), "wrk", nil)

	_, gm := newMachine(t, f, "wrk-md-0", machineOpts{failureDomain: "fd-2"})
	// Before the Cluster's infrastructure is provisioned.
	h.reconcileMachine(t, gm)
	h.reconcileMachine(t, gm)
	g.Expect(h.reconcileMachine(t, gm)).To(Equal(ctrl.Result{}))
	get(t, gm)
	g.Expect(gm.Status.Conditions).To(haveCondition(infrav1.VMProvisionedCondition, metav1.ConditionUnknown, infrav1.WaitingForClusterInfrastructureReason))
	g.Expect(gm.Status.Conditions).To(haveCondition(infrav1.ReadyCondition, metav1.ConditionFalse, infrav1.WaitingForClusterInfrastructureReason))

	h.provisionCluster(t, f)
	g.Expect(h.reconcileMachine(t, gm)).To(Equal(ctrl.Result{}))
	get(t, gm)
	g.Expect(gm.Status.Conditions).To(haveCondition(infrav1.VMProvisionedCondition, metav1.ConditionUnknown, infrav1.WaitingForControlPlaneInitializedReason))
	g.Expect(gm.Status.Conditions).To(haveCondition(infrav1.ReadyCondition, metav1.ConditionFalse, infrav1.WaitingForControlPlaneInitializedReason))
	g.Expect(gm.Spec.ProviderID).To(BeEmpty())

	// A control-plane machine does not wait for the control plane.
	_, cp := newMachine(t, f, "wrk-cp-0", machineOpts{controlPlane: true})
	h.reconcileUntilReady(t, cp)

	get(t, f.cluster)
	f.cluster.Status.Initialization.ControlPlaneInitialized = ptr.To(true)
	g.Expect(k8sClient.Status().Update(ctx, f.cluster)).To(Succeed())
	g.Expect(h.reconcileUntilReady(t, gm)).To(Equal(2), "the finalizer's reconcile, then all phases")
	get(t, gm)
	g.Expect(gm.Status.Conditions).To(haveCondition(infrav1.ReadyCondition, metav1.ConditionTrue, infrav1.ReadyReason))
	g.Expect(gm.Status.Conditions).NotTo(ContainElement(HaveField("Type", infrav1.EtcdProvisionedCondition)))
	g.Expect(gm.Status.FailureDomain).To(Equal("fd-2"))
	// Unique IPs inside the cluster: the control-plane machine took the first one.
	g.Expect(internalIP(cp)).To(Equal("10.10.0.10"))
	g.Expect(internalIP(gm)).To(Equal("10.10.0.11"))

	l, _ := h.mux.Listener(mux.ClusterKey(f.ns, "wrk"))
	cs := workloadClient(t, l)
	expectKubeadmNode(t, cs, "wrk-md-0", gm.Spec.ProviderID, "10.10.0.11", false)
	pods, err := cs.CoreV1().Pods(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=wrk-md-0"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pods.Items).To(BeEmpty())
}

// TestMachineWaitsForBootstrapData: no provisioning before the Machine has its bootstrap data.
func TestMachineWaitsForBootstrapData(t *testing.T) {
	requireEnv(t)
	g := NewWithT(t)
	h := newHarness(t)
	f := newFixture(t, newNamespace(t), "boot", nil)
	h.provisionCluster(t, f)
	machine, gm := newMachine(t, f, "boot-cp-0", machineOpts{controlPlane: true, noBootstrap: true})
	for i := 0; i < 3; i++ {
		g.Expect(h.reconcileMachine(t, gm)).To(Equal(ctrl.Result{}))
	}
	get(t, gm)
	g.Expect(gm.Status.Conditions).To(haveCondition(infrav1.VMProvisionedCondition, metav1.ConditionUnknown, infrav1.WaitingForBootstrapDataReason))
	g.Expect(gm.Spec.ProviderID).To(BeEmpty())

	get(t, machine)
	machine.Spec.Bootstrap.DataSecretName = ptr.To("boot-cp-0-bootstrap")
	g.Expect(k8sClient.Update(context.Background(), machine)).To(Succeed())
	h.reconcileUntilReady(t, gm)
}

// TestMachineVersionsAndCapacity: a machine created with a newer version (a KCP rollout) gets a
// Node with that kubelet version and the cluster reports the newest version on /version, while
// kubeadm-config (KCP's to update) is left alone; a machine with spec.capacity gets a Node with
// that capacity, and the defaults for the resources it does not name.
func TestMachineVersionsAndCapacity(t *testing.T) {
	requireEnv(t)
	g := NewWithT(t)
	ctx := context.Background()
	h := newHarness(t)
	f := newFixture(t, newNamespace(t), "upg", nil)
	h.provisionCluster(t, f)
	_, old := newMachine(t, f, "upg-cp-0", machineOpts{controlPlane: true})
	h.reconcileUntilReady(t, old)

	capacity := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("32Gi")}
	_, upgraded := newMachine(t, f, "upg-cp-1", machineOpts{controlPlane: true, version: "v1.36.4", capacity: capacity})
	h.reconcileUntilReady(t, upgraded)

	cs := workloadClient(t, mustListener(t, h, f))
	node, err := cs.CoreV1().Nodes().Get(ctx, "upg-cp-1", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(node.Status.NodeInfo.KubeletVersion).To(Equal("v1.36.4"))
	g.Expect(node.Status.Capacity.Cpu().String()).To(Equal("8"))
	g.Expect(node.Status.Capacity.Memory().String()).To(Equal("32Gi"))
	g.Expect(node.Status.Capacity.Pods().String()).To(Equal("110"))
	g.Expect(node.Status.Allocatable).To(Equal(node.Status.Capacity))
	oldNode, err := cs.CoreV1().Nodes().Get(ctx, "upg-cp-0", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(oldNode.Status.NodeInfo.KubeletVersion).To(Equal(kubernetesVersion))
	g.Expect(oldNode.Status.Capacity).To(Equal(workload.DefaultCapacity()))
	v, err := cs.Discovery().ServerVersion()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(v.GitVersion).To(Equal("v1.36.4"))
	pod, err := cs.CoreV1().Pods(metav1.NamespaceSystem).Get(ctx, "kube-apiserver-upg-cp-1", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pod.Spec.Containers[0].Image).To(Equal("registry.k8s.io/kube-apiserver:v1.36.4"))
	cm, err := cs.CoreV1().ConfigMaps(metav1.NamespaceSystem).Get(ctx, "kubeadm-config", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	_, data, err := kubeadmtypes.UnmarshalClusterConfiguration(cm.Data["ClusterConfiguration"])
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ptr.Deref(data.KubernetesVersion, "")).To(Equal(kubernetesVersion))
}

// TestNodeNotReadyAnnotation: the failure-injection annotation makes the Node NotReady (what a
// MachineHealthCheck watches) and removing it makes it Ready again.
func TestNodeNotReadyAnnotation(t *testing.T) {
	requireEnv(t)
	g := NewWithT(t)
	ctx := context.Background()
	h := newHarness(t)
	f := newFixture(t, newNamespace(t), "sick", nil)
	h.provisionCluster(t, f)
	_, gm := newMachine(t, f, "sick-cp-0", machineOpts{controlPlane: true})
	h.reconcileUntilReady(t, gm)
	cs := workloadClient(t, mustListener(t, h, f))
	ready := func() corev1.ConditionStatus {
		node, err := cs.CoreV1().Nodes().Get(ctx, "sick-cp-0", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status
			}
		}
		return ""
	}
	g.Expect(ready()).To(Equal(corev1.ConditionTrue))

	get(t, gm)
	gm.Annotations = map[string]string{NodeNotReadyAnnotation: "true"}
	g.Expect(k8sClient.Update(ctx, gm)).To(Succeed())
	h.reconcileMachine(t, gm)
	g.Expect(ready()).To(Equal(corev1.ConditionFalse))

	get(t, gm)
	delete(gm.Annotations, NodeNotReadyAnnotation)
	g.Expect(k8sClient.Update(ctx, gm)).To(Succeed())
	h.reconcileMachine(t, gm)
	g.Expect(ready()).To(Equal(corev1.ConditionTrue))
}
