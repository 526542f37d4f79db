package simulate

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// Options configure the simulated components of every cluster.
type Options struct {
	// Workloads runs the workload controllers (Deployments, ReplicaSets, DaemonSets,
	// PodDisruptionBudgets), the scheduler and the kubelets' pod lifecycle. Off, a cluster is
	// today's lighter one: Deployments and DaemonSets report their rollouts at once and no pod
	// is created, scheduled or started. Configure overrides it per cluster.
	Workloads bool
	// PodStartDelay is how long a kubelet takes from a pod's binding to its containers running.
	PodStartDelay time.Duration
	// JobRunTime is how long a Job's pod runs before its containers exit 0.
	JobRunTime time.Duration
	// ScheduledEvents makes the scheduler record a Scheduled event (events.k8s.io/v1) for each
	// pod it binds, as kube-scheduler does. Off by default: an event costs memory until it
	// expires (EventTTL), which for a fleet of running pods is more than the pods themselves.
	ScheduledEvents bool
	// EventTTL is how long a cluster keeps an Event (kube-apiserver's --event-ttl, 1 h); the
	// event TTL controller (eventttl.go) deletes older ones.
	EventTTL time.Duration
	// PodStopDelay is how long a kubelet takes to stop a gracefully deleted pod's containers
	// (never longer than the pod's grace period), in every cluster, workloads on or off.
	PodStopDelay time.Duration
}

// DefaultPodStopDelay: containers that exit promptly on SIGTERM, as most do.
const DefaultPodStopDelay = time.Second

// DefaultJobRunTime: a short batch task.
const DefaultJobRunTime = 5 * time.Second

// DefaultPodStartDelay: an image already pulled, containers that start at once.
const DefaultPodStartDelay = time.Second

// retryDelay is how long a component waits before it reconciles a key whose write failed
// (a conflict with a concurrent writer, a full store).
const retryDelay = 250 * time.Millisecond

// Simulator starts the components of every cluster of a store.Manager (store.WithSimulator).
type Simulator struct {
	opts Options
	// busy bounds how many clusters reconcile at once, process-wide.
	busy chan struct{}
	// podGCQuarantine: see podGCQuarantine (tests shorten it).
	podGCQuarantine time.Duration
	// podFailureBackoff: see DefaultPodFailureBackoff (tests shorten it).
	podFailureBackoff atomic.Int64
	// forceDetachTimeout: see maxWaitForUnmount (tests shorten it).
	forceDetachTimeout atomic.Int64

	mu       sync.Mutex
	clusters map[string]*cluster
	// perCluster are the clusters' own settings (Configure), by cluster name.
	perCluster map[string]ClusterOptions
}

// ClusterOptions override the simulator's Options for one cluster (a GoofyCluster's
// spec.simulation.workloads); a zero field keeps the simulator's value.
type ClusterOptions struct {
	// Workloads overrides Options.Workloads: WorkloadsOn or WorkloadsOff.
	Workloads WorkloadsSwitch
	// PodStartDelay overrides Options.PodStartDelay.
	PodStartDelay time.Duration
	// JobRunTime overrides Options.JobRunTime.
	JobRunTime time.Duration
}

// New returns a Simulator.
func New(opts Options) *Simulator {
	if opts.PodStartDelay <= 0 {
		opts.PodStartDelay = DefaultPodStartDelay
	}
	if opts.JobRunTime <= 0 {
		opts.JobRunTime = DefaultJobRunTime
	}
	if opts.PodStopDelay <= 0 {
		opts.PodStopDelay = DefaultPodStopDelay
	}
	if opts.EventTTL <= 0 {
		opts.EventTTL = DefaultEventTTL
	}
	return &Simulator{
		opts: opts,
		busy: make(chan struct{}, 2*runtime.GOMAXPROCS(0)),

		podGCQuarantine: podGCQuarantine,
		clusters:        map[string]*cluster{},
		perCluster:      map[string]ClusterOptions{},
	}
}

// WorkloadsSwitch turns a cluster's workload simulation on or off against the simulator's default.
type WorkloadsSwitch int

const (
	// WorkloadsDefault keeps Options.Workloads.
	WorkloadsDefault WorkloadsSwitch = iota
	// WorkloadsOn runs the cluster's workloads even when Options.Workloads is off.
	WorkloadsOn
	// WorkloadsOff is today's lighter cluster even when Options.Workloads is on.
	WorkloadsOff
)

// backoffBase is the first delay of the Job controller's pod failure back-off and of the
// kubelets' crash-loop back-off.
func (s *Simulator) backoffBase() time.Duration {
	if d := time.Duration(s.podFailureBackoff.Load()); d > 0 {
		return d
	}
	return DefaultPodFailureBackoff
}

// maxWaitForUnmount is how long the attach/detach controller waits for a volume that no pod
// needs any more to be unmounted by a node that is not Ready before it detaches it anyway
// (kube-controller-manager's reconcilerMaxWaitForUnmountDuration).
const maxWaitForUnmount = 6 * time.Minute

func (s *Simulator) maxWaitForUnmount() time.Duration {
	if d := time.Duration(s.forceDetachTimeout.Load()); d > 0 {
		return d
	}
	return maxWaitForUnmount
}

// optionsFor merges a cluster's own settings over the simulator's.
func (s *Simulator) optionsFor(name string) Options {
	opts := s.opts
	own := s.perCluster[name]
	switch own.Workloads {
	case WorkloadsOn:
		opts.Workloads = true
	case WorkloadsOff:
		opts.Workloads = false
	}
	if own.PodStartDelay > 0 {
		opts.PodStartDelay = own.PodStartDelay
	}
	if own.JobRunTime > 0 {
		opts.JobRunTime = own.JobRunTime
	}
	return opts
}

// Start starts the components of c; the function it returns stops them.
func (s *Simulator) Start(c *store.Cluster) (stop func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cl := &cluster{sim: s, store: c}
	s.clusters[c.Name()] = cl
	cl.start(s.optionsFor(c.Name()))
	return func() {
		// Configure may have replaced cl by a cluster with other controllers: stop what runs now.
		s.mu.Lock()
		cur := s.clusters[c.Name()]
		if cur == nil || cur.store != c {
			s.mu.Unlock()
			return
		}
		delete(s.clusters, c.Name())
		delete(s.perCluster, c.Name()) // a cluster made again under the name is configured again
		s.mu.Unlock()
		cur.stop()
	}
}

// Configure sets a cluster's own settings, from then on, also for a cluster started later
// (after a restart the GoofyCluster's reconcile configures its cluster again). A change of the
// timings applies to the timers armed after it; turning workloads off stops the workload
// controllers and leaves their objects as they are (Deployments and DaemonSets then report
// their rollouts at once, as a cluster that never ran pods); turning them on starts them, and
// they take over the objects as after a restart.
func (s *Simulator) Configure(name string, own ClusterOptions) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if own == (ClusterOptions{}) {
		delete(s.perCluster, name)
	} else {
		s.perCluster[name] = own
	}
	cl := s.clusters[name]
	if cl == nil {
		return
	}
	opts := s.optionsFor(name)
	if cl.opts.Workloads == opts.Workloads {
		cl.setTimings(opts)
		return
	}
	cl.stop()
	next := &cluster{sim: s, store: cl.store}
	s.clusters[name] = next
	next.start(opts)
}

// controller is one simulated component of a cluster.
type controller interface {
	// resources are the kinds whose changes it observes.
	resources() []schema.GroupResource
	// observe reacts to one committed change, after the shared cache has it. It runs under the
	// store's lock: it only reads the cache and queues keys (cluster.enqueue, cluster.after).
	observe(ch store.Change)
	// sync reconciles one queued key; an error retries it after retryDelay.
	sync(ctx context.Context, key string) error
}

// uncached is a controller that reads the cluster through its client, never through the shared
// cache: the kinds only such controllers watch are not cached (a workloads-off cluster caches
// nothing).
type uncached interface{ uncached() }

// stopper is a controller with something of its own to end when the cluster's components stop.
type stopper interface{ stop() }

// everyKind is a controller that observes every kind of the cluster (store.Cluster.InformAll),
// those CRDs define later too; its resources() are nil.
type everyKind interface{ allResources() }

// cluster is the running components of one workload cluster.
type cluster struct {
	sim    *Simulator
	store  *store.Cluster
	client client.Client
	cache  *cache // nil when no controller reads it
	// cached are the kinds the cache keeps: those watched by a controller that reads the cache.
	cached map[schema.GroupResource]bool

	// optsMu guards opts' timings, which Configure changes while the controllers run.
	optsMu sync.RWMutex
	opts   Options

	controllers []controller
	stopInform  func()
	ctx         context.Context
	cancel      context.CancelFunc

	mu      sync.Mutex
	queue   []item
	queued  map[item]bool
	running bool // a goroutine drains the queue
	stopped bool
}

// item is one key queued for one controller.
type item struct {
	ctrl int
	key  string
}

func (c *cluster) start(opts Options) {
	c.opts = opts
	c.client = c.store.Client(store.WithoutManagedFields(), store.WithoutSyncWait())
	c.ctx, c.cancel = context.WithCancel(context.Background())
	// What runs in every cluster, workloads or not (each controller's index is its place in
	// c.controllers); then the workload controllers, or, without them, the instant rollouts.
	add := func(newController func(c *cluster, idx int) controller) {
		c.controllers = append(c.controllers, newController(c, len(c.controllers)))
	}
	add(func(c *cluster, i int) controller { return newClusterRoleAggregation(c, i) })
	add(func(c *cluster, i int) controller { return newGarbageCollector(c, i) })
	add(func(c *cluster, i int) controller { return newNamespaceController(c, i) })
	add(func(c *cluster, i int) controller { return newNodeLeases(c, i) })
	add(func(c *cluster, i int) controller { return newPodGC(c, i) })
	add(func(c *cluster, i int) controller { return newPodTermination(c, i) })
	add(func(c *cluster, i int) controller { return newEventTTL(c, i) })
	if !opts.Workloads {
		add(func(c *cluster, i int) controller { return newInstantRollouts(c, i) })
	} else {
		add(func(c *cluster, i int) controller { return newNodeIPAM(c, i) })
		add(func(c *cluster, i int) controller { return newScheduler(c, i) })
		add(func(c *cluster, i int) controller { return newKubelet(c, i) })
		add(func(c *cluster, i int) controller { return newReplicaSetController(c, i) })
		add(func(c *cluster, i int) controller { return newDeploymentController(c, i) })
		add(func(c *cluster, i int) controller { return newDaemonSetController(c, i) })
		add(func(c *cluster, i int) controller { return newDisruptionController(c, i) })
		add(func(c *cluster, i int) controller { return newNodeLifecycle(c, i) })
		add(func(c *cluster, i int) controller { return newJobController(c, i) })
		add(func(c *cluster, i int) controller { return newEndpointsController(c, i) })
		add(func(c *cluster, i int) controller { return newStatefulSetController(c, i) })
		add(func(c *cluster, i int) controller { return newPersistentVolumeController(c, i) })
		add(func(c *cluster, i int) controller { return newEphemeralVolumeController(c, i) })
		add(func(c *cluster, i int) controller { return newAttachDetachController(c, i) })
		add(func(c *cluster, i int) controller { return newKubeletVolumes(c, i) })
		add(func(c *cluster, i int) controller { return newVolumeExpansion(c, i) })
		add(func(c *cluster, i int) controller { return newReplicationControllerController(c, i) })
		add(func(c *cluster, i int) controller { return newCronJobController(c, i) })
	}
	seen := map[schema.GroupResource]bool{}
	var resources []schema.GroupResource
	all := false
	for _, ctrl := range c.controllers {
		if _, ok := ctrl.(everyKind); ok {
			all = true
		}
		_, own := ctrl.(uncached)
		for _, gr := range ctrl.resources() {
			if !own {
				if c.cached == nil {
					c.cached = map[schema.GroupResource]bool{}
				}
				c.cached[gr] = true
			}
			if !seen[gr] {
				seen[gr] = true
				resources = append(resources, gr)
			}
		}
	}
	if c.cached != nil {
		c.cache = newCache()
	}
	if all {
		c.stopInform = c.store.InformAll(resources, c.observe)
	} else {
		c.stopInform = c.store.Inform(resources, c.observe)
	}
}

// setTimings changes the pod start delay and job run time of a running cluster.
func (c *cluster) setTimings(opts Options) {
	c.optsMu.Lock()
	c.opts.PodStartDelay, c.opts.JobRunTime = opts.PodStartDelay, opts.JobRunTime
	c.optsMu.Unlock()
}

// podStartDelay is how long this cluster's kubelets take to start a bound pod.
func (c *cluster) podStartDelay() time.Duration {
	c.optsMu.RLock()
	defer c.optsMu.RUnlock()
	return c.opts.PodStartDelay
}

// jobRunTime is how long this cluster's Job pods run.
func (c *cluster) jobRunTime() time.Duration {
	c.optsMu.RLock()
	defer c.optsMu.RUnlock()
	return c.opts.JobRunTime
}

// observe keeps the cache and hands the change to the controllers that watch its kind. The store
// calls it under its lock.
func (c *cluster) observe(ch store.Change) {
	if ch.Relocated {
		if c.cached[ch.Resource] {
			c.cache.relocated(ch)
		}
		return // the same version: nothing for a controller to do
	}
	if c.cached[ch.Resource] {
		c.cache.apply(ch)
	}
	for _, ctrl := range c.controllers {
		if _, ok := ctrl.(everyKind); ok {
			ctrl.observe(ch)
			continue
		}
		for _, gr := range ctrl.resources() {
			if gr == ch.Resource {
				ctrl.observe(ch)
				break
			}
		}
	}
}

func (c *cluster) stop() {
	if c.stopInform != nil {
		c.stopInform()
	}
	c.mu.Lock()
	c.stopped = true
	c.queue, c.queued = nil, nil
	c.mu.Unlock()
	if c.cancel != nil {
		c.cancel()
	}
	for _, ctrl := range c.controllers {
		if s, ok := ctrl.(stopper); ok {
			s.stop()
		}
	}
}

// enqueue queues key for the controller at index ctrl, once however often it is queued before
// it is reconciled.
func (c *cluster) enqueue(ctrl int, key string) {
	c.mu.Lock()
	it := item{ctrl, key}
	if c.stopped || c.queued[it] {
		c.mu.Unlock()
		return
	}
	if c.queued == nil {
		c.queued = map[item]bool{}
	}
	c.queued[it] = true
	c.queue = append(c.queue, it)
	start := !c.running
	c.running = true
	c.mu.Unlock()
	if start {
		go c.drain()
	}
}

// after queues key for the controller once d has passed: a timer, no goroutine.
func (c *cluster) after(d time.Duration, ctrl int, key string) {
	if d <= 0 {
		c.enqueue(ctrl, key)
		return
	}
	time.AfterFunc(d, func() { c.enqueue(ctrl, key) })
}

// drain reconciles queued keys until the queue is empty, holding one of the process's places.
func (c *cluster) drain() {
	c.sim.busy <- struct{}{}
	defer func() { <-c.sim.busy }()
	for {
		c.mu.Lock()
		if c.stopped || len(c.queue) == 0 {
			c.running = false
			c.mu.Unlock()
			return
		}
		it := c.queue[0]
		c.queue[0] = item{}
		c.queue = c.queue[1:]
		delete(c.queued, it)
		if len(c.queue) == 0 {
			// Let the backing array go, and the set's too: a map keeps the room its busiest
			// moment took (the start of a cluster's hundreds of pods) until it is dropped.
			c.queue, c.queued = nil, nil
		}
		c.mu.Unlock()
		if err := c.controllers[it.ctrl].sync(c.ctx, it.key); err != nil && !apierrors.IsNotFound(err) {
			c.after(retryDelay, it.ctrl, it.key)
		}
	}
}
