package apiserver

import (
	"bytes"
	"fmt"
	"hash/fnv"
	"math"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	utilversion "k8s.io/apimachinery/pkg/util/version"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
	metricsv1beta1 "k8s.io/metrics/pkg/apis/metrics/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/kinds"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// Resource metrics, as a cluster with metrics-server installed serves them: `metrics.k8s.io/v1beta1`
// NodeMetrics and PodMetrics (what `kubectl top` and the HorizontalPodAutoscaler read) and each
// kubelet's `/metrics/resource` through `nodes/<name>/proxy` (what metrics-server scrapes). No
// container runs, so the numbers are synthesized from the pods' requests, deterministically:
// one scrape every metricsWindow, every reader of the same window sees the same values, and both
// surfaces agree (the API's cpu is the rate of the kubelet's counters over the window, its
// memory the kubelet's working set). Nothing is stored and nothing runs between requests.

// metricsWindow is metrics-server's default --metric-resolution: the API reports the usage over
// the last window, a new one starts every window.
const metricsWindow = 15 * time.Second

const (
	// usage as a share of the requests: real workloads mostly use less than they request.
	cpuUsageShare    = 0.6
	memoryUsageShare = 0.7
	// cpuJitter bounds the cpu rate's variation around its base (±2×cpuJitter), memoryJitter the
	// working set's (±memoryJitter).
	cpuJitter    = 0.15
	memoryJitter = 0.10
	// a container without requests still uses something.
	defaultContainerCPUNano = 5_000_000        // 5m
	defaultContainerMemory  = 24 * 1024 * 1024 // 24Mi
	// the node's own use (kubelet, container runtime, system daemons) on top of its pods'.
	nodeOverheadCPUNano = 60_000_000        // 60m
	nodeOverheadMemory  = 450 * 1024 * 1024 // 450Mi
	pageSize            = 4096
)

var (
	nodeMetricsGVR = metricsv1beta1.SchemeGroupVersion.WithResource("nodes")
	podMetricsGVR  = metricsv1beta1.SchemeGroupVersion.WithResource("pods")
	nodesGVR       = corev1.SchemeGroupVersion.WithResource("nodes")
	// upstream's NotFound when a node or pod exists but has no metrics ("podmetrics.metrics.k8s.io
	// \"ns/name\" not found").
	nodeMetricsResource = schema.GroupResource{Group: metricsv1beta1.GroupName, Resource: "nodemetrics"}
	podMetricsResource  = schema.GroupResource{Group: metricsv1beta1.GroupName, Resource: "podmetrics"}
)

// metricsResources are metrics-server's resources as discovery lists them: read-only, no watch.
var metricsResources = []store.ResourceInfo{
	{GVR: nodeMetricsGVR, Kind: "NodeMetrics", ListKind: "NodeMetricsList", Verbs: []string{"get", "list"}},
	{GVR: podMetricsGVR, Kind: "PodMetrics", ListKind: "PodMetricsList", Namespaced: true, Verbs: []string{"get", "list"}},
}

func isMetrics(gvr schema.GroupVersionResource) bool {
	return gvr == nodeMetricsGVR || gvr == podMetricsGVR
}

var metricsCodecs = sync.OnceValue(func() runtime.NegotiatedSerializer {
	s := runtime.NewScheme()
	utilruntime.Must(metricsv1beta1.AddToScheme(s))
	metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
	return serializer.NewCodecFactory(s).WithoutConversion()
})

// metricsPrinter has metrics-server's table columns.
var metricsPrinter = kinds.Printer{
	Columns: []metav1.TableColumnDefinition{
		{Name: "Name", Type: "string", Format: "name", Description: "Name of the resource"},
		{Name: "CPU", Type: "string", Format: "", Description: "CPU usage"},
		{Name: "Memory", Type: "string", Format: "", Description: "Memory usage"},
		{Name: "Window", Type: "string", Format: "", Description: "Interval over which the usage was measured"},
	},
	Cells: func(obj runtime.Object) []any {
		var name string
		var usage corev1.ResourceList
		var window time.Duration
		switch m := obj.(type) {
		case *metricsv1beta1.NodeMetrics:
			name, usage, window = m.Name, m.Usage, m.Window.Duration
		case *metricsv1beta1.PodMetrics:
			name, window = m.Name, m.Window.Duration
			usage = corev1.ResourceList{}
			for _, c := range m.Containers {
				for k, v := range c.Usage {
					sum := usage[k]
					sum.Add(v)
					usage[k] = sum
				}
			}
		}
		return []any{name, usage.Cpu().String(), usage.Memory().String(), window.String()}
	},
}

// serveMetrics answers get and list of NodeMetrics and PodMetrics; serveResource has checked the
// verb against the resource's and the path's scope.
func (h *handler) serveMetrics(rq *reqScope) {
	rq.printer = metricsPrinter
	labelSel, fieldSel, err := querySelectors(rq.r)
	if err != nil {
		h.writeError(rq.w, rq.r, err)
		return
	}
	snap := newMetricsSnapshot(h.now())
	var out runtime.Object
	switch {
	case rq.gvr == nodeMetricsGVR && rq.verb == "get":
		out, err = h.nodeMetric(snap, rq.name)
	case rq.gvr == nodeMetricsGVR:
		out, err = h.nodeMetricsList(snap, labelSel, fieldSel)
	case rq.verb == "get":
		out, err = h.podMetric(snap, rq.ns, rq.name)
	default:
		out, err = h.podMetricsList(snap, rq.ns, labelSel, fieldSel)
	}
	if err != nil {
		h.writeError(rq.w, rq.r, err)
		return
	}
	h.writeWith(rq, http.StatusOK, out, metricsCodecs(), metricsv1beta1.SchemeGroupVersion)
}

// querySelectors parses a request's labelSelector and fieldSelector (400 when malformed), for the
// kinds served without a store (APIServices, metrics).
func querySelectors(r *http.Request) (labels.Selector, fields.Selector, error) {
	q := r.URL.Query()
	labelSel, err := labels.Parse(q.Get("labelSelector"))
	if err != nil {
		return nil, nil, apierrors.NewBadRequest(err.Error())
	}
	fieldSel, err := fields.ParseSelector(q.Get("fieldSelector"))
	if err != nil {
		return nil, nil, apierrors.NewBadRequest(err.Error())
	}
	return labelSel, fieldSel, nil
}

func (h *handler) now() time.Time {
	if h.opts.Now != nil {
		return h.opts.Now()
	}
	return time.Now()
}

func (h *handler) nodeMetric(snap metricsSnapshot, name string) (runtime.Object, error) {
	obj, err := h.c.Get(nodesGVR, "", name)
	if err != nil {
		return nil, err
	}
	node := obj.(*corev1.Node)
	if !nodeReady(node) {
		return nil, apierrors.NewNotFound(nodeMetricsResource, name)
	}
	pods, err := h.runningPods("", fields.OneTermEqualSelector("spec.nodeName", name), nil)
	if err != nil {
		return nil, err
	}
	m := snap.node(node, pods)
	return m.api(snap, node), nil
}

func (h *handler) nodeMetricsList(snap metricsSnapshot, labelSel labels.Selector, fieldSel fields.Selector) (runtime.Object, error) {
	nodes, err := h.readyNodes(labelSel)
	if err != nil {
		return nil, err
	}
	pods, err := h.runningPods("", nil, nil)
	if err != nil {
		return nil, err
	}
	byNode := map[string][]*corev1.Pod{}
	for _, p := range pods {
		byNode[p.Spec.NodeName] = append(byNode[p.Spec.NodeName], p)
	}
	out := &metricsv1beta1.NodeMetricsList{Items: []metricsv1beta1.NodeMetrics{}}
	for _, n := range nodes {
		if !fieldSel.Matches(fields.Set{"metadata.name": n.Name}) {
			continue
		}
		out.Items = append(out.Items, *snap.node(n, byNode[n.Name]).api(snap, n))
	}
	return out, nil
}

func (h *handler) podMetric(snap metricsSnapshot, ns, name string) (runtime.Object, error) {
	obj, err := h.c.Get(podsGVR, ns, name)
	if err != nil {
		return nil, err
	}
	pod := obj.(*corev1.Pod)
	if pod.Status.Phase != corev1.PodRunning || pod.Spec.NodeName == "" {
		return nil, apierrors.NewNotFound(podMetricsResource, ns+"/"+name)
	}
	nodeObj, err := h.c.Get(nodesGVR, "", pod.Spec.NodeName)
	if err != nil || !nodeReady(nodeObj.(*corev1.Node)) {
		return nil, apierrors.NewNotFound(podMetricsResource, ns+"/"+name)
	}
	return snap.pod(pod).api(snap, pod), nil
}

func (h *handler) podMetricsList(snap metricsSnapshot, ns string, labelSel labels.Selector, fieldSel fields.Selector) (runtime.Object, error) {
	nodes, err := h.readyNodes(nil)
	if err != nil {
		return nil, err
	}
	ready := map[string]bool{}
	for _, n := range nodes {
		ready[n.Name] = true
	}
	pods, err := h.runningPods(ns, nil, labelSel)
	if err != nil {
		return nil, err
	}
	out := &metricsv1beta1.PodMetricsList{Items: []metricsv1beta1.PodMetrics{}}
	for _, p := range pods {
		if !ready[p.Spec.NodeName] || !fieldSel.Matches(fields.Set{"metadata.name": p.Name, "metadata.namespace": p.Namespace}) {
			continue
		}
		out.Items = append(out.Items, *snap.pod(p).api(snap, p))
	}
	return out, nil
}

// readyNodes are the nodes whose kubelet metrics-server can scrape: a NotReady node's kubelet
// is taken to be unreachable, so it and its pods have no metrics.
func (h *handler) readyNodes(sel labels.Selector) ([]*corev1.Node, error) {
	list, err := h.c.List(nodesGVR, "", store.ListOptions{LabelSelector: sel, ShareItems: true})
	if err != nil {
		return nil, err
	}
	nl, ok := list.(*corev1.NodeList)
	if !ok {
		return nil, apierrors.NewInternalError(fmt.Errorf("store returned %T for a node list", list))
	}
	var out []*corev1.Node
	for i := range nl.Items {
		if nodeReady(&nl.Items[i]) {
			out = append(out, &nl.Items[i])
		}
	}
	return out, nil
}

// runningPods are the pods a kubelet reports: Running and bound to a node.
func (h *handler) runningPods(ns string, fieldSel fields.Selector, labelSel labels.Selector) ([]*corev1.Pod, error) {
	list, err := h.c.List(podsGVR, ns, store.ListOptions{FieldSelector: fieldSel, LabelSelector: labelSel, ShareItems: true})
	if err != nil {
		return nil, err
	}
	pl, ok := list.(*corev1.PodList)
	if !ok {
		return nil, apierrors.NewInternalError(fmt.Errorf("store returned %T for a pod list", list))
	}
	var out []*corev1.Pod
	for i := range pl.Items {
		if p := &pl.Items[i]; p.Status.Phase == corev1.PodRunning && p.Spec.NodeName != "" {
			out = append(out, p)
		}
	}
	return out, nil
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// --- the model ---

// metricsSnapshot is one scrape: the window that ends at the scrape time, i.e. window number
// scrape-1 of the ones counted since the epoch.
type metricsSnapshot struct {
	scrape int64 // number of the window boundary the values are for
	now    time.Time
}

func newMetricsSnapshot(now time.Time) metricsSnapshot {
	return metricsSnapshot{scrape: windowOf(now), now: now}
}

func windowOf(t time.Time) int64 {
	return int64(math.Floor(float64(t.UnixNano()) / float64(metricsWindow)))
}

// time is when the scrape happened: the boundary at the start of the current window.
func (snap metricsSnapshot) time() time.Time {
	return time.Unix(0, snap.scrape*int64(metricsWindow))
}

// series is one consumer of cpu and memory (a container, or a node's own overhead). Its cpu rate
// over window j is base + jitter(j+1) - jitter(j), so the cumulative cpu counter at a boundary
// has a closed form (the jitters telescope) and never decreases, and the rate over any window is
// exactly the counter's difference across it.
type series struct {
	key      string // stable identity: a pod's UID and container name, or a node's UID
	cpuBase  int64  // nanocores
	memBase  int64  // bytes
	startWin int64  // the boundary its counter starts from
}

// unit is a deterministic value in [-1, 1) for a key, a purpose and a window.
func unit(key, purpose string, window int64) float64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(key))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(purpose))
	var b [8]byte
	for i := range b {
		b[i] = byte(window >> (8 * i))
	}
	_, _ = h.Write(b[:])
	return float64(h.Sum64()>>11)/float64(uint64(1)<<53)*2 - 1
}

func (s series) cpuJitter(window int64) int64 {
	return int64(math.Round(float64(s.cpuBase) * cpuJitter * unit(s.key, "cpu", window)))
}

// cpuRate is the usage in nanocores over the window that ends at boundary b.
func (s series) cpuRate(b int64) int64 {
	return s.cpuBase + s.cpuJitter(b) - s.cpuJitter(b-1)
}

// cpuCounter is the cumulative cpu time in core-nanoseconds at boundary b.
func (s series) cpuCounter(b int64) int64 {
	n := s.cpuBase*(b-s.startWin) + s.cpuJitter(b) - s.cpuJitter(s.startWin)
	return n * int64(metricsWindow/time.Second)
}

// memory is the working set in bytes at boundary b, in whole pages.
func (s series) memory(b int64) int64 {
	m := float64(s.memBase) * (1 + memoryJitter*unit(s.key, "memory", b))
	return int64(m) / pageSize * pageSize
}

// startWindow is the boundary a counter starts from for something started at t: one before the
// window it started in, so that it has a full window of usage at the first scrape after its
// start (as if metrics-server had scraped it twice already). Never after the scrape.
func (snap metricsSnapshot) startWindow(t time.Time) int64 {
	return min(windowOf(t), snap.scrape) - 1
}

// containerSeries are a running pod's containers as the kubelet measures them: the app
// containers and the restartable (sidecar) init containers.
func (snap metricsSnapshot) containerSeries(p *corev1.Pod) []namedSeries {
	start := p.CreationTimestamp.Time
	if p.Status.StartTime != nil {
		start = p.Status.StartTime.Time
	}
	sw := snap.startWindow(start)
	var out []namedSeries
	add := func(c *corev1.Container) {
		cpu := c.Resources.Requests.Cpu()
		if cpu.IsZero() {
			cpu = c.Resources.Limits.Cpu()
		}
		mem := c.Resources.Requests.Memory()
		if mem.IsZero() {
			mem = c.Resources.Limits.Memory()
		}
		s := series{key: string(p.UID) + "/" + c.Name, startWin: sw, cpuBase: defaultContainerCPUNano, memBase: defaultContainerMemory}
		if !cpu.IsZero() {
			s.cpuBase = int64(float64(cpu.ScaledValue(resource.Nano)) * cpuUsageShare)
		}
		if !mem.IsZero() {
			s.memBase = int64(float64(mem.Value()) * memoryUsageShare)
		}
		out = append(out, namedSeries{name: c.Name, series: s, start: start})
	}
	for i := range p.Spec.InitContainers {
		if c := &p.Spec.InitContainers[i]; c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			add(c)
		}
	}
	for i := range p.Spec.Containers {
		add(&p.Spec.Containers[i])
	}
	return out
}

type namedSeries struct {
	name  string
	start time.Time
	series
}

// usage is one consumer's numbers at a scrape.
type usage struct {
	cpuRate    int64 // nanocores over the window ending at the scrape
	cpuCounter int64 // core-nanoseconds at the scrape
	memory     int64 // bytes
}

func (s series) at(b int64) usage {
	return usage{cpuRate: s.cpuRate(b), cpuCounter: s.cpuCounter(b), memory: s.memory(b)}
}

func (u *usage) add(o usage) {
	u.cpuRate += o.cpuRate
	u.cpuCounter += o.cpuCounter
	u.memory += o.memory
}

func (u usage) resources() corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewScaledQuantity(u.cpuRate, resource.Nano),
		corev1.ResourceMemory: *resource.NewQuantity(u.memory, resource.BinarySI),
	}
}

type containerUsage struct {
	name  string
	start time.Time
	usage
}

type podUsage struct {
	containers []containerUsage
	total      usage
}

func (snap metricsSnapshot) pod(p *corev1.Pod) podUsage {
	var out podUsage
	for _, s := range snap.containerSeries(p) {
		u := s.at(snap.scrape)
		out.containers = append(out.containers, containerUsage{name: s.name, start: s.start, usage: u})
		out.total.add(u)
	}
	return out
}

func (u podUsage) api(snap metricsSnapshot, p *corev1.Pod) *metricsv1beta1.PodMetrics {
	m := &metricsv1beta1.PodMetrics{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, Labels: p.Labels, CreationTimestamp: metav1.NewTime(snap.now)},
		Timestamp:  metav1.NewTime(snap.time()),
		Window:     metav1.Duration{Duration: metricsWindow},
		Containers: []metricsv1beta1.ContainerMetrics{},
	}
	for _, c := range u.containers {
		m.Containers = append(m.Containers, metricsv1beta1.ContainerMetrics{Name: c.name, Usage: c.resources()})
	}
	return m
}

// nodeUsage is a node's pods and its own overhead; the node's totals are their sums.
type nodeUsage struct {
	pods  []*corev1.Pod
	usage []podUsage
	total usage
}

func (snap metricsSnapshot) node(n *corev1.Node, pods []*corev1.Pod) nodeUsage {
	overhead := series{key: string(n.UID), cpuBase: nodeOverheadCPUNano, memBase: nodeOverheadMemory,
		startWin: snap.startWindow(n.CreationTimestamp.Time)}
	out := nodeUsage{pods: pods, total: overhead.at(snap.scrape)}
	for _, p := range pods {
		u := snap.pod(p)
		out.usage = append(out.usage, u)
		out.total.add(u.total)
	}
	return out
}

func (u nodeUsage) api(snap metricsSnapshot, n *corev1.Node) *metricsv1beta1.NodeMetrics {
	return &metricsv1beta1.NodeMetrics{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: n.Labels, CreationTimestamp: metav1.NewTime(snap.now)},
		Timestamp:  metav1.NewTime(snap.time()),
		Window:     metav1.Duration{Duration: metricsWindow},
		Usage:      u.total.resources(),
	}
}

// --- nodes/<name>/proxy ---

// isNodeProxy reports whether a request is for nodes/<name>/proxy[/<path>].
func isNodeProxy(info *apirequest.RequestInfo) bool {
	return info.APIPrefix == "api" && info.APIGroup == "" && info.APIVersion == "v1" &&
		info.Resource == "nodes" && info.Subresource == "proxy" && len(info.Parts) >= 3
}

// serveNodeProxy answers what kube-apiserver proxies to a node's kubelet: `/metrics/resource`
// (the kubelet's resource metrics, what metrics-server scrapes) for a GET; everything else as
// the other kubelet subresources (400: nothing runs behind it). The name may carry a scheme and a
// port ("https:node:10250"), as upstream's node proxy accepts.
func (h *handler) serveNodeProxy(w http.ResponseWriter, r *http.Request, info *apirequest.RequestInfo) {
	_, name, _, valid := utilnet.SplitSchemeNamePort(info.Parts[1])
	if !valid {
		h.writeError(w, r, apierrors.NewBadRequest(fmt.Sprintf("invalid node request %q", info.Parts[1])))
		return
	}
	obj, err := h.c.Get(nodesGVR, "", name)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	node := obj.(*corev1.Node)
	path := "/" + strings.Join(info.Parts[3:], "/")
	if path != "/metrics/resource" || (r.Method != http.MethodGet && r.Method != http.MethodHead) {
		h.writeError(w, r, badRequestf("nodes %q: proxy is not available in a simulated workload cluster: no containers or processes run behind it", name))
		return
	}
	if !nodeReady(node) {
		// The proxy cannot reach a NotReady node's kubelet, as metrics-server cannot.
		h.writeError(w, r, apierrors.NewServiceUnavailable(fmt.Sprintf("error trying to reach service: dial tcp %s:10250: connect: no route to host", nodeAddress(node))))
		return
	}
	pods, err := h.runningPods("", fields.OneTermEqualSelector("spec.nodeName", name), nil)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	snap := newMetricsSnapshot(h.now())
	body, err := kubeletResourceMetrics(snap, snap.node(node, pods), h.c.KubernetesVersion())
	if err != nil {
		h.writeError(w, r, apierrors.NewInternalError(err))
		return
	}
	w.Header().Set("Content-Type", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		_, _ = w.Write(body)
	}
}

func nodeAddress(n *corev1.Node) string {
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	return n.Name
}

// kubeletResourceMetrics renders the kubelet's /metrics/resource in the Prometheus text format:
// its metric names, stability-annotated help texts, labels and sample timestamps. Families come
// sorted by name, samples by labels, as the kubelet's registry gathers them.
func kubeletResourceMetrics(snap metricsSnapshot, u nodeUsage, version string) ([]byte, error) {
	ts := ptr.To(snap.time().UnixMilli())
	seconds := func(ns int64) float64 { return float64(ns) / 1e9 }
	family := func(name, help string, typ dto.MetricType) *dto.MetricFamily {
		return &dto.MetricFamily{Name: ptr.To(name), Help: ptr.To(help), Type: typ.Enum()}
	}
	sample := func(f *dto.MetricFamily, v float64, ts *int64, lbls ...string) {
		m := &dto.Metric{TimestampMs: ts}
		for i := 0; i+1 < len(lbls); i += 2 {
			m.Label = append(m.Label, &dto.LabelPair{Name: ptr.To(lbls[i]), Value: ptr.To(lbls[i+1])})
		}
		if f.GetType() == dto.MetricType_COUNTER {
			m.Counter = &dto.Counter{Value: ptr.To(v)}
		} else {
			m.Gauge = &dto.Gauge{Value: ptr.To(v)}
		}
		f.Metric = append(f.Metric, m)
	}

	ctrCPU := family("container_cpu_usage_seconds_total", "[STABLE] Cumulative cpu time consumed by the container in core-seconds", dto.MetricType_COUNTER)
	ctrMem := family("container_memory_working_set_bytes", "[STABLE] Current working set of the container in bytes", dto.MetricType_GAUGE)
	ctrStart := family("container_start_time_seconds", "[STABLE] Start time of the container since unix epoch in seconds", dto.MetricType_GAUGE)
	nodeCPU := family("node_cpu_usage_seconds_total", "[STABLE] Cumulative cpu time consumed by the node in core-seconds", dto.MetricType_COUNTER)
	nodeMem := family("node_memory_working_set_bytes", "[STABLE] Current working set of the node in bytes", dto.MetricType_GAUGE)
	podCPU := family("pod_cpu_usage_seconds_total", "[STABLE] Cumulative cpu time consumed by the pod in core-seconds", dto.MetricType_COUNTER)
	podMem := family("pod_memory_working_set_bytes", "[STABLE] Current working set of the pod in bytes", dto.MetricType_GAUGE)

	sample(nodeCPU, seconds(u.total.cpuCounter), ts)
	sample(nodeMem, float64(u.total.memory), ts)
	for i, p := range u.pods {
		pu := u.usage[i]
		sample(podCPU, seconds(pu.total.cpuCounter), ts, "namespace", p.Namespace, "pod", p.Name)
		sample(podMem, float64(pu.total.memory), ts, "namespace", p.Namespace, "pod", p.Name)
		for _, c := range pu.containers {
			sample(ctrCPU, seconds(c.cpuCounter), ts, "container", c.name, "namespace", p.Namespace, "pod", p.Name)
			sample(ctrMem, float64(c.memory), ts, "container", c.name, "namespace", p.Namespace, "pod", p.Name)
			start := c.start.UnixMilli()
			sample(ctrStart, float64(c.start.UnixNano())/1e9, &start, "container", c.name, "namespace", p.Namespace, "pod", p.Name)
		}
	}
	families := []*dto.MetricFamily{ctrCPU, ctrMem, ctrStart, nodeCPU, nodeMem, podCPU, podMem}
	// The kubelet's scrape result: scrape_error (ALPHA) until 1.28, resource_scrape_error (STABLE)
	// from 1.29, when scrape_error was deprecated and, being ALPHA, hidden at once.
	scrapeErr := family("resource_scrape_error", "[STABLE] 1 if there was an error while getting container metrics, 0 otherwise", dto.MetricType_GAUGE)
	if v, err := utilversion.ParseGeneric(version); err == nil && !v.AtLeast(utilversion.MajorMinor(1, 29)) {
		scrapeErr = family("scrape_error", "[ALPHA] 1 if there was an error while getting container metrics, 0 otherwise", dto.MetricType_GAUGE)
	}
	sample(scrapeErr, 0, nil)
	families = append(families, scrapeErr)

	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, f := range families {
		sort.SliceStable(f.Metric, func(i, j int) bool { return labelKey(f.Metric[i]) < labelKey(f.Metric[j]) })
		if len(f.Metric) == 0 {
			continue // a family without samples is not written, as the kubelet's registry does
		}
		if err := enc.Encode(f); err != nil {
			return nil, err
		}
	}
	return buf.Bytes(), nil
}

func labelKey(m *dto.Metric) string {
	var b strings.Builder
	for _, l := range m.Label {
		b.WriteString(l.GetValue())
		b.WriteByte(0)
	}
	return b.String()
}
