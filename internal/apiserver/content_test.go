package apiserver

import (
	"encoding/json"
	"net/http"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

const tableAccept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"

func readyNode(name string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"node-role.kubernetes.io/control-plane": ""}},
		Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
			Addresses:  []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.4"}},
			NodeInfo: corev1.NodeSystemInfo{KubeletVersion: "v1.36.3", OSImage: "Ubuntu 24.04", KernelVersion: "6.8.0",
				ContainerRuntimeVersion: "containerd://2.1.0"},
		},
	}
}

func createNode(t *testing.T, env *testEnv, n *corev1.Node) {
	t.Helper()
	cs := env.clientset(t)
	created, err := cs.CoreV1().Nodes().Create(ctx(t), n, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created.Status = n.Status
	if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx(t), created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestTableNodes(t *testing.T) {
	g := NewWithT(t)
	env := newTestEnv(t, Options{})
	createNode(t, env, readyNode("cp-0"))

	code, hdr, body := env.do(t, http.MethodGet, "/api/v1/nodes?includeObject=Object", "", tableAccept, "")
	g.Expect(code).To(Equal(http.StatusOK), body)
	g.Expect(hdr.Get("Content-Type")).To(HavePrefix("application/json"))
	var table metav1.Table
	g.Expect(json.Unmarshal([]byte(body), &table)).To(Succeed())
	g.Expect(table.Kind).To(Equal("Table"))
	var cols []string
	for _, c := range table.ColumnDefinitions {
		cols = append(cols, c.Name)
	}
	g.Expect(cols).To(Equal([]string{"Name", "Status", "Roles", "Age", "Version", "Internal-IP", "External-IP", "OS-Image", "Kernel-Version", "Container-Runtime"}))
	g.Expect(table.Rows).To(HaveLen(1))
	cells := table.Rows[0].Cells
	g.Expect(cells[0]).To(Equal("cp-0"))
	g.Expect(cells[1]).To(Equal("Ready"))
	g.Expect(cells[2]).To(Equal("control-plane"))
	g.Expect(cells[4]).To(Equal("v1.36.3"))
	g.Expect(cells[5]).To(Equal("10.0.0.4"))
	g.Expect(cells[6]).To(Equal("<none>"))
	var embedded corev1.Node
	g.Expect(json.Unmarshal(table.Rows[0].Object.Raw, &embedded)).To(Succeed())
	g.Expect(embedded.Kind).To(Equal("Node"))
	g.Expect(embedded.Status.NodeInfo.OSImage).To(Equal("Ubuntu 24.04"))

	// Default includeObject is metadata only.
	_, _, body = env.do(t, http.MethodGet, "/api/v1/nodes/cp-0", "", tableAccept, "")
	g.Expect(json.Unmarshal([]byte(body), &table)).To(Succeed())
	var pom metav1.PartialObjectMetadata
	g.Expect(json.Unmarshal(table.Rows[0].Object.Raw, &pom)).To(Succeed())
	g.Expect(pom.Kind).To(Equal("PartialObjectMetadata"))
	g.Expect(pom.Name).To(Equal("cp-0"))
}

func TestTableColumnSets(t *testing.T) {
	want := map[string][]string{
		"/api/v1/namespaces":                              {"Name", "Status", "Age"},
		"/api/v1/namespaces/default/pods":                 {"Name", "Ready", "Status", "Restarts", "Age", "IP", "Node", "Nominated Node", "Readiness Gates"},
		"/api/v1/namespaces/default/configmaps":           {"Name", "Data", "Age"},
		"/api/v1/namespaces/default/secrets":              {"Name", "Type", "Data", "Age"},
		"/api/v1/namespaces/default/services":             {"Name", "Type", "Cluster-IP", "External-IP", "Port(s)", "Age", "Selector"},
		"/apis/apps/v1/namespaces/default/deployments":    {"Name", "Ready", "Up-to-date", "Available", "Age", "Containers", "Images", "Selector"},
		"/apis/apps/v1/namespaces/default/daemonsets":     {"Name", "Desired", "Current", "Ready", "Up-to-date", "Available", "Node Selector", "Age", "Containers", "Images", "Selector"},
		"/apis/rbac.authorization.k8s.io/v1/clusterroles": {"Name", "Age"},
	}
	env := newTestEnv(t, Options{})
	for path, cols := range want {
		t.Run(path, func(t *testing.T) {
			g := NewWithT(t)
			code, _, body := env.do(t, http.MethodGet, path, "", tableAccept, "")
			g.Expect(code).To(Equal(http.StatusOK), body)
			var table metav1.Table
			g.Expect(json.Unmarshal([]byte(body), &table)).To(Succeed())
			var got []string
			for _, c := range table.ColumnDefinitions {
				got = append(got, c.Name)
			}
			g.Expect(got).To(Equal(cols))
			g.Expect(table.Rows).NotTo(BeNil())
		})
	}
}

// TestMetadataClient uses client-go's metadata client, which only accepts
// PartialObjectMetadata(List) responses, for get, list and watch.
func TestMetadataClient(t *testing.T) {
	g := NewWithT(t)
	env := newTestEnv(t, Options{})
	createNode(t, env, readyNode("n1"))
	mc, err := metadata.NewForConfig(env.cfg)
	g.Expect(err).NotTo(HaveOccurred())
	nodes := mc.Resource(schema.GroupVersionResource{Version: "v1", Resource: "nodes"})
	c := ctx(t)
	m, err := nodes.Get(c, "n1", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(m.Labels).To(HaveKey("node-role.kubernetes.io/control-plane"))
	l, err := nodes.List(c, metav1.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(l.Items).To(HaveLen(1))
	w, err := nodes.Watch(c, metav1.ListOptions{ResourceVersion: "0"})
	g.Expect(err).NotTo(HaveOccurred())
	defer w.Stop()
	ev := <-w.ResultChan()
	g.Expect(ev.Object.(*metav1.PartialObjectMetadata).Name).To(Equal("n1"))
}

// TestControllerRuntime runs a controller-runtime client and cache (typed and metadata-only
// informers) against the handler.
func TestControllerRuntime(t *testing.T) {
	g := NewWithT(t)
	env := newTestEnv(t, Options{})
	c := ctx(t)
	cl, err := client.New(env.cfg, client.Options{Scheme: store.Scheme()})
	g.Expect(err).NotTo(HaveOccurred())

	n := readyNode("worker-1")
	n.Spec.ProviderID = "goofy://worker-1"
	g.Expect(cl.Create(c, n)).To(Succeed())
	pod := testPod("kube-system", "etcd-worker-1", "worker-1", map[string]string{"component": "etcd", "tier": "control-plane"})
	g.Expect(cl.Create(c, pod)).To(Succeed())

	// Optimistic-lock strategic patch of a Node, as CAPI does.
	base := n.DeepCopy()
	n.Labels["node.cluster.x-k8s.io/role"] = "worker"
	g.Expect(cl.Patch(c, n, client.StrategicMergeFrom(base, client.MergeFromWithOptimisticLock{}))).To(Succeed())
	stale := base.DeepCopy()
	stale.Labels["x"] = "y"
	g.Expect(cl.Patch(c, stale, client.StrategicMergeFrom(base, client.MergeFromWithOptimisticLock{}))).NotTo(Succeed())

	var pods corev1.PodList
	g.Expect(cl.List(c, &pods, client.MatchingFields{"spec.nodeName": "worker-1"})).To(Succeed())
	g.Expect(pods.Items).To(HaveLen(1))

	ca, err := cache.New(env.cfg, cache.Options{Scheme: store.Scheme()})
	g.Expect(err).NotTo(HaveOccurred())
	// A typed informer and a metadata-only one.
	_, err = ca.GetInformer(c, &corev1.Node{})
	g.Expect(err).NotTo(HaveOccurred())
	podMeta := &metav1.PartialObjectMetadata{}
	podMeta.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Pod"))
	podInf, err := ca.GetInformer(c, podMeta)
	g.Expect(err).NotTo(HaveOccurred())
	seen := make(chan string, 10)
	_, err = podInf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
		seen <- obj.(*metav1.PartialObjectMetadata).Name
	}})
	g.Expect(err).NotTo(HaveOccurred())
	go func() { _ = ca.Start(c) }()
	g.Expect(ca.WaitForCacheSync(c)).To(BeTrue())

	var cached corev1.Node
	g.Expect(ca.Get(c, client.ObjectKey{Name: "worker-1"}, &cached)).To(Succeed())
	g.Expect(cached.Spec.ProviderID).To(Equal("goofy://worker-1"))
	var metas metav1.PartialObjectMetadataList
	metas.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
	g.Expect(ca.List(c, &metas, client.InNamespace("kube-system"))).To(Succeed())
	g.Expect(metas.Items).To(HaveLen(1))
	g.Expect(metas.Items[0].Labels).To(HaveKeyWithValue("component", "etcd"))

	// A later change reaches the metadata-only informer through its watch.
	g.Expect(cl.Create(c, testPod("kube-system", "kube-apiserver-worker-1", "worker-1", map[string]string{"component": "kube-apiserver"}))).To(Succeed())
	for name := range seen {
		if name == "kube-apiserver-worker-1" {
			break
		}
	}
}
