package bench

import (
	"context"
	"sort"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/goofy-capi/cluster-api-provider-goofy/test/e2e/harness"
)

// machineTimes are the moments the observer first saw a Machine reach each phase.
type machineTimes struct {
	controlPlane     bool
	created          time.Time
	infraProvisioned time.Time
	nodeReady        time.Time
}

// observer records, from watch events on the management cluster, when each Cluster first became
// Available and when each Machine was created, got its infrastructure provisioned and its Node
// Ready. Watch events arrive within milliseconds, unlike the second-granular timestamps in the
// objects themselves.
type observer struct {
	mu        sync.Mutex
	available map[string]time.Time // cluster name -> first seen Available=True
	machines  map[string]*machineTimes
	changed   chan struct{}
}

func newObserver() *observer {
	return &observer{available: map[string]time.Time{}, machines: map[string]*machineTimes{}, changed: make(chan struct{}, 1)}
}

// start runs informers for Clusters and Machines in namespace until ctx ends.
func (o *observer) start(ctx context.Context, cfg *rest.Config, namespace string) error {
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = "goofy-bench"
	c, err := cache.New(cfg, cache.Options{Scheme: harness.Scheme, DefaultNamespaces: map[string]cache.Config{namespace: {}}})
	if err != nil {
		return err
	}
	ci, err := c.GetInformer(ctx, &clusterv1.Cluster{})
	if err != nil {
		return err
	}
	if _, err := ci.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { o.cluster(obj) },
		UpdateFunc: func(_, obj any) { o.cluster(obj) },
	}); err != nil {
		return err
	}
	mi, err := c.GetInformer(ctx, &clusterv1.Machine{})
	if err != nil {
		return err
	}
	if _, err := mi.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { o.machine(obj) },
		UpdateFunc: func(_, obj any) { o.machine(obj) },
	}); err != nil {
		return err
	}
	go func() { _ = c.Start(ctx) }()
	c.WaitForCacheSync(ctx)
	return nil
}

func (o *observer) notify() {
	select {
	case o.changed <- struct{}{}:
	default:
	}
}

func (o *observer) cluster(obj any) {
	c, ok := obj.(*clusterv1.Cluster)
	if !ok || !meta.IsStatusConditionTrue(c.Status.Conditions, clusterv1.ClusterAvailableCondition) {
		return
	}
	now := time.Now()
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, seen := o.available[c.Name]; !seen {
		o.available[c.Name] = now
		o.notify()
	}
}

func (o *observer) machine(obj any) {
	m, ok := obj.(*clusterv1.Machine)
	if !ok {
		return
	}
	now := time.Now()
	o.mu.Lock()
	defer o.mu.Unlock()
	t := o.machines[m.Name]
	if t == nil {
		_, cp := m.Labels[clusterv1.MachineControlPlaneLabel]
		t = &machineTimes{created: now, controlPlane: cp}
		o.machines[m.Name] = t
	}
	if t.infraProvisioned.IsZero() && m.Status.Initialization.InfrastructureProvisioned != nil && *m.Status.Initialization.InfrastructureProvisioned {
		t.infraProvisioned = now
	}
	if t.nodeReady.IsZero() && meta.IsStatusConditionTrue(m.Status.Conditions, clusterv1.MachineNodeReadyCondition) {
		t.nodeReady = now
	}
}

// counts returns how many clusters are Available and how many machines reached each phase.
func (o *observer) counts() (available, machines, provisioned, nodeReady int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, t := range o.machines {
		machines++
		if !t.infraProvisioned.IsZero() {
			provisioned++
		}
		if !t.nodeReady.IsZero() {
			nodeReady++
		}
	}
	return len(o.available), machines, provisioned, nodeReady
}

// allNodesReady returns when the last Machine's Node became Ready, once want Machines have.
func (o *observer) allNodesReady(want int) (time.Time, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var last time.Time
	ready := 0
	for _, t := range o.machines {
		if t.nodeReady.IsZero() {
			continue
		}
		ready++
		if t.nodeReady.After(last) {
			last = t.nodeReady
		}
	}
	return last, want > 0 && ready >= want
}

// availableTimes returns a copy of the Available times by cluster.
func (o *observer) availableTimes() map[string]time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make(map[string]time.Time, len(o.available))
	for k, v := range o.available {
		out[k] = v
	}
	return out
}

// phaseLatencies returns, for control-plane and worker machines, the durations of
// created→infrastructure provisioned, provisioned→Node Ready and created→Node Ready.
func (o *observer) phaseLatencies() map[string]Percentiles {
	o.mu.Lock()
	defer o.mu.Unlock()
	d := map[string][]time.Duration{}
	for _, t := range o.machines {
		role := "worker"
		if t.controlPlane {
			role = "controlPlane"
		}
		if !t.infraProvisioned.IsZero() {
			d[role+": created→infraProvisioned"] = append(d[role+": created→infraProvisioned"], t.infraProvisioned.Sub(t.created))
		}
		if !t.nodeReady.IsZero() && !t.infraProvisioned.IsZero() {
			d[role+": infraProvisioned→nodeReady"] = append(d[role+": infraProvisioned→nodeReady"], t.nodeReady.Sub(t.infraProvisioned))
		}
		if !t.nodeReady.IsZero() {
			d[role+": created→nodeReady"] = append(d[role+": created→nodeReady"], t.nodeReady.Sub(t.created))
		}
	}
	out := map[string]Percentiles{}
	for k, v := range d {
		out[k] = percentiles(v)
	}
	return out
}

// Percentiles summarise durations in seconds.
type Percentiles struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50Seconds"`
	P90   float64 `json:"p90Seconds"`
	Max   float64 `json:"maxSeconds"`
}

// percentiles uses the nearest-rank method.
func percentiles(d []time.Duration) Percentiles {
	if len(d) == 0 {
		return Percentiles{}
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	rank := func(p float64) time.Duration {
		i := int(p*float64(len(s))+0.999999) - 1
		return s[min(max(i, 0), len(s)-1)]
	}
	return Percentiles{Count: len(s), P50: rank(0.5).Seconds(), P90: rank(0.9).Seconds(), Max: s[len(s)-1].Seconds()}
}
