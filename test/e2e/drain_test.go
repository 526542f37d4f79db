package e2e

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// controlPlaneRole is kubeadm's label and taint key of control-plane nodes.
const controlPlaneRole = "node-role.kubernetes.io/control-plane"

// budgetedWorkload is a Deployment of two replicas under a PodDisruptionBudget of minAvailable 1
// in a workload cluster, and a watch on the Deployment that records the fewest ready replicas
// seen: CAPI's drain evicts its pods through pods/eviction, which refuses (429) while the budget
// allows no disruption, and the ReplicaSet re-creates them on the nodes that stay.
type budgetedWorkload struct {
	cs        *kubernetes.Clientset
	placement workloadPlacement
	// podsBefore are the pods' names before the drain: the ones after must all be new.
	podsBefore []string
	minReady   atomic.Int32
	stop       context.CancelFunc
	done       chan struct{}
}

const budgetedName = "budgeted"

// workloadPlacement says where the budgeted workload's pods may run.
type workloadPlacement int

const (
	// onWorkers: wherever the scheduler puts them (the control-plane nodes' taint keeps them off
	// those).
	onWorkers workloadPlacement = iota
	// onControlPlane: only on control-plane nodes (a nodeSelector on kubeadm's role label, and a
	// toleration of its NoSchedule taint), so that a KCP rollout's drain is what moves them.
	onControlPlane
	// onReplacedWorkers: as onWorkers, on workers that a rollout replaces one and all, so that
	// every pod must have been evicted and re-created by the end.
	onReplacedWorkers
)

func startBudgetedWorkload(ctx context.Context, t *testing.T, g Gomega, cs *kubernetes.Clientset, placement workloadPlacement) *budgetedWorkload {
	t.Helper()
	labels := map[string]string{"app": budgetedName}
	podSpec := corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10",
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m")}}}}}
	if placement == onControlPlane {
		podSpec.NodeSelector = map[string]string{controlPlaneRole: ""}
		podSpec.Tolerations = []corev1.Toleration{{Key: controlPlaneRole, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: budgetedName, Namespace: metav1.NamespaceDefault},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: podSpec},
		},
	}
	_, err := cs.AppsV1().Deployments(dep.Namespace).Create(ctx, dep, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: budgetedName, Namespace: metav1.NamespaceDefault},
		Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{MatchLabels: labels}},
	}
	_, err = cs.PolicyV1().PodDisruptionBudgets(pdb.Namespace).Create(ctx, pdb, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	var rv string
	g.Eventually(func(g Gomega) {
		d, err := cs.AppsV1().Deployments(dep.Namespace).Get(ctx, dep.Name, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(d.Status.AvailableReplicas).To(BeEquivalentTo(2))
		p, err := cs.PolicyV1().PodDisruptionBudgets(pdb.Namespace).Get(ctx, pdb.Name, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(p.Status.DisruptionsAllowed).To(BeEquivalentTo(1))
		rv = d.ResourceVersion
	}, time.Minute, 200*time.Millisecond).Should(Succeed())

	pods, err := cs.CoreV1().Pods(dep.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app=" + budgetedName})
	g.Expect(err).NotTo(HaveOccurred())
	var before []string
	for _, p := range pods.Items {
		before = append(before, p.Name)
	}
	w, err := cs.AppsV1().Deployments(dep.Namespace).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + dep.Name, ResourceVersion: rv})
	g.Expect(err).NotTo(HaveOccurred())
	b := &budgetedWorkload{cs: cs, placement: placement, podsBefore: before, done: make(chan struct{})}
	b.minReady.Store(2)
	wctx, cancel := context.WithCancel(ctx)
	b.stop = cancel
	go func() {
		defer close(b.done)
		defer w.Stop()
		for {
			select {
			case <-wctx.Done():
				return
			case ev, ok := <-w.ResultChan():
				if !ok {
					return
				}
				if d, isDep := ev.Object.(*appsv1.Deployment); isDep && d.Status.ReadyReplicas < b.minReady.Load() {
					b.minReady.Store(d.Status.ReadyReplicas)
				}
			}
		}
	}()
	return b
}

// check asserts that the budget held throughout and that both replicas run again, on nodes
// that are still there.
func (b *budgetedWorkload) check(ctx context.Context, g Gomega) {
	b.stop()
	<-b.done
	g.Expect(b.minReady.Load()).To(BeNumerically(">=", 1), "the drain took ready replicas below the budget's minAvailable")
	g.Eventually(func(g Gomega) {
		d, err := b.cs.AppsV1().Deployments(metav1.NamespaceDefault).Get(ctx, budgetedName, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(d.Status.AvailableReplicas).To(BeEquivalentTo(2))
		pods, err := b.cs.CoreV1().Pods(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{LabelSelector: "app=" + budgetedName})
		g.Expect(err).NotTo(HaveOccurred())
		running := 0
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil {
				continue
			}
			g.Expect(p.Status.Phase).To(Equal(corev1.PodRunning), p.Name)
			node, err := b.cs.CoreV1().Nodes().Get(ctx, p.Spec.NodeName, metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred(), "%s runs on %s", p.Name, p.Spec.NodeName)
			if b.placement == onControlPlane {
				g.Expect(node.Labels).To(HaveKey(controlPlaneRole), "%s runs on %s", p.Name, p.Spec.NodeName)
			}
			if b.placement != onWorkers {
				// The nodes the pods ran on before the rollout are gone: every pod was evicted
				// and re-created.
				g.Expect(b.podsBefore).NotTo(ContainElement(p.Name), "%s was not moved by the drain", p.Name)
			}
			running++
		}
		g.Expect(running).To(Equal(2))
	}, time.Minute, 500*time.Millisecond).Should(Succeed())
	// Gone again, so that the budget holds up no later drain: a remediation deletes a NotReady
	// node, whose pods are not ready, and a budget without healthy pods allows no eviction
	// (upstream's IfHealthyBudget) until the taint eviction controller deletes them, 300 s on.
	g.Expect(b.cs.PolicyV1().PodDisruptionBudgets(metav1.NamespaceDefault).Delete(ctx, budgetedName, metav1.DeleteOptions{})).To(Succeed())
	g.Expect(b.cs.AppsV1().Deployments(metav1.NamespaceDefault).Delete(ctx, budgetedName, metav1.DeleteOptions{})).To(Succeed())
}
