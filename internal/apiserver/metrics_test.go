package apiserver

import (
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/authentication/user"
	genericfilters "k8s.io/apiserver/pkg/endpoints/filters"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggregatorclient "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
	metricsv1beta1 "k8s.io/metrics/pkg/apis/metrics/v1beta1"
	metricsclient "k8s.io/metrics/pkg/client/clientset/versioned"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/authz"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// testClock is the metrics' clock in tests: it moves only when told to.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// metricsNode is a Ready node with kubeadm's defaults for a 2-CPU, 8Gi machine.
func metricsNode(name string, ready bool) *corev1.Node {
	n := readyNode(name)
	n.Labels = map[string]string{"kubernetes.io/hostname": name}
	if !ready {
		n.Status.Conditions[0].Status = corev1.ConditionUnknown
	}
	res := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("8Gi"), corev1.ResourcePods: resource.MustParse("110")}
	n.Status.Capacity, n.Status.Allocatable = res, res
	return n
}

// metricsPod is a pod on node whose containers request cpu and memory.
func metricsPod(ns, name, node string, labels map[string]string, containers ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}, Spec: corev1.PodSpec{NodeName: node}}
	for _, c := range containers {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: c, Image: "registry.example/" + c + ":1",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("256Mi")}}})
	}
	return p
}

// newMetricsEnv serves a cluster with nodes cp-0, worker-0 (Ready) and worker-1 (NotReady), and
// pods: Running kube-system/etcd-cp-0 on cp-0, default/web-0 (two containers) and demo/api-0 on
// worker-0, default/lost-0 on worker-1; Pending demo/pending-0 on worker-0. The metrics' clock
// stands still until the test moves it.
func newMetricsEnv(t *testing.T) (*testEnv, *testClock) {
	t.Helper()
	// A minute ahead: every object the test creates is older than the first scrape.
	clock := &testClock{now: time.Now().Add(time.Minute)}
	env := newTestEnv(t, Options{Now: clock.Now})
	for _, n := range []*corev1.Node{metricsNode("cp-0", true), metricsNode("worker-0", true), metricsNode("worker-1", false)} {
		createNode(t, env, n)
	}
	cs := env.clientset(t)
	c := ctx(t)
	if _, err := cs.CoreV1().Namespaces().Create(c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "demo"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	started := metav1.NewTime(clock.Now().Add(-time.Hour))
	for _, p := range []*corev1.Pod{
		metricsPod("kube-system", "etcd-cp-0", "cp-0", map[string]string{"component": "etcd"}, "etcd"),
		metricsPod("default", "web-0", "worker-0", map[string]string{"app": "web"}, "web", "sidecar"),
		metricsPod("demo", "api-0", "worker-0", map[string]string{"app": "api"}, "api"),
		metricsPod("default", "lost-0", "worker-1", map[string]string{"app": "web"}, "web"),
		metricsPod("demo", "pending-0", "worker-0", map[string]string{"app": "api"}, "api"),
	} {
		created, err := cs.CoreV1().Pods(p.Namespace).Create(c, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Name == "pending-0" {
			continue
		}
		created.Status.Phase = corev1.PodRunning
		created.Status.StartTime = &started
		if _, err := cs.CoreV1().Pods(p.Namespace).UpdateStatus(c, created, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return env, clock
}

func metricsClientset(t *testing.T, cfg *rest.Config) *metricsclient.Clientset {
	t.Helper()
	mc, err := metricsclient.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return mc
}

func podKey(m metricsv1beta1.PodMetrics) string { return m.Namespace + "/" + m.Name }

// TestMetricsAPIDiscovery: metrics.k8s.io/v1beta1 is discovered as metrics-server's APIService
// makes it, in the legacy and in the aggregated documents.
func TestMetricsAPIDiscovery(t *testing.T) {
	g := NewWithT(t)
	env := newTestEnv(t, Options{})

	// client-go's discovery client reads the aggregated documents.
	dc, err := discovery.NewDiscoveryClientForConfig(env.cfg)
	g.Expect(err).NotTo(HaveOccurred())
	groups, resources, err := dc.ServerGroupsAndResources()
	g.Expect(err).NotTo(HaveOccurred())
	var names []string
	for _, gr := range groups {
		names = append(names, gr.Name)
		if gr.Name == metricsv1beta1.GroupName {
			g.Expect(gr.PreferredVersion.GroupVersion).To(Equal("metrics.k8s.io/v1beta1"))
		}
	}
	g.Expect(names).To(ContainElement(metricsv1beta1.GroupName))
	g.Expect(names[len(names)-1]).To(Equal(metricsv1beta1.GroupName), "metrics-server's group has the lowest priority")
	var found *metav1.APIResourceList
	for _, l := range resources {
		if l.GroupVersion == "metrics.k8s.io/v1beta1" {
			found = l
		}
	}
	g.Expect(found).NotTo(BeNil())
	g.Expect(found.APIResources).To(ConsistOf(
		And(HaveField("Name", "nodes"), HaveField("Kind", "NodeMetrics"), HaveField("Namespaced", false), HaveField("Verbs", ConsistOf("get", "list"))),
		And(HaveField("Name", "pods"), HaveField("Kind", "PodMetrics"), HaveField("Namespaced", true), HaveField("Verbs", ConsistOf("get", "list"))),
	))

	// The legacy documents, as older clients read them.
	for _, path := range []string{"/apis", "/apis/metrics.k8s.io", "/apis/metrics.k8s.io/v1beta1"} {
		code, _, body := env.do(t, http.MethodGet, path, "", "application/json", "")
		g.Expect(code).To(Equal(http.StatusOK), path)
		g.Expect(body).To(ContainSubstring(`metrics.k8s.io/v1beta1`), path)
	}
	_, _, body := env.do(t, http.MethodGet, "/apis/metrics.k8s.io/v1beta1", "", "application/json", "")
	g.Expect(body).To(ContainSubstring(`"kind":"NodeMetrics"`))
	g.Expect(body).To(ContainSubstring(`"kind":"PodMetrics"`))
}

// TestMetricsAPIClientGo reads NodeMetrics and PodMetrics with k8s.io/metrics' typed clientset, in
// JSON and in protobuf.
func TestMetricsAPIClientGo(t *testing.T) {
	env, clock := newMetricsEnv(t)
	for _, proto := range []bool{false, true} {
		t.Run(map[bool]string{false: "json", true: "protobuf"}[proto], func(t *testing.T) {
			g := NewWithT(t)
			cfg := env.cfg
			if proto {
				cfg = env.protobufConfig()
			}
			mc := metricsClientset(t, cfg).MetricsV1beta1()
			c := ctx(t)

			nodes, err := mc.NodeMetricses().List(c, metav1.ListOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			var nodeNames []string
			for _, n := range nodes.Items {
				nodeNames = append(nodeNames, n.Name)
				g.Expect(n.Window.Duration).To(Equal(15 * time.Second))
				g.Expect(n.Timestamp.Time).To(BeTemporally("<=", clock.Now()))
				g.Expect(n.Timestamp.Time).To(BeTemporally(">", clock.Now().Add(-15*time.Second)))
			}
			g.Expect(nodeNames).To(ConsistOf("cp-0", "worker-0"), "a NotReady node's kubelet is not scraped")

			pods, err := mc.PodMetricses("").List(c, metav1.ListOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			var keys []string
			for _, p := range pods.Items {
				keys = append(keys, podKey(p))
			}
			g.Expect(keys).To(ConsistOf("kube-system/etcd-cp-0", "default/web-0", "demo/api-0"), "only Running pods on scraped nodes")

			// Each container's usage comes from its requests (250m, 256Mi): 60% and 70% of them,
			// give or take the jitter.
			var web metricsv1beta1.PodMetrics
			for _, p := range pods.Items {
				if p.Name == "web-0" {
					web = p
				}
			}
			g.Expect(web.Labels).To(HaveKeyWithValue("app", "web"))
			g.Expect(web.Containers).To(HaveLen(2))
			g.Expect([]string{web.Containers[0].Name, web.Containers[1].Name}).To(Equal([]string{"web", "sidecar"}))
			for _, ctr := range web.Containers {
				cpu, mem := ctr.Usage.Cpu().MilliValue(), ctr.Usage.Memory().Value()
				g.Expect(cpu).To(And(BeNumerically(">=", 100), BeNumerically("<=", 200)), "cpu %dm", cpu)
				g.Expect(mem).To(And(BeNumerically(">=", 150<<20), BeNumerically("<=", 210<<20)), "memory %d", mem)
			}

			// A node's usage is its pods' plus the node's own (60m, 450Mi, give or take).
			w0, err := mc.NodeMetricses().Get(c, "worker-0", metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			var podCPU, podMem int64
			for _, p := range pods.Items {
				if p.Name == "web-0" || p.Name == "api-0" {
					for _, ctr := range p.Containers {
						podCPU += ctr.Usage.Cpu().ScaledValue(resource.Nano)
						podMem += ctr.Usage.Memory().Value()
					}
				}
			}
			overheadCPU := w0.Usage.Cpu().ScaledValue(resource.Nano) - podCPU
			overheadMem := w0.Usage.Memory().Value() - podMem
			g.Expect(overheadCPU).To(And(BeNumerically(">=", 40_000_000), BeNumerically("<=", 80_000_000)))
			g.Expect(overheadMem).To(And(BeNumerically(">=", 400<<20), BeNumerically("<=", 500<<20)))

			// Selectors: by label, across namespaces and in one.
			sel, err := mc.PodMetricses("").List(c, metav1.ListOptions{LabelSelector: "app=web"})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(sel.Items).To(HaveLen(1))
			g.Expect(podKey(sel.Items[0])).To(Equal("default/web-0"))
			demo, err := mc.PodMetricses("demo").List(c, metav1.ListOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(demo.Items).To(HaveLen(1))
			g.Expect(podKey(demo.Items[0])).To(Equal("demo/api-0"))
			cp, err := mc.NodeMetricses().List(c, metav1.ListOptions{LabelSelector: "kubernetes.io/hostname=cp-0"})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(cp.Items).To(HaveLen(1))
			g.Expect(cp.Items[0].Name).To(Equal("cp-0"))
			byName, err := mc.PodMetricses("").List(c, metav1.ListOptions{FieldSelector: "metadata.name=etcd-cp-0"})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(byName.Items).To(HaveLen(1))

			got, err := mc.PodMetricses("default").Get(c, "web-0", metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got.Containers).To(Equal(web.Containers), "stable within a window")

			// Not found, as metrics-server answers: no pod or node, or one without metrics.
			for _, tc := range []struct {
				get  func() error
				want string
			}{
				{func() error { _, err := mc.PodMetricses("demo").Get(c, "pending-0", metav1.GetOptions{}); return err }, `podmetrics.metrics.k8s.io "demo/pending-0" not found`},
				{func() error { _, err := mc.PodMetricses("default").Get(c, "lost-0", metav1.GetOptions{}); return err }, `podmetrics.metrics.k8s.io "default/lost-0" not found`},
				{func() error { _, err := mc.PodMetricses("default").Get(c, "absent", metav1.GetOptions{}); return err }, `pods "absent" not found`},
				{func() error { _, err := mc.NodeMetricses().Get(c, "worker-1", metav1.GetOptions{}); return err }, `nodemetrics.metrics.k8s.io "worker-1" not found`},
				{func() error { _, err := mc.NodeMetricses().Get(c, "absent", metav1.GetOptions{}); return err }, `nodes "absent" not found`},
			} {
				err := tc.get()
				g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%v", err)
				g.Expect(err.Error()).To(Equal(tc.want))
			}

			// Neither watch nor writes.
			_, err = mc.PodMetricses("default").Watch(c, metav1.ListOptions{})
			g.Expect(apierrors.IsMethodNotSupported(err)).To(BeTrue(), "%v", err)
		})
	}

	// The next window has other numbers.
	g := NewWithT(t)
	mc := metricsClientset(t, env.cfg).MetricsV1beta1()
	before, err := mc.PodMetricses("default").Get(ctx(t), "web-0", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	clock.Add(15 * time.Second)
	after, err := mc.PodMetricses("default").Get(ctx(t), "web-0", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(after.Timestamp.Sub(before.Timestamp.Time)).To(Equal(15 * time.Second))
	g.Expect(after.Containers).NotTo(Equal(before.Containers))
}

// scrapeResource GETs a node's /metrics/resource through the API server's node proxy and parses
// it as Prometheus does.
func scrapeResource(t *testing.T, env *testEnv, node string) (map[string]*dto.MetricFamily, string) {
	t.Helper()
	code, hdr, body := env.do(t, http.MethodGet, "/api/v1/nodes/"+node+"/proxy/metrics/resource", "", "", "")
	if code != http.StatusOK {
		t.Fatalf("GET nodes/%s/proxy/metrics/resource: %d %s", node, code, body)
	}
	if ct := hdr.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Fatalf("Content-Type %q", ct)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parsing:\n%s\n%v", body, err)
	}
	return fams, body
}

func sampleOf(f *dto.MetricFamily, labels ...string) *dto.Metric {
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	for _, m := range f.GetMetric() {
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		if len(got) == len(want) {
			match := true
			for k, v := range want {
				if got[k] != v {
					match = false
				}
			}
			if match {
				return m
			}
		}
	}
	return nil
}

func value(m *dto.Metric) float64 {
	if m.GetCounter() != nil {
		return m.GetCounter().GetValue()
	}
	return m.GetGauge().GetValue()
}

// TestNodeProxyMetricsResource scrapes a node's kubelet resource metrics through the node proxy,
// as metrics-server does, twice a window apart: the working sets are the metrics API's memory
// and the counters' rate over the window is its cpu.
func TestNodeProxyMetricsResource(t *testing.T) {
	g := NewWithT(t)
	env, clock := newMetricsEnv(t)
	mc := metricsClientset(t, env.cfg).MetricsV1beta1()
	c := ctx(t)

	first, body := scrapeResource(t, env, "worker-0")
	for name, help := range map[string]string{
		"node_cpu_usage_seconds_total":       "[STABLE] Cumulative cpu time consumed by the node in core-seconds",
		"node_memory_working_set_bytes":      "[STABLE] Current working set of the node in bytes",
		"pod_cpu_usage_seconds_total":        "[STABLE] Cumulative cpu time consumed by the pod in core-seconds",
		"pod_memory_working_set_bytes":       "[STABLE] Current working set of the pod in bytes",
		"container_cpu_usage_seconds_total":  "[STABLE] Cumulative cpu time consumed by the container in core-seconds",
		"container_memory_working_set_bytes": "[STABLE] Current working set of the container in bytes",
		"container_start_time_seconds":       "[STABLE] Start time of the container since unix epoch in seconds",
		"resource_scrape_error":              "[STABLE] 1 if there was an error while getting container metrics, 0 otherwise",
	} {
		g.Expect(first).To(HaveKey(name), body)
		g.Expect(first[name].GetHelp()).To(Equal(help))
	}
	g.Expect(first["node_cpu_usage_seconds_total"].GetType()).To(Equal(dto.MetricType_COUNTER))
	g.Expect(first["container_memory_working_set_bytes"].GetType()).To(Equal(dto.MetricType_GAUGE))
	g.Expect(value(first["resource_scrape_error"].GetMetric()[0])).To(BeZero())
	g.Expect(first).NotTo(HaveKey("scrape_error"), "hidden since 1.29")
	// Only this node's Running pods.
	var pods []string
	for _, m := range first["pod_memory_working_set_bytes"].GetMetric() {
		lbl := map[string]string{}
		for _, l := range m.GetLabel() {
			lbl[l.GetName()] = l.GetValue()
		}
		pods = append(pods, lbl["namespace"]+"/"+lbl["pod"])
	}
	sort.Strings(pods)
	g.Expect(pods).To(Equal([]string{"default/web-0", "demo/api-0"}))

	// Memory: the API's, at the same scrape.
	apiPods, err := mc.PodMetricses("").List(c, metav1.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	apiNode, err := mc.NodeMetricses().Get(c, "worker-0", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(value(first["node_memory_working_set_bytes"].GetMetric()[0])).To(BeNumerically("==", apiNode.Usage.Memory().Value()))
	g.Expect(first["node_memory_working_set_bytes"].GetMetric()[0].GetTimestampMs()).To(Equal(apiNode.Timestamp.UnixMilli()))
	for _, p := range apiPods.Items {
		if p.Namespace == "kube-system" {
			continue
		}
		var podMem int64
		for _, ctr := range p.Containers {
			m := sampleOf(first["container_memory_working_set_bytes"], "container", ctr.Name, "namespace", p.Namespace, "pod", p.Name)
			g.Expect(m).NotTo(BeNil(), "%s/%s %s", p.Namespace, p.Name, ctr.Name)
			g.Expect(value(m)).To(BeNumerically("==", ctr.Usage.Memory().Value()))
			podMem += ctr.Usage.Memory().Value()
		}
		g.Expect(value(sampleOf(first["pod_memory_working_set_bytes"], "namespace", p.Namespace, "pod", p.Name))).To(BeNumerically("==", podMem))
	}

	// CPU: the next scrape's counters minus this one's, over the window, are the API's usage then.
	clock.Add(15 * time.Second)
	second, _ := scrapeResource(t, env, "worker-0")
	apiPods, err = mc.PodMetricses("").List(c, metav1.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	apiNode, err = mc.NodeMetricses().Get(c, "worker-0", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	rate := func(name string, labels ...string) int64 {
		a, b := sampleOf(first[name], labels...), sampleOf(second[name], labels...)
		g.Expect(a).NotTo(BeNil(), "%s %v", name, labels)
		g.Expect(b).NotTo(BeNil(), "%s %v", name, labels)
		g.Expect(b.GetTimestampMs() - a.GetTimestampMs()).To(BeEquivalentTo(15000))
		g.Expect(value(b)).To(BeNumerically(">", value(a)), "a counter")
		return int64(math.Round((value(b) - value(a)) / 15 * 1e9))
	}
	g.Expect(rate("node_cpu_usage_seconds_total")).To(BeNumerically("~", apiNode.Usage.Cpu().ScaledValue(resource.Nano), 2))
	for _, p := range apiPods.Items {
		if p.Namespace == "kube-system" {
			continue
		}
		var podCPU int64
		for _, ctr := range p.Containers {
			want := ctr.Usage.Cpu().ScaledValue(resource.Nano)
			g.Expect(rate("container_cpu_usage_seconds_total", "container", ctr.Name, "namespace", p.Namespace, "pod", p.Name)).To(BeNumerically("~", want, 2))
			podCPU += want
		}
		g.Expect(rate("pod_cpu_usage_seconds_total", "namespace", p.Namespace, "pod", p.Name)).To(BeNumerically("~", podCPU, 2))
	}

	// The node proxy's other answers: no node, a node whose kubelet cannot be reached, other paths.
	code, _, out := env.do(t, http.MethodGet, "/api/v1/nodes/absent/proxy/metrics/resource", "", "", "")
	g.Expect(code).To(Equal(http.StatusNotFound), out)
	g.Expect(out).To(ContainSubstring(`nodes \"absent\" not found`))
	code, _, out = env.do(t, http.MethodGet, "/api/v1/nodes/worker-1/proxy/metrics/resource", "", "", "")
	g.Expect(code).To(Equal(http.StatusServiceUnavailable), out)
	g.Expect(out).To(ContainSubstring("error trying to reach service"))
	code, _, out = env.do(t, http.MethodGet, "/api/v1/nodes/worker-0/proxy/stats/summary", "", "", "")
	g.Expect(code).To(Equal(http.StatusBadRequest), out)
	code, _, _ = env.do(t, http.MethodGet, "/api/v1/nodes/https:worker-0:10250/proxy/metrics/resource", "", "", "")
	g.Expect(code).To(Equal(http.StatusOK), "a name with scheme and port")
}

// TestMetricsAuthorization: the metrics API and the node proxy are authorized as kube-apiserver
// authorizes them, through the cluster's RBAC: get/list on nodes and pods in metrics.k8s.io, get
// on nodes/proxy (create for a POST).
func TestMetricsAuthorization(t *testing.T) {
	g := NewWithT(t)
	m := store.NewManager()
	cl, err := m.AddCluster("test", store.ClusterOptions{KubernetesVersion: testVersion})
	g.Expect(err).NotTo(HaveOccurred())
	// The mux's chain: request info, the certificate's user (here: a header), authorization.
	chain := authz.WithAuthorization(NewHandler(cl, Options{}), cl)
	chain = genericfilters.WithRequestInfo(chain, &apirequest.RequestInfoFactory{APIPrefixes: sets.NewString("api", "apis"), GrouplessAPIPrefixes: sets.NewString("api")})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u := &user.DefaultInfo{Name: "kubernetes-admin", Groups: []string{user.SystemPrivilegedGroup, user.AllAuthenticated}}
		if name := r.Header.Get("X-Test-User"); name != "" {
			u = &user.DefaultInfo{Name: name, Groups: []string{user.AllAuthenticated}}
		}
		chain.ServeHTTP(w, r.WithContext(apirequest.WithUser(r.Context(), u)))
	}))
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		m.DeleteCluster("test")
	})
	env := &testEnv{cluster: cl, server: srv, cfg: &rest.Config{Host: srv.URL, QPS: -1, Timeout: 30 * time.Second}}
	createNode(t, env, metricsNode("worker-0", true))
	admin := kubernetes.NewForConfigOrDie(env.cfg)
	c := context.Background()

	as := func(who, method, path string) int {
		t.Helper()
		req, err := http.NewRequestWithContext(c, method, srv.URL+path, nil)
		g.Expect(err).NotTo(HaveOccurred())
		req.Header.Set("X-Test-User", who)
		resp, err := srv.Client().Do(req)
		g.Expect(err).NotTo(HaveOccurred())
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	paths := []string{"/apis/metrics.k8s.io/v1beta1/nodes", "/apis/metrics.k8s.io/v1beta1/nodes/worker-0",
		"/apis/metrics.k8s.io/v1beta1/pods", "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods",
		"/api/v1/nodes/worker-0/proxy/metrics/resource"}
	for _, p := range paths {
		g.Expect(as("nobody", http.MethodGet, p)).To(Equal(http.StatusForbidden), p)
	}

	// metrics-server's aggregated reader role, and node proxy for a scraper.
	_, err = admin.RbacV1().ClusterRoles().Create(c, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "metrics-reader"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"metrics.k8s.io"}, Resources: []string{"nodes", "pods"}, Verbs: []string{"get", "list"}},
			{APIGroups: []string{""}, Resources: []string{"nodes/proxy"}, Verbs: []string{"get"}},
		},
	}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = admin.RbacV1().ClusterRoleBindings().Create(c, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "metrics-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "reader"}},
	}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	for _, p := range paths {
		g.Expect(as("reader", http.MethodGet, p)).To(Equal(http.StatusOK), p)
		g.Expect(as("nobody", http.MethodGet, p)).To(Equal(http.StatusForbidden), p)
	}
	// A POST through the proxy is a create, which the reader may not.
	g.Expect(as("reader", http.MethodPost, "/api/v1/nodes/worker-0/proxy/metrics/resource")).To(Equal(http.StatusForbidden))
	// The core group's nodes are another resource.
	g.Expect(as("reader", http.MethodGet, "/api/v1/nodes")).To(Equal(http.StatusForbidden))
}

// TestAPIServices: the APIService of metrics-server is Available, next to the Local ones of
// the served group-versions, read with kube-aggregator's clientset (JSON and protobuf).
func TestAPIServices(t *testing.T) {
	env := newTestEnv(t, Options{})
	for _, cfg := range []*rest.Config{env.cfg, env.protobufConfig()} {
		g := NewWithT(t)
		ac, err := aggregatorclient.NewForConfig(cfg)
		g.Expect(err).NotTo(HaveOccurred())
		c := ctx(t)
		m, err := ac.ApiregistrationV1().APIServices().Get(c, "v1beta1.metrics.k8s.io", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(m.Spec.Group).To(Equal("metrics.k8s.io"))
		g.Expect(m.Spec.Version).To(Equal("v1beta1"))
		g.Expect(m.Spec.Service).To(HaveField("Name", "metrics-server"))
		g.Expect(m.Status.Conditions).To(ContainElement(And(HaveField("Type", apiregistrationv1.Available), HaveField("Status", apiregistrationv1.ConditionTrue))))
		list, err := ac.ApiregistrationV1().APIServices().List(c, metav1.ListOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		var names []string
		for _, a := range list.Items {
			names = append(names, a.Name)
			g.Expect(a.Status.Conditions).To(ContainElement(HaveField("Status", apiregistrationv1.ConditionTrue)), a.Name)
		}
		g.Expect(names).To(ContainElements("v1.", "v1.apps", "v1.apiregistration.k8s.io", "v1beta1.metrics.k8s.io"))
		g.Expect(sort.StringsAreSorted(names)).To(BeTrue())
		_, err = ac.ApiregistrationV1().APIServices().Get(c, "v1.absent.example.com", metav1.GetOptions{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%v", err)
	}
}
