package controllers

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/events"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/cluster-api/util/annotations"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/predicates"
	"sigs.k8s.io/cluster-api/util/secret"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	infrav1 "github.com/goofy-capi/cluster-api-provider-goofy/api/v1alpha1"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/mux"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/simulate"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// GoofyClusterReconciler gives every GoofyCluster a workload cluster endpoint served by the mux.
type GoofyClusterReconciler struct {
	Client client.Client
	// APIReader reads what the cache does not hold in full (the kubeconfig Secret, see
	// SecretCache); nil means Client.
	APIReader client.Reader
	Mux       *mux.WorkloadClustersMux
	// WatchFilterValue, when set, restricts reconciliation to objects with the watch-filter label.
	WatchFilterValue string
	// Restarter, when set, holds reconciles until the listeners are restored on their ports.
	Restarter *HotRestarter
	// Azure serves Azure-backed GoofyClusters; nil disables that backend.
	Azure *AzureClouds
	// Simulator runs the workloads of the clusters (spec.simulation.workloads); nil when the
	// manager runs none.
	Simulator *simulate.Simulator

	recorder events.EventRecorder
	// chooseBackend, when set, replaces the choice of the backend (tests).
	chooseBackend func(*infrav1.GoofyCluster) ClusterBackend

	// portRetries counts, per GoofyCluster UID, the reconciles in a row that could not bind the
	// cluster's port (mux.ErrPortUnavailable): the backoff of the next try.
	portRetriesMu sync.Mutex
	portRetries   map[types.UID]int
}

// SetupWithManager registers the reconciler: GoofyClusters, and their Cluster's creation and
// pause changes; resyncs pass both watches.
func (r *GoofyClusterReconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, options controller.Options) error {
	log := predicateLogger(ctrl.LoggerFrom(ctx))
	r.recorder = mgr.GetEventRecorder("goofycluster-controller")
	b := ctrl.NewControllerManagedBy(mgr).
		For(&infrav1.GoofyCluster{}, builder.WithPredicates(specOrMetadataChanged())).
		WithOptions(options).
		// Paused objects' events pass: the reconcile that follows records Paused=True (CAPI's
		// v1beta2 contract), as CAPD's reconcilers do with ResourceHasFilterLabel.
		WithEventFilter(predicates.ResourceHasFilterLabel(mgr.GetScheme(), log, r.WatchFilterValue)).
		Watches(&clusterv1.Cluster{},
			handler.EnqueueRequestsFromMapFunc(util.ClusterToInfrastructureMapFunc(ctx, infrav1.GroupVersion.WithKind("GoofyCluster"), mgr.GetClient(), &infrav1.GoofyCluster{})),
			builder.WithPredicates(clusterToGoofyClusterEvents(mgr.GetScheme(), log)),
		)
	// What the backends watch (an identity's change ends the wait of the GoofyClusters naming it).
	return r.backendWatches(b).Complete(r)
}

// Reconcile follows CAPI's reconciler shape: owner Cluster, pause, finalizer, one deferred patch
// (objectPatcher: status, then metadata and spec).
func (r *GoofyClusterReconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, reterr error) {
	log := ctrl.LoggerFrom(ctx)
	if err := r.Restarter.Wait(ctx); err != nil {
		return ctrl.Result{}, err
	}

	gc := &infrav1.GoofyCluster{}
	if err := r.Client.Get(ctx, req.NamespacedName, gc); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if annotations.IsExternallyManaged(gc) {
		log.V(4).Info("GoofyCluster is externally managed, skipping")
		return ctrl.Result{}, nil
	}
	backend := r.clusterBackend(gc)
	cluster, err := util.GetOwnerCluster(ctx, r.Client, gc.ObjectMeta)
	if err != nil {
		if apierrors.IsNotFound(err) && !gc.DeletionTimestamp.IsZero() {
			// The Cluster is gone already: without this the GoofyCluster would fail on the
			// missing owner forever, never freeing its port nor being deleted.
			return ctrl.Result{}, r.releaseOrphan(ctx, gc, backend)
		}
		return ctrl.Result{}, err
	}
	if cluster == nil {
		log.Info("Waiting for the Cluster controller to set the owner reference")
		return ctrl.Result{}, nil
	}
	// No log.WithValues per reconcile: cloning the logger was 2% of the manager's CPU at scale;
	// the few log lines below name the Cluster themselves.

	// One deferred patch writes the reconcile's changes (see objectPatcher); a stale read comes back
	// as a conflict and the cluster is simply reconciled again.
	patcher := newObjectPatcher(r.Client, gc)
	defer patcher.finish(ctx, gc, &res, &reterr)
	if setPausedCondition(cluster, gc, "GoofyCluster") {
		log.V(4).Info("Reconciliation is paused")
		return ctrl.Result{}, nil
	}

	// Only the GoofyCluster the Cluster names is its infrastructure: a copy (same owner, same
	// cluster-name label, so the same workload cluster key) must neither serve nor free it.
	if !isClusterInfrastructure(cluster, gc) {
		if !gc.DeletionTimestamp.IsZero() {
			return ctrl.Result{}, r.releaseIfHeld(ctx, &clusterScope{cluster: cluster, gc: gc, key: mux.ClusterKey(gc.Namespace, cluster.Name)}, backend)
		}
		gc.Status.Initialization.Provisioned = nil
		msg := fmt.Sprintf("Cluster %s names GoofyCluster %q in spec.infrastructureRef, not this one: it serves and frees nothing",
			klogRef(cluster), cluster.Spec.InfrastructureRef.Name)
		setNotReady(gc, infrav1.LoadBalancerReadyCondition, infrav1.NotClusterInfrastructureReason, msg)
		setNotReady(gc, infrav1.ReadyCondition, infrav1.NotClusterInfrastructureReason, msg)
		return ctrl.Result{}, nil
	}
	s := &clusterScope{cluster: cluster, gc: gc, key: mux.ClusterKey(gc.Namespace, cluster.Name)}
	if !gc.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.reconcileDelete(ctx, s, backend)
	}
	return r.reconcileNormal(ctx, s, backend, patcher)
}

// isClusterInfrastructure reports whether the Cluster's spec.infrastructureRef names gc.
func isClusterInfrastructure(cluster *clusterv1.Cluster, gc *infrav1.GoofyCluster) bool {
	ref := cluster.Spec.InfrastructureRef
	return cluster.Namespace == gc.Namespace && ref.Name == gc.Name && ref.Kind == "GoofyCluster" &&
		ref.APIGroup == infrav1.GroupVersion.Group
}

// heldRetry is how soon a GoofyCluster looks again at a workload cluster another GoofyCluster
// still holds (that one's deletion does not wake this one).
const heldRetry = 10 * time.Second

// claimListener reserves the workload cluster's listener for gc, the Cluster's infrastructure.
// Another UID may hold it: a GoofyCluster the Cluster named before. While that object exists it
// keeps the workload cluster (its deletion releases it); once it is gone without releasing
// (its finalizer removed by hand), gc takes the workload cluster over.
func (r *GoofyClusterReconciler) claimListener(ctx context.Context, gc *infrav1.GoofyCluster, key string) (*mux.WorkloadClusterListener, error) {
	host, port := gc.Spec.ControlPlaneEndpoint.Host, int(gc.Spec.ControlPlaneEndpoint.Port)
	if err := r.contested(ctx, key, host, port); err != nil {
		return nil, err
	}
	l, err := r.Mux.ClaimWorkloadClusterEndpoint(key, host, port, gc.UID)
	if !errors.Is(err, mux.ErrHeldByAnother) {
		return l, err
	}
	holder, _ := r.Mux.OwnerOf(key)
	list := &infrav1.GoofyClusterList{}
	if err := r.Client.List(ctx, list, client.InNamespace(gc.Namespace)); err != nil {
		return nil, err
	}
	for i := range list.Items {
		if list.Items[i].UID == holder {
			return nil, errHeld{holder: &list.Items[i]}
		}
	}
	if r.Mux.TransferWorkloadClusterListener(key, holder, gc.UID) {
		ctrl.LoggerFrom(ctx).Info("Took over the workload cluster of a GoofyCluster that no longer exists", "cluster", key, "previousUID", holder)
	}
	return r.Mux.ClaimWorkloadClusterEndpoint(key, host, port, gc.UID)
}

// contested refuses a port the mux knows of no holder for, asked for by a workload cluster the mux
// knows nothing of (no listener, reservation or record: state in memory only after a restart, or
// a port the user chose), while the
// GoofyCluster of another workload cluster of this manager records it too: which of them held it
// cannot be told, so neither gets it (HotRestart refuses both alike), until one of them moves.
func (r *GoofyClusterReconciler) contested(ctx context.Context, key, host string, port int) error {
	if port == 0 {
		return nil
	}
	if _, ok := r.Mux.HeldPort(key); ok {
		return nil // the mux's own rules decide (ClaimWorkloadClusterListener)
	}
	if _, _, ok := r.Mux.EndpointHolder(host, port); ok {
		return nil
	}
	list := &infrav1.GoofyClusterList{}
	opts := []client.ListOption{client.UnsafeDisableDeepCopy}
	if r.WatchFilterValue != "" {
		// Another shard's clusters have endpoints of their own host.
		opts = append(opts, client.MatchingLabels{clusterv1.WatchLabel: r.WatchFilterValue})
	}
	if err := r.Client.List(ctx, list, opts...); err != nil {
		return err
	}
	if others := r.Mux.OtherClustersOnEndpoint(list.Items, key, host, port); len(others) > 0 {
		return fmt.Errorf("%w: port %d is recorded by the GoofyCluster of another workload cluster too, and no record says which held it",
			mux.ErrPortNotHeld, port)
	}
	return nil
}

// portNotHeldRetry is how soon a GoofyCluster refused its port looks again (the holder's deletion
// or move does not wake it; its own spec change does).
const portNotHeldRetry = 30 * time.Second

// The backoff of a port that cannot be bound: nothing wakes the reconciler when the other process
// lets the port go, so it looks again, soon at first, then every portRetryMax.
const (
	portRetryMin = time.Second
	portRetryMax = 30 * time.Second
)

// portUnavailable reports that the workload cluster's port cannot be bound (err wraps
// mux.ErrPortUnavailable, with the bind error) and returns when to try again. The endpoint cannot
// move: CAPI's Cluster.spec.controlPlaneEndpoint is immutable once set, so the cluster waits for
// its own port, with its state kept on disk, and serves again once the port is free.
func (r *GoofyClusterReconciler) portUnavailable(ctx context.Context, gc *infrav1.GoofyCluster, key string, err error) ctrl.Result {
	retry := r.portRetryDelay(gc.UID)
	ctrl.LoggerFrom(ctx).Info("The workload cluster's port cannot be bound; retrying", "cluster", key,
		"port", gc.Spec.ControlPlaneEndpoint.Port, "retryAfter", retry, "reason", err.Error())
	// The message is the same on every try: no status write per retry.
	msg := fmt.Sprintf("%s: the endpoint cannot move to another port; binding it is retried until it is free", err)
	setNotReady(gc, infrav1.LoadBalancerReadyCondition, infrav1.PortUnavailableReason, msg)
	setNotReady(gc, infrav1.ReadyCondition, infrav1.PortUnavailableReason, msg)
	return ctrl.Result{RequeueAfter: retry}
}

// portRetryDelay counts a failed try to bind the port of the GoofyCluster with UID uid and returns
// the wait before the next: portRetryMin, doubled per failed try before, at most portRetryMax.
func (r *GoofyClusterReconciler) portRetryDelay(uid types.UID) time.Duration {
	r.portRetriesMu.Lock()
	defer r.portRetriesMu.Unlock()
	if r.portRetries == nil {
		r.portRetries = map[types.UID]int{}
	}
	n := r.portRetries[uid]
	r.portRetries[uid] = n + 1
	d := portRetryMin
	for i := 0; i < n && d < portRetryMax; i++ {
		d *= 2
	}
	return min(d, portRetryMax)
}

// portBound ends the backoff of the GoofyCluster with UID uid: its port is bound (or it is deleted).
func (r *GoofyClusterReconciler) portBound(uid types.UID) {
	r.portRetriesMu.Lock()
	defer r.portRetriesMu.Unlock()
	delete(r.portRetries, uid)
}

// errHeld: another existing GoofyCluster holds the workload cluster.
type errHeld struct{ holder *infrav1.GoofyCluster }

func (e errHeld) Error() string {
	return fmt.Sprintf("the workload cluster is still held by GoofyCluster %s (uid %s), which the Cluster named before; it is released when that GoofyCluster is deleted",
		klogRef(e.holder), e.holder.UID)
}

// releaseIfHeld is the deletion of a GoofyCluster that is not (or no longer) its Cluster's
// infrastructure: it frees the workload cluster only if gc's UID holds it, and removes the finalizer.
func (r *GoofyClusterReconciler) releaseIfHeld(ctx context.Context, s *clusterScope, backend ClusterBackend) error {
	gc, key := s.gc, s.key
	// A port reserved for gc's claim (its Cluster deleted before the claim) goes too.
	r.Mux.CancelWorkloadClusterPort(key, gc.UID)
	r.portBound(gc.UID)
	if uid, held := r.Mux.OwnerOf(key); held && uid == gc.UID {
		if _, err := r.Mux.ReleaseWorkloadClusterListener(key, gc.UID); err != nil {
			return err
		}
		ctrl.LoggerFrom(ctx).Info("Released the workload cluster listener and store", "cluster", key)
		if err := backend.ReconcileDelete(ctx, s); err != nil {
			return err
		}
	}
	activeFaults.set(clusterFaultKey(gc), nil)
	controllerutil.RemoveFinalizer(gc, infrav1.ClusterFinalizer)
	return nil
}

func (r *GoofyClusterReconciler) reconcileNormal(ctx context.Context, s *clusterScope, backend ClusterBackend, patcher *objectPatcher) (ctrl.Result, error) {
	cluster, gc, key := s.cluster, s.gc, s.key
	// The listener creates a store (and its state on disk): deletion has to free them, so the
	// finalizer is stored before, with the endpoint.
	if err := r.persistFinalizerAndEndpoint(ctx, gc, key, patcher); err != nil {
		return ctrl.Result{}, err
	}

	// Keep a recorded endpoint's port: after a restart the listener comes back where clients expect it.
	l, err := r.claimListener(ctx, gc, key)
	if err != nil {
		if errors.Is(err, mux.ErrPortNotHeld) || errors.Is(err, mux.ErrPortUnavailable) {
			// A state that cannot be read is the more fundamental failure: on whatever port, the
			// cluster would not be served. It is the reason shown.
			if serr := r.Mux.CheckWorkloadClusterState(key, gc.UID); serr != nil {
				err = serr
			}
		}
		reason := infrav1.ListenerFailedReason
		var held errHeld
		switch {
		case errors.Is(err, store.ErrStateUnreadable):
			// Never a silently empty cluster: it stays down, saying why, until the state is repaired or removed.
			reason = infrav1.StateUnreadableReason
		case errors.As(err, &held):
			setNotReady(gc, infrav1.LoadBalancerReadyCondition, infrav1.WorkloadClusterHeldReason, err.Error())
			setNotReady(gc, infrav1.ReadyCondition, infrav1.WorkloadClusterHeldReason, err.Error())
			return ctrl.Result{RequeueAfter: heldRetry}, nil
		case errors.Is(err, mux.ErrPortNotHeld):
			// Not a failure to retry at once: the spec names a port that is not this cluster's.
			ctrl.LoggerFrom(ctx).Info("Refused a port the workload cluster does not hold", "cluster", key, "reason", err.Error())
			setNotReady(gc, infrav1.LoadBalancerReadyCondition, infrav1.PortNotHeldReason, err.Error())
			setNotReady(gc, infrav1.ReadyCondition, infrav1.PortNotHeldReason, err.Error())
			return ctrl.Result{RequeueAfter: portNotHeldRetry}, nil
		case errors.Is(err, mux.ErrPortUnavailable):
			return r.portUnavailable(ctx, gc, key, err), nil
		case errors.Is(err, mux.ErrPortRangeExhausted):
			reason = infrav1.PortRangeExhaustedReason
		}
		setNotReady(gc, infrav1.LoadBalancerReadyCondition, reason, err.Error())
		setNotReady(gc, infrav1.ReadyCondition, reason, err.Error())
		return ctrl.Result{}, err
	}

	switch {
	case gc.Spec.ControlPlaneEndpoint.Host == "":
		gc.Spec.ControlPlaneEndpoint = clusterv1.APIEndpoint{Host: l.Host(), Port: int32(l.Port())}
	case gc.Spec.ControlPlaneEndpoint.Host != l.Host():
		// The advertised host changed (a new pod IP after a restart): move the endpoint and the
		// kubeconfig CAPI generated from it, so clients reach the cluster again.
		if err := r.repairKubeconfig(ctx, cluster, l); err != nil {
			setNotReady(gc, infrav1.LoadBalancerReadyCondition, infrav1.ListenerFailedReason, err.Error())
			return ctrl.Result{}, err
		}
		ctrl.LoggerFrom(ctx).Info("Repaired the control plane endpoint after the advertised host changed", "Cluster", klogRef(cluster),
			"old", gc.Spec.ControlPlaneEndpoint.Host, "new", l.Host())
		gc.Spec.ControlPlaneEndpoint.Host = l.Host()
	}

	// Faults first: an unreachable cluster stops serving before anything else happens.
	now := time.Now()
	faults := mux.ClusterFaults(gc.Spec.Simulation, now)
	if err := l.SetFaults(ctx, faults.Faults); err != nil {
		if errors.Is(err, mux.ErrPortUnavailable) {
			// Serving again after an unreachable fault, on a port another process took meanwhile.
			return r.portUnavailable(ctx, gc, key, err), nil
		}
		return ctrl.Result{}, fmt.Errorf("injecting faults: %w", err)
	}
	r.portBound(gc.UID)
	requeue := recordFaults(ctx, r.recorder, gc, clusterFaultKey(gc), faults, now)
	if r.Simulator != nil {
		r.Simulator.Configure(l.Store().Name(), workloadOptions(gc.Spec.Simulation))
	}

	// The backend's part: failure domains, the load balancer, and whether the cluster is ready.
	res, err := backend.ReconcileNormal(ctx, s)
	if err != nil {
		return ctrl.Result{}, err
	}
	return sooner(res, requeue), nil
}

// persistFinalizerAndEndpoint stores gc's finalizer, before its listener exists. A GoofyCluster
// with no endpoint yet gets it in the same object patch, on a port the mux reserves in memory
// only (no listener, no store, no state on disk): the next reconcile, which that write's watch
// event starts, claims the listener on the recorded port and writes the status. That makes two
// writes per GoofyCluster, as before the finalizer went first (issue 14), instead of a third for
// the finalizer alone. If the patch fails, nothing records the port: the reservation is
// cancelled, so nothing is left that deletion would have to free (a reconcile that never comes
// back leaves a reservation that expires, mux.PortReservationTTL; a restart drops it, and
// HotRestart claims a recorded port as any other).
func (r *GoofyClusterReconciler) persistFinalizerAndEndpoint(ctx context.Context, gc *infrav1.GoofyCluster, key string, patcher *objectPatcher) error {
	endpoint := gc.Spec.ControlPlaneEndpoint
	reserved := false
	if !controllerutil.ContainsFinalizer(gc, infrav1.ClusterFinalizer) && endpoint.IsZero() {
		host, port, err := r.Mux.ReserveWorkloadClusterEndpoint(key, gc.UID)
		if err == nil {
			gc.Spec.ControlPlaneEndpoint = clusterv1.APIEndpoint{Host: host, Port: int32(port)}
			reserved = true
		} else {
			// The finalizer goes alone; the claim after it meets the cause (a full port range, a
			// workload cluster another GoofyCluster holds) and reports it in the conditions.
			ctrl.LoggerFrom(ctx).V(4).Info("No port reserved, storing the finalizer alone", "cluster", key, "reason", err.Error())
		}
	}
	err := patcher.persistFinalizer(ctx, gc, infrav1.ClusterFinalizer)
	if reserved && !errors.Is(err, errFinalizerStored) {
		// Not stored (a conflict, the object gone, ...). The deferred patch must not write the
		// endpoint either: the port is free again. (A stale read of an object whose endpoint an
		// earlier reconcile stored cancels that reservation too; the claim then takes the recorded
		// port as after a restart, and the allocator reuses a freed port last.)
		r.Mux.CancelWorkloadClusterPort(key, gc.UID)
		gc.Spec.ControlPlaneEndpoint = endpoint
	}
	return err
}

// repairKubeconfig rewrites the server URL of the <cluster>-kubeconfig secret to the listener.
func (r *GoofyClusterReconciler) repairKubeconfig(ctx context.Context, cluster *clusterv1.Cluster, l *mux.WorkloadClusterListener) error {
	reader := r.APIReader
	if reader == nil {
		reader = r.Client
	}
	s := &corev1.Secret{}
	err := reader.Get(ctx, client.ObjectKey{Namespace: cluster.Namespace, Name: secret.Name(cluster.Name, secret.Kubeconfig)}, s)
	if apierrors.IsNotFound(err) {
		return nil // CAPI writes it later, from the repaired endpoint
	}
	if err != nil {
		return err
	}
	if len(s.Data[secret.KubeconfigDataName]) == 0 {
		// Nothing to repair (and no map to write into): the endpoint moves, and whoever emptied
		// the Secret rewrites it from there.
		ctrl.LoggerFrom(ctx).Info("Kubeconfig secret has no kubeconfig to repair", "Secret", klogRef(s))
		return nil
	}
	cfg, err := clientcmd.Load(s.Data[secret.KubeconfigDataName])
	if err != nil {
		return fmt.Errorf("parsing %s: %w", s.Name, err)
	}
	server := "https://" + net.JoinHostPort(l.Host(), strconv.Itoa(l.Port()))
	for _, c := range cfg.Clusters {
		c.Server = server
	}
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		return err
	}
	s.Data[secret.KubeconfigDataName] = data
	return r.Client.Update(ctx, s)
}

func (r *GoofyClusterReconciler) reconcileDelete(ctx context.Context, s *clusterScope, backend ClusterBackend) error {
	gc := s.gc
	setNotReady(gc, infrav1.ReadyCondition, infrav1.DeletingReason, "")
	r.portBound(gc.UID)
	released, err := r.Mux.ReleaseWorkloadClusterListener(s.key, gc.UID)
	if err != nil {
		return err
	}
	if !released {
		// Another GoofyCluster the Cluster named before still holds it: that one's deletion frees it.
		activeFaults.set(clusterFaultKey(gc), nil)
		controllerutil.RemoveFinalizer(gc, infrav1.ClusterFinalizer)
		return nil
	}
	if err := backend.ReconcileDelete(ctx, s); err != nil {
		return err
	}
	activeFaults.set(clusterFaultKey(gc), nil)
	ctrl.LoggerFrom(ctx).Info("Released the workload cluster listener and store", "Cluster", klogRef(s.cluster))
	controllerutil.RemoveFinalizer(gc, infrav1.ClusterFinalizer)
	return nil
}

// releaseOrphan frees the listener and store of a GoofyCluster whose Cluster is already gone and
// removes its finalizer.
func (r *GoofyClusterReconciler) releaseOrphan(ctx context.Context, gc *infrav1.GoofyCluster, backend ClusterBackend) error {
	ctrl.LoggerFrom(ctx).Info("Cluster already deleted, releasing the GoofyCluster")
	orig := gc.DeepCopy()
	// Only what gc's UID holds: a copy of the GoofyCluster shares the workload cluster's key.
	if err := r.releaseIfHeld(ctx, &clusterScope{gc: gc, key: mux.ClusterKey(gc.Namespace, mux.ClusterNameOf(gc))}, backend); err != nil {
		return err
	}
	return client.IgnoreNotFound(r.Client.Patch(ctx, gc, client.MergeFrom(orig)))
}

// workloadOptions are the simulator's settings of one cluster from its spec.simulation.workloads.
func workloadOptions(sim *infrav1.ClusterSimulation) simulate.ClusterOptions {
	var opts simulate.ClusterOptions
	if sim == nil || sim.Workloads == nil {
		return opts
	}
	switch sim.Workloads.Mode {
	case infrav1.WorkloadsEnabled:
		opts.Workloads = simulate.WorkloadsOn
	case infrav1.WorkloadsDisabled:
		opts.Workloads = simulate.WorkloadsOff
	}
	if d := sim.Workloads.PodStartDelay; d != nil {
		opts.PodStartDelay = d.Duration
	}
	if d := sim.Workloads.JobRunTime; d != nil {
		opts.JobRunTime = d.Duration
	}
	return opts
}

func setTrue(obj conditions.Setter, condType, reason, message string) {
	conditions.Set(obj, metav1.Condition{Type: condType, Status: metav1.ConditionTrue, Reason: reason, Message: message})
}

func setNotReady(obj conditions.Setter, condType, reason, message string) {
	conditions.Set(obj, metav1.Condition{Type: condType, Status: metav1.ConditionFalse, Reason: reason, Message: message})
}

func klogRef(obj metav1.Object) string { return obj.GetNamespace() + "/" + obj.GetName() }
