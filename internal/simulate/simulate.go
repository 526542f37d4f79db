package simulate

import (
	"context"
	"runtime"
	"sync"
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
	// is created, scheduled or started (SetWorkloads changes it per cluster).
	Workloads bool
	// PodStartDelay is how long a kubelet takes from a pod's binding to its containers running.
	PodStartDelay time.Duration
	// JobRunTime is how long a Job's pod runs before its containers exit 0.
	JobRunTime time.Duration
}

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

	mu       sync.Mutex
	clusters map[string]*cluster
	// workloadsOff are the clusters whose workloads SetWorkloads turned off.
	workloadsOff map[string]bool
}

// New returns a Simulator.
func New(opts Options) *Simulator {
	if opts.PodStartDelay <= 0 {
		opts.PodStartDelay = DefaultPodStartDelay
	}
	if opts.JobRunTime <= 0 {
		opts.JobRunTime = DefaultJobRunTime
	}
	return &Simulator{
		opts:         opts,
		busy:         make(chan struct{}, 2*runtime.GOMAXPROCS(0)),
		clusters:     map[string]*cluster{},
		workloadsOff: map[string]bool{},
	}
}

// Start starts the components of c; the function it returns stops them.
func (s *Simulator) Start(c *store.Cluster) (stop func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cl := &cluster{sim: s, store: c}
	s.clusters[c.Name()] = cl
	cl.start(s.opts.Workloads && !s.workloadsOff[c.Name()])
	return func() {
		s.mu.Lock()
		if s.clusters[c.Name()] == cl {
			delete(s.clusters, c.Name())
		}
		s.mu.Unlock()
		cl.stop()
	}
}

// SetWorkloads turns a cluster's workload simulation on or off (when the simulator's Options
// enable workloads at all). It holds for the cluster's name from then on, also for a cluster
// started later.
func (s *Simulator) SetWorkloads(name string, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if on {
		delete(s.workloadsOff, name)
	} else {
		s.workloadsOff[name] = true
	}
	cl := s.clusters[name]
	if cl == nil || cl.workloads == (on && s.opts.Workloads) {
		return
	}
	cl.stop()
	next := &cluster{sim: s, store: cl.store}
	s.clusters[name] = next
	next.start(on && s.opts.Workloads)
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

// cluster is the running components of one workload cluster.
type cluster struct {
	sim       *Simulator
	store     *store.Cluster
	client    client.Client
	cache     *cache
	workloads bool

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

func (c *cluster) start(workloads bool) {
	c.workloads = workloads
	c.client = c.store.Client(store.WithoutManagedFields(), store.WithoutSyncWait())
	c.cache = newCache()
	c.queued = map[item]bool{}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.store.SetInstantRollouts(!workloads)
	if workloads {
		c.controllers = []controller{
			newNodeIPAM(c, 0),
			newScheduler(c, 1),
			newKubelet(c, 2),
			newReplicaSetController(c, 3),
			newDeploymentController(c, 4),
			newDaemonSetController(c, 5),
			newDisruptionController(c, 6),
			newNodeLifecycle(c, 7),
			newJobController(c, 8),
			newEndpointsController(c, 9),
			newStatefulSetController(c, 10),
			newReplicationControllerController(c, 11),
			newCronJobController(c, 12),
		}
	}
	if len(c.controllers) == 0 {
		return
	}
	seen := map[schema.GroupResource]bool{}
	var resources []schema.GroupResource
	for _, ctrl := range c.controllers {
		for _, gr := range ctrl.resources() {
			if !seen[gr] {
				seen[gr] = true
				resources = append(resources, gr)
			}
		}
	}
	c.stopInform = c.store.Inform(resources, c.observe)
}

// observe keeps the cache and hands the change to the controllers that watch its kind. The store
// calls it under its lock.
func (c *cluster) observe(ch store.Change) {
	c.cache.apply(ch)
	for _, ctrl := range c.controllers {
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
		if len(c.queue) == 0 {
			c.queue = nil // let the backing array go
		}
		delete(c.queued, it)
		c.mu.Unlock()
		if err := c.controllers[it.ctrl].sync(c.ctx, it.key); err != nil && !apierrors.IsNotFound(err) {
			c.after(retryDelay, it.ctrl, it.key)
		}
	}
}
