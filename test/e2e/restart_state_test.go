package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/goofy-capi/cluster-api-provider-goofy/test/e2e/harness"
)

// workloadState is what users, add-on tools and CAPI put into a workload cluster before the
// manager is killed, and an informer that runs across the restart.
type workloadState struct {
	cluster  string
	userCM   types.UID
	nodeName string
	// pods are the cluster's Running pods before the kill (CoreDNS, kube-proxy, the add-on's),
	// UID -> pod IP: the same ones must run after the restart.
	pods map[types.UID]string

	mu   sync.Mutex
	seen map[string]string // ConfigMap name -> newest resourceVersion the informer delivered
	stop chan struct{}
}

const (
	crsAddonName = "restart-addon"   // the ClusterResourceSet and its ConfigMap in the management cluster
	crsObject    = "applied-by-crs"  // the ConfigMap it applies to the workload cluster
	crsGadget    = "gadget-by-crs"   // the custom resource (of a CRD it applies too) and Deployment it applies
	userCMName   = "written-by-user" // a ConfigMap a user writes into the workload cluster
	userLabel    = "e2e.goofy.dev/user"
	userTaint    = "e2e.goofy.dev/user-taint"
)

func workloadConfig(ctx context.Context, g Gomega, cluster string) *rest.Config {
	sec := &corev1.Secret{}
	g.Expect(plane.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: cluster + "-kubeconfig"}, sec)).To(Succeed())
	cfg, err := clientcmd.RESTConfigFromKubeConfig(sec.Data["value"])
	g.Expect(err).NotTo(HaveOccurred())
	return cfg
}

func workloadREST(ctx context.Context, g Gomega, cluster string) *kubernetes.Clientset {
	cs, err := kubernetes.NewForConfig(workloadConfig(ctx, g, cluster))
	g.Expect(err).NotTo(HaveOccurred())
	return cs
}

// prepareWorkloadState writes into the cluster through CAPI's ClusterResourceSet, as a user would
// (a ConfigMap, a Node label and taint), and starts an informer on its ConfigMaps.
func prepareWorkloadState(ctx context.Context, t *testing.T, g Gomega, cluster string) *workloadState {
	t.Helper()
	// The add-on: a CRD, one of its objects and a Deployment, as an add-on ships them, and the
	// ConfigMap the restart checks. CRS applies the documents in order.
	addon := fmt.Sprintf(`apiVersion: v1
kind: ConfigMap
metadata:
  name: %[1]s
  namespace: %[2]s
data:
  addon.yaml: |
    apiVersion: apiextensions.k8s.io/v1
    kind: CustomResourceDefinition
    metadata:
      name: gadgets.addons.example.com
    spec:
      group: addons.example.com
      scope: Namespaced
      names: {plural: gadgets, singular: gadget, kind: Gadget, listKind: GadgetList}
      versions:
      - name: v1
        served: true
        storage: true
        schema:
          openAPIV3Schema:
            type: object
            properties:
              spec:
                type: object
                properties:
                  mode: {type: string, default: standard}
    ---
    apiVersion: addons.example.com/v1
    kind: Gadget
    metadata:
      name: %[4]s
      namespace: default
    spec: {}
    ---
    apiVersion: apps/v1
    kind: Deployment
    metadata:
      name: %[4]s
      namespace: default
    spec:
      replicas: 1
      selector: {matchLabels: {app: %[4]s}}
      template:
        metadata: {labels: {app: %[4]s}}
        spec:
          containers:
          - {name: addon, image: registry.invalid/addon:1.0}
    ---
    apiVersion: v1
    kind: ConfigMap
    metadata:
      name: %[3]s
      namespace: default
    data:
      from: clusterresourceset
---
apiVersion: addons.cluster.x-k8s.io/v1beta2
kind: ClusterResourceSet
metadata:
  name: %[1]s
  namespace: %[2]s
spec:
  clusterSelector:
    matchLabels:
      %[1]s: "true"
  resources:
  - kind: ConfigMap
    name: %[1]s
`, crsAddonName, ns, crsObject, crsGadget)
	_, err := plane.Apply(ctx, []byte(addon))
	g.Expect(err).NotTo(HaveOccurred())
	c := &clusterv1.Cluster{}
	g.Expect(plane.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: cluster}, c)).To(Succeed())
	patch := client.MergeFrom(c.DeepCopy())
	if c.Labels == nil {
		c.Labels = map[string]string{}
	}
	c.Labels[crsAddonName] = "true"
	g.Expect(plane.Client.Patch(ctx, c, patch)).To(Succeed())

	cs := workloadREST(ctx, g, cluster)
	g.Eventually(func() error {
		_, err := cs.CoreV1().ConfigMaps("default").Get(ctx, crsObject, metav1.GetOptions{})
		return err
	}, 2*time.Minute).Should(Succeed(), "the ClusterResourceSet did not apply its ConfigMap")
	g.Eventually(func() (bool, error) { return crsApplied(ctx, cluster) }, 2*time.Minute).Should(BeTrue(),
		"the ClusterResourceSetBinding does not report the add-on applied")
	gadget := checkGadget(ctx, g, cluster)
	g.Expect(gadget.Object).To(HaveKeyWithValue("spec", HaveKeyWithValue("mode", "standard")), "defaulted by the CRD's schema")
	_, err = cs.AppsV1().Deployments("default").Get(ctx, crsGadget, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred(), "the ClusterResourceSet's Deployment")

	cm, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: userCMName, Labels: map[string]string{userLabel: "yes"}},
		Data:       map[string]string{"k": "before"},
	}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(nodes.Items).NotTo(BeEmpty())
	node := nodes.Items[0].DeepCopy()
	node.Labels[userLabel] = "kept"
	node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: userTaint, Value: "x", Effect: corev1.TaintEffectNoSchedule})
	_, err = cs.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
	g.Expect(err).NotTo(HaveOccurred())

	// The simulated kubelets run the add-on's pod and kubeadm's (CoreDNS, one kube-proxy per node).
	var pods map[types.UID]string
	g.Eventually(func(g Gomega) {
		pods = runningPods(ctx, g, cs, "")
		g.Expect(runningPods(ctx, g, cs, "app="+crsGadget)).To(HaveLen(1), "the add-on's pod")
		g.Expect(runningPods(ctx, g, cs, "k8s-app=kube-dns")).To(HaveLen(2), "CoreDNS's pods")
	}, 2*time.Minute, time.Second).Should(Succeed())
	s := &workloadState{cluster: cluster, userCM: cm.UID, nodeName: node.Name, pods: pods, seen: map[string]string{}, stop: make(chan struct{})}
	t.Cleanup(func() { close(s.stop) })
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace("default"))
	inf := factory.Core().V1().ConfigMaps().Informer()
	record := func(obj any) {
		if cm, ok := obj.(*corev1.ConfigMap); ok {
			s.mu.Lock()
			s.seen[cm.Name] = cm.ResourceVersion
			s.mu.Unlock()
		}
	}
	_, err = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: record, UpdateFunc: func(_, n any) { record(n) }})
	g.Expect(err).NotTo(HaveOccurred())
	factory.Start(s.stop)
	g.Expect(cache.WaitForCacheSync(ctx.Done(), inf.HasSynced)).To(BeTrue())
	g.Expect(s.rv(userCMName)).NotTo(BeEmpty())
	return s
}

func (s *workloadState) rv(name string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen[name]
}

// checkAfterRestart: everything written before the kill is there, the informer that ran across
// the restart sees each change made after it, and CAPI can scale the cluster (new Machines get
// their nodeRefs, which needs the cluster cache's watches to resume on the restored store).
func (s *workloadState) checkAfterRestart(ctx context.Context, t *testing.T, g Gomega) {
	t.Helper()
	cs := workloadREST(ctx, g, s.cluster)
	cm, err := cs.CoreV1().ConfigMaps("default").Get(ctx, userCMName, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred(), "the user's ConfigMap is gone after the restart")
	g.Expect(cm.UID).To(Equal(s.userCM))
	g.Expect(cm.Labels).To(HaveKeyWithValue(userLabel, "yes"))
	g.Expect(cm.Data).To(HaveKeyWithValue("k", "before"))
	_, err = cs.CoreV1().ConfigMaps("default").Get(ctx, crsObject, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred(), "the ClusterResourceSet's ConfigMap is gone after the restart")
	checkGadget(ctx, g, s.cluster) // a custom resource survives the restart, served by its restored CRD
	node, err := cs.CoreV1().Nodes().Get(ctx, s.nodeName, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(node.Labels).To(HaveKeyWithValue(userLabel, "kept"), "the user's Node label")
	g.Expect(node.Spec.Taints).To(ContainElement(HaveField("Key", userTaint)), "the user's Node taint")

	// The pods that ran before the kill run on: the same UIDs, the same addresses.
	after := runningPods(ctx, g, cs, "")
	for uid, ip := range s.pods {
		g.Expect(after).To(HaveKeyWithValue(uid, ip), "a pod Running before the restart is not Running with its IP after it")
	}
	// And the workload controllers go on: the add-on's Deployment scales up.
	scale, err := cs.AppsV1().Deployments("default").GetScale(ctx, crsGadget, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	scale.Spec.Replicas = 3
	_, err = cs.AppsV1().Deployments("default").UpdateScale(ctx, crsGadget, scale, metav1.UpdateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func(g Gomega) {
		g.Expect(runningPods(ctx, g, cs, "app="+crsGadget)).To(HaveLen(3))
	}, time.Minute, time.Second).Should(Succeed(), "the add-on's Deployment did not scale after the restart")

	// Changes after the restart reach the informer that ran across it.
	cm.Data["k"] = "after"
	updated, err := cs.CoreV1().ConfigMaps("default").Update(ctx, cm, metav1.UpdateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	created, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after-restart"}}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func() []string { return []string{s.rv(userCMName), s.rv("after-restart")} }, time.Minute).
		Should(Equal([]string{updated.ResourceVersion, created.ResourceVersion}), "the informer missed a change made after the restart")

	// Scale up through CAPI: one more worker and two more control-plane machines.
	md := &clusterv1.MachineDeployment{}
	g.Expect(plane.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: s.cluster + "-md-0"}, md)).To(Succeed())
	workers := ptr.Deref(md.Spec.Replicas, 0) + 1
	mdPatch := client.MergeFrom(md.DeepCopy())
	md.Spec.Replicas = ptr.To(workers)
	g.Expect(plane.Client.Patch(ctx, md, mdPatch)).To(Succeed())
	kcp := &controlplanev1.KubeadmControlPlane{}
	g.Expect(plane.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: s.cluster + "-control-plane"}, kcp)).To(Succeed())
	cps := ptr.Deref(kcp.Spec.Replicas, 0) + 2
	kcpPatch := client.MergeFrom(kcp.DeepCopy())
	kcp.Spec.Replicas = ptr.To(cps)
	g.Expect(plane.Client.Patch(ctx, kcp, kcpPatch)).To(Succeed())
	st := waitFor(ctx, t, g, s.cluster, 6*time.Minute, fmt.Sprintf("scaled to %d control-plane machines and %d workers after the restart", cps, workers),
		all(harness.Available, controlPlaneHealthy(cps), workersRunning(workers)))
	for _, m := range st.Machines {
		g.Expect(m.Status.NodeRef.IsDefined()).To(BeTrue(), "machine %s has no nodeRef", m.Name)
	}
	// kube-proxy's DaemonSet runs a pod on every node, the new ones too.
	g.Eventually(func(g Gomega) {
		g.Expect(runningPods(ctx, g, cs, "k8s-app=kube-proxy")).To(HaveLen(len(st.Machines)))
	}, time.Minute, time.Second).Should(Succeed(), "kube-proxy does not run on every node after the scale-up")
}

// runningPods are the Running pods of the cluster that match selector, UID -> pod IP.
func runningPods(ctx context.Context, g Gomega, cs *kubernetes.Clientset, selector string) map[types.UID]string {
	list, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: selector})
	g.Expect(err).NotTo(HaveOccurred())
	out := map[types.UID]string{}
	for _, p := range list.Items {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil && p.Status.PodIP != "" {
			out[p.UID] = p.Status.PodIP
		}
	}
	return out
}

var gadgetsGVR = schema.GroupVersionResource{Group: "addons.example.com", Version: "v1", Resource: "gadgets"}

// checkGadget reads the custom resource the ClusterResourceSet applied, through client-go's
// dynamic client.
func checkGadget(ctx context.Context, g Gomega, cluster string) *unstructured.Unstructured {
	dyn, err := dynamic.NewForConfig(workloadConfig(ctx, g, cluster))
	g.Expect(err).NotTo(HaveOccurred())
	obj, err := dyn.Resource(gadgetsGVR).Namespace("default").Get(ctx, crsGadget, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred(), "the custom resource the ClusterResourceSet applied")
	return obj
}

// crsApplied reports whether the cluster's ClusterResourceSetBinding has every resource of the
// add-on applied.
func crsApplied(ctx context.Context, cluster string) (bool, error) {
	b := &unstructured.Unstructured{}
	b.SetGroupVersionKind(schema.GroupVersionKind{Group: "addons.cluster.x-k8s.io", Version: "v1beta2", Kind: "ClusterResourceSetBinding"})
	if err := plane.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: cluster}, b); err != nil {
		return false, err
	}
	bindings, _, _ := unstructured.NestedSlice(b.Object, "spec", "bindings")
	for _, entry := range bindings {
		m, _ := entry.(map[string]any)
		if name, _, _ := unstructured.NestedString(m, "clusterResourceSetName"); name != crsAddonName {
			continue
		}
		resources, _, _ := unstructured.NestedSlice(m, "resources")
		for _, r := range resources {
			rm, _ := r.(map[string]any)
			if applied, _, _ := unstructured.NestedBool(rm, "applied"); !applied {
				return false, nil
			}
		}
		return len(resources) > 0, nil
	}
	return false, nil
}
