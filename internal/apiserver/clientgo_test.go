package apiserver

import (
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

func configMap(ns, name string, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": "demo"}}, Data: data}
}

func testPod(ns, name, node string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "main", Image: "registry.example/app:1"}}},
	}
}

// TestClientsetCRUD drives every verb through the typed clientset, in JSON and in protobuf.
func TestClientsetCRUD(t *testing.T) {
	for _, proto := range []bool{false, true} {
		t.Run(fmt.Sprintf("protobuf=%v", proto), func(t *testing.T) {
			g := NewWithT(t)
			env := newTestEnv(t, Options{})
			cs := env.clientsetSpeaking(t, proto)
			c := ctx(t)
			cms := cs.CoreV1().ConfigMaps("default")

			// A missing object is a real 404 Status (CAPI's cluster cache depends on it).
			_, err := cms.Get(c, "missing", metav1.GetOptions{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%v", err)
			g.Expect(err.(apierrors.APIStatus).Status().Details.Name).To(Equal("missing"))

			created, err := cms.Create(c, configMap("", "one", map[string]string{"a": "1"}), metav1.CreateOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(created.Namespace).To(Equal("default"))
			g.Expect(created.UID).NotTo(BeEmpty())
			g.Expect(created.ResourceVersion).NotTo(BeEmpty())

			_, err = cms.Create(c, configMap("", "one", nil), metav1.CreateOptions{})
			g.Expect(apierrors.IsAlreadyExists(err)).To(BeTrue(), "%v", err)

			got, err := cms.Get(c, "one", metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got.Data).To(HaveKeyWithValue("a", "1"))

			got.Data["b"] = "2"
			updated, err := cms.Update(c, got, metav1.UpdateOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(updated.ResourceVersion).NotTo(Equal(got.ResourceVersion))
			// Updating from a stale resourceVersion is a conflict.
			_, err = cms.Update(c, got, metav1.UpdateOptions{})
			g.Expect(apierrors.IsConflict(err)).To(BeTrue(), "%v", err)

			for _, p := range []struct {
				pt   types.PatchType
				body string
				key  string
			}{
				{types.JSONPatchType, `[{"op":"add","path":"/data/json","value":"x"}]`, "json"},
				{types.MergePatchType, `{"data":{"merge":"x"}}`, "merge"},
				{types.StrategicMergePatchType, `{"data":{"smp":"x"}}`, "smp"},
			} {
				out, err := cms.Patch(c, "one", p.pt, []byte(p.body), metav1.PatchOptions{})
				g.Expect(err).NotTo(HaveOccurred(), string(p.pt))
				g.Expect(out.Data).To(HaveKey(p.key))
			}
			applied, err := cms.Apply(c, corev1ac.ConfigMap("two", "default").WithData(map[string]string{"k": "v"}), metav1.ApplyOptions{FieldManager: "test", Force: true})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(applied.ManagedFields).NotTo(BeEmpty())

			list, err := cms.List(c, metav1.ListOptions{LabelSelector: "app=demo"})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(list.Items).To(HaveLen(1))
			list, err = cms.List(c, metav1.ListOptions{FieldSelector: "metadata.name=two"})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(list.Items).To(HaveLen(1))
			g.Expect(list.Items[0].Name).To(Equal("two"))

			// Preconditions on delete.
			err = cms.Delete(c, "one", metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: ptr.To(types.UID("nope"))}})
			g.Expect(apierrors.IsConflict(err)).To(BeTrue(), "%v", err)
			g.Expect(cms.Delete(c, "one", metav1.DeleteOptions{})).To(Succeed())
			_, err = cms.Get(c, "one", metav1.GetOptions{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue())

			g.Expect(cms.DeleteCollection(c, metav1.DeleteOptions{}, metav1.ListOptions{})).To(Succeed())
			list, err = cms.List(c, metav1.ListOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(list.Items).To(BeEmpty())

			// Cluster-scoped and status subresource.
			node, err := cs.CoreV1().Nodes().Create(c, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, metav1.CreateOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
			node.Spec.Unschedulable = true // ignored on the status subresource
			node, err = cs.CoreV1().Nodes().UpdateStatus(c, node, metav1.UpdateOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(node.Status.Conditions).To(HaveLen(1))
			g.Expect(node.Spec.Unschedulable).To(BeFalse())
		})
	}
}

func TestPagination(t *testing.T) {
	g := NewWithT(t)
	env := newTestEnv(t, Options{})
	cs := env.clientset(t)
	c := ctx(t)
	for i := range 25 {
		_, err := cs.CoreV1().ConfigMaps("default").Create(c, configMap("", fmt.Sprintf("cm-%02d", i), nil), metav1.CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
	}
	var names []string
	opts := metav1.ListOptions{Limit: 10}
	pages := 0
	for {
		l, err := cs.CoreV1().ConfigMaps("default").List(c, opts)
		g.Expect(err).NotTo(HaveOccurred())
		pages++
		for _, i := range l.Items {
			names = append(names, i.Name)
		}
		if pages == 1 {
			g.Expect(l.RemainingItemCount).To(HaveValue(BeEquivalentTo(15)))
			// Writes after the first page do not show up in later pages (consistent snapshot).
			_, err := cs.CoreV1().ConfigMaps("default").Create(c, configMap("", "cm-99", nil), metav1.CreateOptions{})
			g.Expect(err).NotTo(HaveOccurred())
		}
		if l.Continue == "" {
			break
		}
		opts.Continue = l.Continue
	}
	g.Expect(pages).To(Equal(3))
	g.Expect(names).To(HaveLen(25))
	g.Expect(names).NotTo(ContainElement("cm-99"))
}

// TestPaginationTokenExpired: a continue token whose snapshot the history no longer holds gets
// kube-apiserver's 410, whose Status carries a token that continues the list at the latest state;
// client-go hands both to its caller, in JSON and in protobuf.
func TestPaginationTokenExpired(t *testing.T) {
	for _, proto := range []bool{false, true} {
		t.Run(fmt.Sprintf("protobuf=%v", proto), func(t *testing.T) {
			g := NewWithT(t)
			env := newTestEnvWith(t, Options{}, store.ClusterOptions{EventHistory: 16})
			cs := env.clientsetSpeaking(t, proto)
			c := ctx(t)
			cms := cs.CoreV1().ConfigMaps("default")
			for i := range 4 {
				_, err := cms.Create(c, configMap("", fmt.Sprintf("cm-%d", i), nil), metav1.CreateOptions{})
				g.Expect(err).NotTo(HaveOccurred())
			}
			first, err := cms.List(c, metav1.ListOptions{Limit: 2})
			g.Expect(err).NotTo(HaveOccurred())
			for i := range 20 { // past the history's 16 events
				_, err := cs.CoreV1().ConfigMaps("kube-system").Create(c, configMap("", fmt.Sprintf("churn-%d", i), nil), metav1.CreateOptions{})
				g.Expect(err).NotTo(HaveOccurred())
			}
			_, err = cms.Create(c, configMap("", "cm-9", nil), metav1.CreateOptions{})
			g.Expect(err).NotTo(HaveOccurred())

			_, err = cms.List(c, metav1.ListOptions{Limit: 2, Continue: first.Continue})
			g.Expect(apierrors.IsResourceExpired(err)).To(BeTrue(), "%v", err)
			status := err.(apierrors.APIStatus).Status()
			g.Expect(status.Code).To(Equal(int32(410)))
			g.Expect(status.Message).To(HavePrefix("The provided continue parameter is too old to display a consistent list result."))
			g.Expect(status.ListMeta.Continue).NotTo(BeEmpty())

			rest, err := cms.List(c, metav1.ListOptions{Limit: 10, Continue: status.ListMeta.Continue})
			g.Expect(err).NotTo(HaveOccurred())
			var got []string
			for _, cm := range rest.Items {
				got = append(got, cm.Name)
			}
			g.Expect(got).To(Equal([]string{"cm-2", "cm-3", "cm-9"}), "the rest, at the latest state")
			g.Expect(rest.Continue).To(BeEmpty())
		})
	}
}

func TestWatchResumeAndGone(t *testing.T) {
	for _, proto := range []bool{false, true} {
		t.Run(fmt.Sprintf("protobuf=%v", proto), func(t *testing.T) {
			g := NewWithT(t)
			// A short history so that old resourceVersions expire within the test.
			env := newTestEnvWith(t, Options{}, store.ClusterOptions{EventHistory: 16})
			cs := env.clientsetSpeaking(t, proto)
			c := ctx(t)
			nodes := cs.CoreV1().Nodes()
			list, err := nodes.List(c, metav1.ListOptions{})
			g.Expect(err).NotTo(HaveOccurred())

			w, err := nodes.Watch(c, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
			g.Expect(err).NotTo(HaveOccurred())
			_, err = nodes.Create(c, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a"}}, metav1.CreateOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			ev := <-w.ResultChan()
			g.Expect(ev.Type).To(Equal(watch.Added))
			last := ev.Object.(*corev1.Node).ResourceVersion
			w.Stop()

			// Changes made while nobody watches are delivered on resume, in order.
			_, err = nodes.Patch(c, "a", types.StrategicMergePatchType, []byte(`{"metadata":{"labels":{"x":"1"}}}`), metav1.PatchOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			_, err = nodes.Create(c, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "b"}}, metav1.CreateOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(nodes.Delete(c, "a", metav1.DeleteOptions{})).To(Succeed())

			w, err = nodes.Watch(c, metav1.ListOptions{ResourceVersion: last})
			g.Expect(err).NotTo(HaveOccurred())
			defer w.Stop()
			var got []string
			for range 3 {
				ev := <-w.ResultChan()
				got = append(got, string(ev.Type)+" "+ev.Object.(*corev1.Node).Name)
			}
			g.Expect(got).To(Equal([]string{"MODIFIED a", "ADDED b", "DELETED a"}))

			// A field-selected single-object watch via the /watch/ path prefix style.
			w2, err := nodes.Watch(c, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", "b").String(), ResourceVersion: last})
			g.Expect(err).NotTo(HaveOccurred())
			ev = <-w2.ResultChan()
			g.Expect(ev.Object.(*corev1.Node).Name).To(Equal("b"))
			w2.Stop()

			// A resourceVersion older than the retained history is 410 Gone.
			for i := range 20 {
				_, err := cs.CoreV1().ConfigMaps("default").Create(c, configMap("", fmt.Sprintf("churn-%d", i), nil), metav1.CreateOptions{})
				g.Expect(err).NotTo(HaveOccurred())
			}
			// As the watch cache answers: a 200 stream whose one event is an ERROR with the 410.
			w3, err := nodes.Watch(c, metav1.ListOptions{ResourceVersion: last})
			g.Expect(err).NotTo(HaveOccurred())
			ev = <-w3.ResultChan()
			g.Expect(ev.Type).To(Equal(watch.Error))
			g.Expect(apierrors.IsResourceExpired(apierrors.FromObject(ev.Object))).To(BeTrue(), "%v", ev.Object)
			_, open := <-w3.ResultChan()
			g.Expect(open).To(BeFalse(), "the stream ends after the error")
		})
	}
}

// TestInformerWatchList runs a shared informer the way client-go >= 0.35 does by default: a
// watch with sendInitialEvents=true instead of a list, which must end with the
// initial-events-end bookmark for the informer to sync.
func TestInformerWatchList(t *testing.T) {
	g := NewWithT(t)
	env := newTestEnv(t, Options{})
	cs := env.clientset(t)
	c := ctx(t)
	for i := range 3 {
		_, err := cs.CoreV1().Nodes().Create(c, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("n%d", i)}}, metav1.CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
	}
	factory := informers.NewSharedInformerFactory(cs, 0)
	inf := factory.Core().V1().Nodes().Informer()
	added := make(chan string, 100)
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(obj any) { added <- obj.(*corev1.Node).Name }})
	g.Expect(err).NotTo(HaveOccurred())
	factory.Start(c.Done())
	g.Expect(cache.WaitForCacheSync(c.Done(), inf.HasSynced)).To(BeTrue())
	g.Expect(inf.GetStore().ListKeys()).To(ConsistOf("n0", "n1", "n2"))

	var sawWatchList bool
	for _, r := range env.requestLog() {
		if strings.Contains(r, "/api/v1/nodes?") && strings.Contains(r, "sendInitialEvents=true") && strings.Contains(r, "watch=true") {
			sawWatchList = true
		}
	}
	g.Expect(sawWatchList).To(BeTrue(), "informer should have used WatchList: %v", env.requestLog())

	_, err = cs.CoreV1().Nodes().Create(c, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "late"}}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	for name := range added {
		if name == "late" {
			break
		}
	}
}

func TestDynamicClient(t *testing.T) {
	g := NewWithT(t)
	env := newTestEnv(t, Options{})
	dyn, err := dynamic.NewForConfig(env.cfg)
	g.Expect(err).NotTo(HaveOccurred())
	c := ctx(t)
	gvr := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": "web"},
		"spec": map[string]any{
			"replicas": int64(2),
			"selector": map[string]any{"matchLabels": map[string]any{"app": "web"}},
			"template": map[string]any{
				"metadata": map[string]any{"labels": map[string]any{"app": "web"}},
				"spec":     map[string]any{"containers": []any{map[string]any{"name": "web", "image": "nginx"}}},
			},
		},
	}}
	out, err := dyn.Resource(gvr).Namespace("default").Create(c, u, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out.GetGeneration()).To(BeEquivalentTo(1))
	l, err := dyn.Resource(gvr).Namespace("").List(c, metav1.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(l.Items).To(HaveLen(1))
	g.Expect(l.GetKind()).To(Equal("DeploymentList"))

	// Server-side apply through the dynamic client, then a conflicting manager.
	apply := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": "web", "namespace": "default"},
		"spec":     map[string]any{"replicas": int64(3)},
	}}
	out, err = dyn.Resource(gvr).Namespace("default").Apply(c, "web", apply, metav1.ApplyOptions{FieldManager: "a", Force: true})
	g.Expect(err).NotTo(HaveOccurred())
	r, _, _ := unstructured.NestedInt64(out.Object, "spec", "replicas")
	g.Expect(r).To(BeEquivalentTo(3))
	apply.Object["spec"] = map[string]any{"replicas": int64(4)}
	_, err = dyn.Resource(gvr).Namespace("default").Apply(c, "web", apply, metav1.ApplyOptions{FieldManager: "b"})
	g.Expect(apierrors.IsConflict(err)).To(BeTrue(), "%v", err)
}

func TestScaleLogsEviction(t *testing.T) {
	g := NewWithT(t)
	env := newTestEnv(t, Options{})
	cs := env.clientset(t)
	c := ctx(t)

	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx"}}},
			},
		},
	}
	_, err := cs.AppsV1().Deployments("default").Create(c, dep, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	sc, err := cs.AppsV1().Deployments("default").GetScale(c, "web", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(sc.Spec.Replicas).To(BeEquivalentTo(1))
	g.Expect(sc.Status.Selector).To(Equal("app=web"))
	sc.Spec.Replicas = 3
	sc, err = cs.AppsV1().Deployments("default").UpdateScale(c, "web", sc, metav1.UpdateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(sc.Spec.Replicas).To(BeEquivalentTo(3))
	d, err := cs.AppsV1().Deployments("default").Get(c, "web", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(*d.Spec.Replicas).To(BeEquivalentTo(3))
	g.Expect(d.Generation).To(BeEquivalentTo(2))

	// Logs.
	pod, err := cs.CoreV1().Pods("default").Create(c, testPod("default", "p1", "n1", map[string]string{"app": "web"}), metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	rc, err := cs.CoreV1().Pods("default").GetLogs("p1", &corev1.PodLogOptions{}).Stream(c)
	g.Expect(err).NotTo(HaveOccurred())
	logs, _ := io.ReadAll(rc)
	rc.Close()
	g.Expect(string(logs)).To(ContainSubstring(`container "main"`))
	_, err = cs.CoreV1().Pods("default").GetLogs("p1", &corev1.PodLogOptions{Container: "nope"}).DoRaw(c)
	g.Expect(apierrors.IsBadRequest(err)).To(BeTrue(), "%v", err)

	// Eviction against a budget with no disruptions left is refused with 429.
	pod.Status.Phase = corev1.PodRunning
	_, err = cs.CoreV1().Pods("default").UpdateStatus(c, pod, metav1.UpdateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	pdb, err := cs.PolicyV1().PodDisruptionBudgets("default").Create(c, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}},
	}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	pdb.Status = policyv1.PodDisruptionBudgetStatus{ObservedGeneration: pdb.Generation, DisruptionsAllowed: 0, CurrentHealthy: 1, DesiredHealthy: 1, ExpectedPods: 1}
	pdb, err = cs.PolicyV1().PodDisruptionBudgets("default").UpdateStatus(c, pdb, metav1.UpdateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	eviction := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: "p1", Namespace: "default"}}
	err = cs.CoreV1().Pods("default").EvictV1(c, eviction)
	g.Expect(apierrors.IsTooManyRequests(err)).To(BeTrue(), "%v", err)
	g.Expect(err.(apierrors.APIStatus).Status().Details.Causes).To(ContainElement(HaveField("Type", metav1.CauseType(policyv1.DisruptionBudgetCause))))

	// With one disruption allowed the eviction deletes the pod and uses the disruption up.
	pdb.Status.DisruptionsAllowed = 1
	_, err = cs.PolicyV1().PodDisruptionBudgets("default").UpdateStatus(c, pdb, metav1.UpdateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	// A dry run in the query (kubectl drain --dry-run=server) deletes nothing and uses nothing up.
	g.Expect(cs.CoreV1().RESTClient().Post().Namespace("default").Resource("pods").Name("p1").SubResource("eviction").
		Param("dryRun", metav1.DryRunAll).Body(eviction).Do(c).Error()).To(Succeed())
	still, err := cs.CoreV1().Pods("default").Get(c, "p1", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(still.DeletionTimestamp).To(BeNil())
	pdb, err = cs.PolicyV1().PodDisruptionBudgets("default").Get(c, "web", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pdb.Status.DisruptionsAllowed).To(BeEquivalentTo(1))
	// The query and the Eviction's DeleteOptions may not disagree.
	mismatched := eviction.DeepCopy()
	mismatched.DeleteOptions = &metav1.DeleteOptions{DryRun: []string{"All", "All"}}
	err = cs.CoreV1().RESTClient().Post().Namespace("default").Resource("pods").Name("p1").SubResource("eviction").
		Param("dryRun", metav1.DryRunAll).Body(mismatched).Do(c).Error()
	g.Expect(err).To(MatchError(ContainSubstring("Non-matching dry-run options in request and content")))
	g.Expect(cs.CoreV1().Pods("default").EvictV1(c, eviction)).To(Succeed())
	// The pod runs on a node, so it terminates gracefully: Terminating first, gone once the
	// simulated kubelet has stopped it.
	evicted, err := cs.CoreV1().Pods("default").Get(c, "p1", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(evicted.DeletionTimestamp).NotTo(BeNil())
	g.Expect(evicted.DeletionGracePeriodSeconds).To(HaveValue(BeEquivalentTo(corev1.DefaultTerminationGracePeriodSeconds)))
	g.Eventually(func() error {
		_, err := cs.CoreV1().Pods("default").Get(c, "p1", metav1.GetOptions{})
		return err
	}, 10*time.Second, 100*time.Millisecond).Should(Satisfy(apierrors.IsNotFound))
	pdb, err = cs.PolicyV1().PodDisruptionBudgets("default").Get(c, "web", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pdb.Status.DisruptionsAllowed).To(BeEquivalentTo(0))
	g.Expect(pdb.Status.DisruptedPods).To(HaveKey("p1"))

	err = cs.CoreV1().Pods("default").EvictV1(c, eviction)
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%v", err)
}

var _ = time.Second
