package simulate_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/simulate"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/workload"
)

const deploymentManifest = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 6
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: nginx
        image: nginx:1.27
        resources:
          requests: {cpu: 100m, memory: 64Mi}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: web
spec:
  minAvailable: 5
  selector:
    matchLabels: {app: web}
`

func webPods(g Gomega, e *env) []corev1.Pod {
	list, err := e.cs.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{LabelSelector: "app=web"})
	g.Expect(err).NotTo(HaveOccurred())
	return list.Items
}

// TestDeploymentRollsOutThroughKubectl: a Deployment and its budget applied with kubectl get
// a ReplicaSet, six pods that the scheduler spreads over the two workers (the control-plane
// node's taint keeps them off it), that the kubelets run with IPs from their nodes' podCIDRs,
// and `kubectl rollout status` returns; evictions respect the budget; `rollout restart` and
// `rollout undo` roll the pods over and back.
func TestDeploymentRollsOutThroughKubectl(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t, nil)
	var dep *appsv1.Deployment
	e.addNode("cp-0", "10.0.0.10", true)
	e.addKubeadmObjects()
	e.addNode("worker-0", "10.0.0.20", false)
	e.addNode("worker-1", "10.0.0.21", false)

	// kubeadm's add-ons come up: kube-proxy on every node (it tolerates every taint), CoreDNS.
	e.kubectl(true, "", "-n", "kube-system", "rollout", "status", "daemonset/kube-proxy", "--timeout=60s")
	e.kubectl(true, "", "-n", "kube-system", "rollout", "status", "deployment/coredns", "--timeout=60s")
	proxies, err := e.cs.CoreV1().Pods("kube-system").List(context.Background(), metav1.ListOptions{LabelSelector: "k8s-app=kube-proxy"})
	g.Expect(err).NotTo(HaveOccurred())
	proxyNodes := map[string]bool{}
	for _, p := range proxies.Items {
		g.Expect(p.Status.Phase).To(Equal(corev1.PodRunning))
		g.Expect(p.Spec.HostNetwork).To(BeTrue())
		g.Expect(p.Status.PodIP).To(Equal(p.Status.HostIP), "a host-network pod has its node's address")
		proxyNodes[p.Spec.NodeName] = true
	}
	g.Expect(proxyNodes).To(HaveLen(3), "one kube-proxy per node, the control-plane node included")
	// The kube-dns Service has CoreDNS's pods as its endpoints.
	g.Eventually(func(g Gomega) {
		slices, err := e.cs.DiscoveryV1().EndpointSlices("kube-system").List(context.Background(), metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=kube-dns"})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(slices.Items).To(HaveLen(1))
		g.Expect(slices.Items[0].Endpoints).To(HaveLen(2))
		g.Expect(slices.Items[0].Ports).To(HaveLen(2))
		for _, ep := range slices.Items[0].Endpoints {
			g.Expect(*ep.Conditions.Ready).To(BeTrue())
			g.Expect(ep.TargetRef.Kind).To(Equal("Pod"))
		}
		eps, err := e.cs.CoreV1().Endpoints("kube-system").Get(context.Background(), "kube-dns", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(eps.Subsets).To(HaveLen(1))
		g.Expect(eps.Subsets[0].Addresses).To(HaveLen(2))
	}, 10*time.Second, 50*time.Millisecond).Should(Succeed())

	e.kubectl(true, deploymentManifest, "apply", "-f", "-")
	e.kubectl(true, "", "rollout", "status", "deployment/web", "--timeout=60s")

	pods := webPods(g, e)
	g.Expect(pods).To(HaveLen(6))
	perNode := map[string]int{}
	ips := map[string]bool{}
	for _, p := range pods {
		g.Expect(p.Status.Phase).To(Equal(corev1.PodRunning), p.Name)
		g.Expect(p.Spec.NodeName).To(HavePrefix("worker-"), "the control-plane taint is not tolerated")
		g.Expect(p.Status.PodIP).To(HavePrefix("192.168."), "from the node's podCIDR in kubeadm's pod subnet")
		g.Expect(p.Status.HostIP).To(HavePrefix("10.0.0.2"))
		g.Expect(p.Status.QOSClass).To(Equal(corev1.PodQOSBurstable))
		g.Expect(p.Status.ContainerStatuses).To(HaveLen(1))
		g.Expect(p.Status.ContainerStatuses[0].Ready).To(BeTrue())
		g.Expect(p.Status.ContainerStatuses[0].ImageID).To(HavePrefix("docker.io/library/nginx@sha256:"))
		g.Expect(p.Labels).To(HaveKey(appsv1.DefaultDeploymentUniqueLabelKey))
		perNode[p.Spec.NodeName]++
		ips[p.Status.PodIP] = true
	}
	g.Expect(perNode).To(HaveLen(2), "spread over both workers")
	g.Expect(perNode["worker-0"]).To(BeNumerically(">=", 2), "least-requested spreading")
	g.Expect(perNode["worker-1"]).To(BeNumerically(">=", 2), "least-requested spreading")
	g.Expect(ips).To(HaveLen(6), "every pod has its own IP")

	dep, err = e.cs.AppsV1().Deployments("default").Get(context.Background(), "web", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(dep.Annotations).To(HaveKeyWithValue("deployment.kubernetes.io/revision", "1"))
	g.Expect(dep.Status.AvailableReplicas).To(BeEquivalentTo(6))

	// The disruption controller keeps the budget current: one disruption allowed.
	g.Eventually(func(g Gomega) {
		pdb, err := e.cs.PolicyV1().PodDisruptionBudgets("default").Get(context.Background(), "web", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(pdb.Status.ObservedGeneration).To(Equal(pdb.Generation))
		g.Expect(pdb.Status.CurrentHealthy).To(BeEquivalentTo(6))
		g.Expect(pdb.Status.DesiredHealthy).To(BeEquivalentTo(5))
		g.Expect(pdb.Status.ExpectedPods).To(BeEquivalentTo(6))
		g.Expect(pdb.Status.DisruptionsAllowed).To(BeEquivalentTo(1))
	}, 10*time.Second, 50*time.Millisecond).Should(Succeed())

	// Two evictions at once: the first is allowed, the second would break the budget.
	evict := func(name string) error {
		return e.cs.PolicyV1().Evictions("default").Evict(context.Background(), &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}})
	}
	g.Expect(evict(pods[0].Name)).To(Succeed())
	err = evict(pods[1].Name)
	g.Expect(apierrors.IsTooManyRequests(err)).To(BeTrue(), "%v", err)
	// The ReplicaSet replaces the evicted pod; then the budget allows one disruption again.
	e.kubectl(true, "", "rollout", "status", "deployment/web", "--timeout=60s")
	g.Eventually(func(g Gomega) {
		g.Expect(evict(pods[1].Name)).To(Succeed())
	}, 20*time.Second, 100*time.Millisecond).Should(Succeed())

	// A restart rolls every pod over within maxSurge/maxUnavailable; undo goes back.
	e.kubectl(true, "", "rollout", "restart", "deployment/web")
	e.kubectl(true, "", "rollout", "status", "deployment/web", "--timeout=60s")
	g.Expect(webPods(g, e)).To(ContainElement(HaveField("ObjectMeta.Annotations", HaveKey("kubectl.kubernetes.io/restartedAt"))))
	for _, p := range webPods(g, e) {
		if p.DeletionTimestamp == nil {
			g.Expect(p.Annotations).To(HaveKey("kubectl.kubernetes.io/restartedAt"), "every live pod is of the new template")
		}
	}
	out := e.kubectl(true, "", "rollout", "history", "deployment/web")
	g.Expect(out).To(ContainSubstring("1 "))
	g.Expect(out).To(ContainSubstring("2 "))
	rsList, err := e.cs.AppsV1().ReplicaSets("default").List(context.Background(), metav1.ListOptions{LabelSelector: "app=web"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(rsList.Items).To(HaveLen(2))
	e.kubectl(true, "", "rollout", "undo", "deployment/web")
	e.kubectl(true, "", "rollout", "status", "deployment/web", "--timeout=60s")
	dep, err = e.cs.AppsV1().Deployments("default").Get(context.Background(), "web", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(dep.Annotations).To(HaveKeyWithValue("deployment.kubernetes.io/revision", "3"))
	g.Expect(dep.Spec.Template.Annotations).NotTo(HaveKey("kubectl.kubernetes.io/restartedAt"))
	g.Eventually(func(g Gomega) {
		running := 0
		for _, p := range webPods(g, e) {
			if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
				g.Expect(p.Annotations).NotTo(HaveKey("kubectl.kubernetes.io/restartedAt"))
				running++
			}
		}
		g.Expect(running).To(Equal(6))
	}, 20*time.Second, 100*time.Millisecond).Should(Succeed())
}

// TestWorkloadsResumeAfterRestart: a cluster restored from its state on disk keeps its pods
// (same UIDs, same IPs, still Running), and its controllers pick up where they were.
func TestWorkloadsResumeAfterRestart(t *testing.T) {
	g := NewWithT(t)
	e, db := newDurableWorkerEnv(t)
	e.addNode("worker-1", "10.0.0.21", false)
	e.kubectl(true, deploymentManifest, "apply", "-f", "-")
	e.kubectl(true, "", "rollout", "status", "deployment/web", "--timeout=60s")
	before := map[types.UID]string{}
	for _, p := range webPods(g, e) {
		before[p.UID] = p.Status.PodIP
	}
	g.Expect(before).To(HaveLen(6))
	e.stop()

	e = newEnv(t, db)
	// Nothing moves on its own: the same pods run with the same addresses.
	g.Consistently(func(g Gomega) {
		after := map[types.UID]string{}
		for _, p := range webPods(g, e) {
			g.Expect(p.Status.Phase).To(Equal(corev1.PodRunning))
			after[p.UID] = p.Status.PodIP
		}
		g.Expect(after).To(Equal(before))
	}, time.Second, 100*time.Millisecond).Should(Succeed())
	// And the controllers go on: a scale-up rolls out.
	e.kubectl(true, "", "scale", "deployment/web", "--replicas=8")
	e.kubectl(true, "", "rollout", "status", "deployment/web", "--timeout=60s")
	g.Expect(webPods(g, e)).To(HaveLen(8))
}

// TestUnschedulablePodsWait: a pod that fits no node stays Pending with kube-scheduler's
// condition and event, and is scheduled once a node with room registers; a pod naming a node
// that does not exist stays Pending.
func TestUnschedulablePodsWait(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t, nil)
	e.addNode("cp-0", "10.0.0.10", true)
	e.addNode("worker-0", "10.0.0.20", false)
	e.addKubeadmObjects()
	ctx := context.Background()
	big := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "big", Namespace: "default"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{
		Name: "c", Image: "busybox", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3")}}}}}}
	_, err := e.cs.CoreV1().Pods("default").Create(ctx, big, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	ghost := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "ghost", Namespace: "default"}, Spec: corev1.PodSpec{NodeName: "nowhere",
		Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
	_, err = e.cs.CoreV1().Pods("default").Create(ctx, ghost, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())

	want := "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }. " +
		"preemption: 0/2 nodes are available: 1 No preemption victims found for incoming pod, 1 Preemption is not helpful for scheduling."
	g.Eventually(func(g Gomega) {
		p, err := e.cs.CoreV1().Pods("default").Get(ctx, "big", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(p.Status.Phase).To(Equal(corev1.PodPending))
		g.Expect(p.Status.Conditions).To(ContainElement(And(
			HaveField("Type", corev1.PodScheduled), HaveField("Status", corev1.ConditionFalse),
			HaveField("Reason", corev1.PodReasonUnschedulable), HaveField("Message", want))))
	}, 10*time.Second, 50*time.Millisecond).Should(Succeed())
	g.Eventually(func(g Gomega) {
		events, err := e.cs.EventsV1().Events("default").List(ctx, metav1.ListOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(events.Items).To(ContainElement(And(HaveField("Reason", "FailedScheduling"), HaveField("Note", want),
			HaveField("Regarding.Name", "big"), HaveField("Type", corev1.EventTypeWarning))))
	}, 5*time.Second, 50*time.Millisecond).Should(Succeed())

	// A bigger node registers: the pod is scheduled there and runs.
	e.addBigNode("worker-big", "10.0.0.30")
	g.Eventually(func(g Gomega) {
		p, err := e.cs.CoreV1().Pods("default").Get(ctx, "big", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(p.Spec.NodeName).To(Equal("worker-big"))
		g.Expect(p.Status.Phase).To(Equal(corev1.PodRunning))
	}, 10*time.Second, 50*time.Millisecond).Should(Succeed())
	p, err := e.cs.CoreV1().Pods("default").Get(ctx, "ghost", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(p.Status.Phase).To(Equal(corev1.PodPending), "no kubelet runs for a node that does not exist")
}

// TestNodeLifecycle: `kubectl drain` cordons a node (its unschedulable taint follows) and
// evicts its pods, which come back on the other node; a node that turns NotReady gets the
// not-ready taints, and a pod that tolerates them for 1 s is evicted by the taint eviction
// controller after that second, while the DaemonSet's pod and pods with the default 300 s stay.
func TestNodeLifecycle(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t, nil)
	e.addKubeadmObjects()
	e.addNode("worker-0", "10.0.0.20", false)
	e.addNode("worker-1", "10.0.0.21", false)
	ctx := context.Background()
	e.kubectl(true, deploymentManifest, "apply", "-f", "-")
	e.kubectl(true, "", "rollout", "status", "deployment/web", "--timeout=60s")
	e.kubectl(true, "", "-n", "kube-system", "rollout", "status", "daemonset/kube-proxy", "--timeout=60s")
	for _, p := range webPods(g, e) {
		g.Expect(p.Spec.Tolerations).To(ContainElement(corev1.Toleration{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists,
			Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)}), "DefaultTolerationSeconds admission")
	}

	// kubectl drain: cordon, then evictions that respect the budget (minAvailable 5 of 6).
	e.kubectl(true, "", "drain", "worker-0", "--ignore-daemonsets", "--timeout=90s")
	node, err := e.cs.CoreV1().Nodes().Get(ctx, "worker-0", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(node.Spec.Unschedulable).To(BeTrue())
	g.Eventually(func(g Gomega) {
		node, err := e.cs.CoreV1().Nodes().Get(ctx, "worker-0", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(node.Spec.Taints).To(ContainElement(HaveField("Key", corev1.TaintNodeUnschedulable)))
	}, 5*time.Second, 50*time.Millisecond).Should(Succeed())
	e.kubectl(true, "", "rollout", "status", "deployment/web", "--timeout=60s")
	for _, p := range webPods(g, e) {
		if p.DeletionTimestamp == nil {
			g.Expect(p.Spec.NodeName).To(Equal("worker-1"), "nothing is scheduled onto the cordoned node")
		}
	}
	e.kubectl(true, "", "uncordon", "worker-0")

	// A pod on worker-1 that tolerates not-ready for 1 s only.
	brief := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "brief", Namespace: "default"}, Spec: corev1.PodSpec{NodeName: "worker-1",
		Containers:  []corev1.Container{{Name: "c", Image: "busybox"}},
		Tolerations: []corev1.Toleration{{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](1)}}}}
	_, err = e.cs.CoreV1().Pods("default").Create(ctx, brief, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func(g Gomega) {
		p, err := e.cs.CoreV1().Pods("default").Get(ctx, "brief", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(p.Status.Phase).To(Equal(corev1.PodRunning))
	}, 10*time.Second, 50*time.Millisecond).Should(Succeed())

	// worker-1 turns NotReady, as the machine controller's nodeNotReady fault makes it.
	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n := &corev1.Node{}
		if err := e.client.Get(ctx, client.ObjectKey{Name: "worker-1"}, n); err != nil {
			return err
		}
		workload.SetNodeReady(n, false, metav1.Now())
		return e.client.Status().Update(ctx, n)
	})).To(Succeed())
	g.Eventually(func(g Gomega) {
		n, err := e.cs.CoreV1().Nodes().Get(ctx, "worker-1", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(n.Spec.Taints).To(ContainElements(
			And(HaveField("Key", corev1.TaintNodeNotReady), HaveField("Effect", corev1.TaintEffectNoSchedule)),
			And(HaveField("Key", corev1.TaintNodeNotReady), HaveField("Effect", corev1.TaintEffectNoExecute), HaveField("TimeAdded", Not(BeNil())))))
	}, 5*time.Second, 50*time.Millisecond).Should(Succeed())
	g.Eventually(func(g Gomega) {
		_, err := e.cs.CoreV1().Pods("default").Get(ctx, "brief", metav1.GetOptions{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "evicted once its toleration ran out: %v", err)
	}, 10*time.Second, 100*time.Millisecond).Should(Succeed())
	// The web pods tolerate for 300 s and stay (not ready: their node is not); kube-proxy tolerates for ever.
	for _, p := range webPods(g, e) {
		if p.Spec.NodeName == "worker-1" {
			g.Expect(p.DeletionTimestamp).To(BeNil(), p.Name)
		}
	}
	proxies, err := e.cs.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-proxy", FieldSelector: "spec.nodeName=worker-1"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(proxies.Items).To(HaveLen(1))
	g.Expect(proxies.Items[0].DeletionTimestamp).To(BeNil())
}

const jobManifest = `apiVersion: batch/v1
kind: Job
metadata:
  name: batch
spec:
  completions: 3
  parallelism: 2
  ttlSecondsAfterFinished: 2
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: task
        image: busybox
        command: ["true"]
`

// TestJobCompletes: a Job's pods run to completion, parallelism at a time, until its
// completions succeeded; `kubectl wait --for=condition=complete` returns; the pods lose their
// tracking finalizer once counted; ttlSecondsAfterFinished deletes the Job and its pods.
func TestJobCompletes(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t, nil)
	e.addKubeadmObjects()
	e.addNode("worker-0", "10.0.0.20", false)
	ctx := context.Background()
	e.kubectl(true, jobManifest, "apply", "-f", "-")
	e.kubectl(true, "", "wait", "--for=condition=complete", "job/batch", "--timeout=60s")

	job, err := e.cs.BatchV1().Jobs("default").Get(ctx, "batch", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(job.Status.Succeeded).To(BeEquivalentTo(3))
	g.Expect(job.Status.Active).To(BeZero())
	g.Expect(job.Status.StartTime).NotTo(BeNil())
	g.Expect(job.Status.CompletionTime).NotTo(BeNil())
	g.Expect(job.Status.Conditions).To(HaveLen(2))
	g.Expect(job.Status.Conditions[0].Type).To(Equal(batchv1.JobSuccessCriteriaMet))
	g.Expect(job.Status.Conditions[1].Type).To(Equal(batchv1.JobComplete))
	g.Expect(job.Spec.Selector.MatchLabels).To(HaveKeyWithValue(batchv1.ControllerUidLabel, string(job.UID)))
	pods, err := e.cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: batchv1.JobNameLabel + "=batch"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pods.Items).To(HaveLen(3))
	for _, p := range pods.Items {
		g.Expect(p.Status.Phase).To(Equal(corev1.PodSucceeded))
		g.Expect(p.Status.ContainerStatuses[0].State.Terminated).NotTo(BeNil())
		g.Expect(p.Status.ContainerStatuses[0].State.Terminated.Reason).To(Equal("Completed"))
	}
	g.Eventually(func(g Gomega) {
		pods, err := e.cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: batchv1.JobNameLabel + "=batch"})
		g.Expect(err).NotTo(HaveOccurred())
		for _, p := range pods.Items {
			g.Expect(p.Finalizers).NotTo(ContainElement(batchv1.JobTrackingFinalizer))
		}
	}, 5*time.Second, 50*time.Millisecond).Should(Succeed())
	// ttlSecondsAfterFinished: the Job and its pods go.
	g.Eventually(func(g Gomega) {
		_, err := e.cs.BatchV1().Jobs("default").Get(ctx, "batch", metav1.GetOptions{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%v", err)
		pods, err := e.cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: batchv1.JobNameLabel + "=batch"})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(pods.Items).To(BeEmpty())
	}, 15*time.Second, 100*time.Millisecond).Should(Succeed())
}

const statefulSetManifest = `apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: db
spec:
  serviceName: db
  replicas: 3
  selector:
    matchLabels: {app: db}
  template:
    metadata:
      labels: {app: db}
    spec:
      containers:
      - name: db
        image: postgres:17
`

// TestStatefulSetOrdered: a StatefulSet's pods are db-0, db-1, db-2, each created once the one
// before runs and is ready; `kubectl rollout status` follows a template change, which replaces
// the pods from the highest ordinal down; scaling down removes the highest ordinals.
func TestStatefulSetOrdered(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t, nil)
	e.addKubeadmObjects()
	e.addNode("worker-0", "10.0.0.20", false)
	ctx := context.Background()
	e.kubectl(true, statefulSetManifest, "apply", "-f", "-")
	e.kubectl(true, "", "rollout", "status", "statefulset/db", "--timeout=60s")
	pods, err := e.cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=db"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pods.Items).To(HaveLen(3))
	started := map[string]time.Time{}
	for _, p := range pods.Items {
		g.Expect(p.Status.Phase).To(Equal(corev1.PodRunning))
		g.Expect(p.Spec.Hostname).To(Equal(p.Name))
		g.Expect(p.Spec.Subdomain).To(Equal("db"))
		g.Expect(p.Labels).To(HaveKeyWithValue(appsv1.StatefulSetPodNameLabel, p.Name))
		started[p.Name] = podCondition(p, corev1.PodScheduled)
	}
	g.Expect(started).To(HaveKey("db-0"))
	g.Expect(started).To(HaveKey("db-2"))
	g.Expect(started["db-1"].Before(started["db-0"])).To(BeFalse(), "OrderedReady: db-1 after db-0")
	g.Expect(started["db-2"].Before(started["db-1"])).To(BeFalse(), "OrderedReady: db-2 after db-1")

	e.kubectl(true, "", "set", "image", "statefulset/db", "db=postgres:18")
	e.kubectl(true, "", "rollout", "status", "statefulset/db", "--timeout=60s")
	pods, err = e.cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=db"})
	g.Expect(err).NotTo(HaveOccurred())
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			g.Expect(p.Spec.Containers[0].Image).To(Equal("postgres:18"), p.Name)
		}
	}
	e.kubectl(true, "", "scale", "statefulset/db", "--replicas=1")
	g.Eventually(func(g Gomega) {
		pods, err := e.cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=db"})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(pods.Items).To(HaveLen(1))
		g.Expect(pods.Items[0].Name).To(Equal("db-0"))
	}, 20*time.Second, 100*time.Millisecond).Should(Succeed())
}

func podCondition(p corev1.Pod, t corev1.PodConditionType) time.Time {
	for _, c := range p.Status.Conditions {
		if c.Type == t {
			return c.LastTransitionTime.Time
		}
	}
	return time.Time{}
}

// TestReplicationController: kubectl's oldest workload keeps its replicas and scales.
func TestReplicationController(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t, nil)
	e.addKubeadmObjects()
	e.addNode("worker-0", "10.0.0.20", false)
	ctx := context.Background()
	e.kubectl(true, `apiVersion: v1
kind: ReplicationController
metadata:
  name: legacy
spec:
  replicas: 3
  template:
    metadata:
      labels: {app: legacy}
    spec:
      containers:
      - {name: c, image: nginx}
`, "apply", "-f", "-")
	running := func(n int) func(g Gomega) {
		return func(g Gomega) {
			rc, err := e.cs.CoreV1().ReplicationControllers("default").Get(ctx, "legacy", metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(rc.Spec.Selector).To(Equal(map[string]string{"app": "legacy"}), "defaulted from the template")
			g.Expect(rc.Status.ReadyReplicas).To(BeEquivalentTo(n))
			g.Expect(rc.Status.Replicas).To(BeEquivalentTo(n))
		}
	}
	g.Eventually(running(3), 10*time.Second, 50*time.Millisecond).Should(Succeed())
	e.kubectl(true, "", "scale", "rc/legacy", "--replicas=1")
	g.Eventually(running(1), 10*time.Second, 50*time.Millisecond).Should(Succeed())
}

// TestCronJobStartsJobs: a CronJob whose last run was minutes ago is due: it starts the Job of
// the latest missed time (named after it), which completes, and the CronJob records it.
func TestCronJobStartsJobs(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t, nil)
	e.addKubeadmObjects()
	e.addNode("worker-0", "10.0.0.20", false)
	ctx := context.Background()
	e.kubectl(true, `apiVersion: batch/v1
kind: CronJob
metadata:
  name: nightly
spec:
  schedule: "*/1 * * * *"
  concurrencyPolicy: Forbid
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: OnFailure
          containers:
          - {name: task, image: busybox}
`, "apply", "-f", "-")
	// Not at a minute's end: the scheduled time the test expects must not move on meanwhile.
	if left := time.Until(time.Now().Truncate(time.Minute).Add(time.Minute)); left < 3*time.Second {
		time.Sleep(left + 100*time.Millisecond)
	}
	// As if the controller had last run it three minutes ago.
	last := metav1.NewTime(time.Now().Add(-3 * time.Minute).Truncate(time.Minute))
	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cj, err := e.cs.BatchV1().CronJobs("default").Get(ctx, "nightly", metav1.GetOptions{})
		if err != nil {
			return err
		}
		cj.Status.LastScheduleTime = &last
		_, err = e.cs.BatchV1().CronJobs("default").UpdateStatus(ctx, cj, metav1.UpdateOptions{})
		return err
	})).To(Succeed())
	latest := time.Now().Truncate(time.Minute)
	name := fmt.Sprintf("nightly-%d", latest.Unix()/60)
	// kubectl wait fails at once on a Job the controller has not created yet.
	g.Eventually(func() error {
		_, err := e.cs.BatchV1().Jobs("default").Get(ctx, name, metav1.GetOptions{})
		return err
	}, safetyTimeout, poll).Should(Succeed())
	e.kubectl(true, "", "wait", "--for=condition=complete", "job/"+name, "--timeout=60s")
	g.Eventually(func(g Gomega) {
		cj, err := e.cs.BatchV1().CronJobs("default").Get(ctx, "nightly", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(cj.Status.LastScheduleTime.Time).To(BeTemporally("==", latest))
		g.Expect(cj.Status.LastSuccessfulTime).NotTo(BeNil())
		g.Expect(cj.Status.Active).To(BeEmpty())
	}, 10*time.Second, 50*time.Millisecond).Should(Succeed())
	jobs, err := e.cs.BatchV1().Jobs("default").List(ctx, metav1.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(jobs.Items).To(HaveLen(1), "one Job for the latest missed time, not one per missed time")
	g.Expect(jobs.Items[0].Annotations).To(HaveKeyWithValue(batchv1.CronJobScheduledTimestampAnnotation, latest.UTC().Format(time.RFC3339)))
}

// TestConfigurePerCluster: a cluster's own settings (GoofyCluster spec.simulation.workloads)
// turn its workloads off, so that a Deployment reports its rollout with no pod, and on again
// with a slower kubelet, whose pods start only after the cluster's own delay.
func TestConfigurePerCluster(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t, nil)
	e.addKubeadmObjects()
	e.addNode("worker-0", "10.0.0.20", false)
	e.addNode("worker-1", "10.0.0.21", false)

	e.sim.Configure("test", simulate.ClusterOptions{Workloads: simulate.WorkloadsOff})
	e.kubectl(true, deploymentManifest, "apply", "-f", "-")
	e.kubectl(true, "", "rollout", "status", "deployment/web", "--timeout=30s")
	g.Consistently(func(g Gomega) {
		g.Expect(webPods(g, e)).To(BeEmpty())
	}, time.Second, 100*time.Millisecond).Should(Succeed())

	const delay = 3 * time.Second
	e.sim.Configure("test", simulate.ClusterOptions{PodStartDelay: delay})
	// The controllers take the Deployment over: six pods, started no sooner than the delay
	// after their creation (timestamps have whole seconds).
	g.Eventually(func(g Gomega) {
		pods := webPods(g, e)
		g.Expect(pods).To(HaveLen(6))
		for _, p := range pods {
			g.Expect(p.Status.Phase).To(Equal(corev1.PodRunning))
			g.Expect(p.Status.ContainerStatuses).NotTo(BeEmpty())
			started := p.Status.ContainerStatuses[0].State.Running.StartedAt.Time
			g.Expect(started.Sub(p.CreationTimestamp.Time)).To(BeNumerically(">=", delay-time.Second))
		}
	}, 30*time.Second, 200*time.Millisecond).Should(Succeed())
	e.kubectl(true, "", "rollout", "status", "deployment/web", "--timeout=30s")
}

// TestTenThousandReplicas: a Deployment of 10,000 replicas in a cluster of two workers gets its
// 10,000 pods (created at most 500 per ReplicaSet sync, as upstream), no more; the nodes take as
// many as their pod capacity allows and the rest wait Pending and Unschedulable, while the API
// keeps answering.
func TestTenThousandReplicas(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t, nil)
	e.addNode("worker-0", "10.0.0.20", false)
	e.addNode("worker-1", "10.0.0.21", false)
	ctx := context.Background()
	labels := map[string]string{"app": "many"}
	_, err := e.cs.AppsV1().Deployments("default").Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "many"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](10000),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}},
		},
	}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())

	count := func(g Gomega) (total, bound int) {
		list := &corev1.PodList{}
		g.Expect(e.client.List(ctx, list, client.InNamespace("default"))).To(Succeed())
		perNode := map[string]int{}
		for _, p := range list.Items {
			if p.Spec.NodeName != "" {
				perNode[p.Spec.NodeName]++
				bound++
			}
		}
		for node, n := range perNode {
			g.Expect(n).To(BeNumerically("<=", 110), "pods on %s beyond its capacity", node)
		}
		return len(list.Items), bound
	}
	g.Eventually(func(g Gomega) {
		// The API answers while the controllers work.
		_, err := e.cs.CoreV1().Nodes().Get(ctx, "worker-0", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		total, bound := count(g)
		g.Expect(total).To(Equal(10000))
		g.Expect(bound).To(Equal(220))
	}, 2*time.Minute, time.Second).Should(Succeed())
	g.Consistently(func(g Gomega) {
		total, _ := count(g)
		g.Expect(total).To(Equal(10000), "no more pods than replicas")
	}, 2*time.Second, 500*time.Millisecond).Should(Succeed())

	// A pending pod says why, as kube-scheduler does.
	list := &corev1.PodList{}
	g.Expect(e.client.List(ctx, list, client.InNamespace("default"))).To(Succeed())
	var pending *corev1.Pod
	for i := range list.Items {
		if list.Items[i].Spec.NodeName == "" {
			pending = &list.Items[i]
			break
		}
	}
	g.Expect(pending).NotTo(BeNil())
	g.Eventually(func(g Gomega) {
		p := &corev1.Pod{}
		g.Expect(e.client.Get(ctx, client.ObjectKeyFromObject(pending), p)).To(Succeed())
		var cond *corev1.PodCondition
		for i := range p.Status.Conditions {
			if p.Status.Conditions[i].Type == corev1.PodScheduled {
				cond = &p.Status.Conditions[i]
			}
		}
		g.Expect(cond).NotTo(BeNil())
		g.Expect(cond.Reason).To(Equal(corev1.PodReasonUnschedulable))
		g.Expect(cond.Message).To(HavePrefix("0/2 nodes are available: 2 Too many pods."))
	}, 30*time.Second, 200*time.Millisecond).Should(Succeed())
	dep, err := e.cs.AppsV1().Deployments("default").Get(ctx, "many", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(dep.Status.Replicas).To(Equal(int32(10000)))
}

// TestClusterRoleAggregationInProcess: a ClusterRole labelled to aggregate into view, written
// in process (as Goofy's own controllers write, not through the API server), shows in view's
// stored rules, with workloads off too.
func TestClusterRoleAggregationInProcess(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t, nil)
	e.sim.Configure("test", simulate.ClusterOptions{Workloads: simulate.WorkloadsOff})
	ctx := context.Background()
	for _, obj := range workload.DefaultRBAC() {
		g.Expect(e.client.Create(ctx, obj)).To(Succeed())
	}
	rule := rbacv1.PolicyRule{Verbs: []string{"list"}, APIGroups: []string{"gadgets.example.com"}, Resources: []string{"gadgets"}}
	g.Expect(e.client.Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "gadget-viewer", Labels: map[string]string{"rbac.authorization.k8s.io/aggregate-to-view": "true"}},
		Rules:      []rbacv1.PolicyRule{rule},
	})).To(Succeed())
	g.Eventually(func(g Gomega) {
		view, err := e.cs.RbacV1().ClusterRoles().Get(ctx, "view", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(view.Rules).To(ContainElement(rule))
	}, 10*time.Second, 100*time.Millisecond).Should(Succeed())
}
