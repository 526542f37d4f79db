package controllers

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/cluster-api/util/annotations"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/predicates"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	infrav1 "github.com/goofy-capi/cluster-api-provider-goofy/api/v1alpha1"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/mux"
)

// RBAC of the GoofyMachinePool reconciler: its pools, the instance GoofyMachines it creates and
// deletes, the MachinePools that own the pools, and the Machines it deletes to scale down.
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=goofymachinepools,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=goofymachinepools/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=goofymachinepools/finalizers,verbs=update
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=goofymachinepooltemplates,verbs=get;list;watch
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=goofymachines,verbs=create;delete
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=machinepools;machinepools/status,verbs=get;list;watch
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=machines,verbs=delete

// GoofyMachinePoolReconciler provides the infrastructure of CAPI MachinePools: one instance
// GoofyMachine per replica (MachinePool Machines: CAPI creates a Machine for each, and the
// GoofyMachine reconciler provisions its simulated node as any machine's), the pool's
// spec.providerIDList and status.replicas. It scales down by deleting the Machines of chosen
// instances, so that CAPI drains their Nodes before the instances go.
type GoofyMachinePoolReconciler struct {
	Client client.Client
	// APIReader, when set, reads the pool's instances and Machines uncached before the reconciler
	// creates or deletes any (a stale cache would create or delete too many); nil: Client.
	APIReader client.Reader
	// WatchFilterValue, when set, restricts reconciliation to objects with the watch-filter label.
	WatchFilterValue string
	// Azure serves pools of Azure-backed GoofyClusters (scale sets); nil disables that backend.
	Azure *AzureClouds

	// Clock tells the time of the pool's faults (spec.simulation); nil: the real clock.
	Clock clock.PassiveClock

	// chooseBackend, when set, replaces the choice of the backend (tests).
	chooseBackend func(*machinePoolScope) MachinePoolBackend
	recorder      events.EventRecorder
}

// SetupWithManager registers the reconciler: GoofyMachinePools, their MachinePools (replicas,
// bootstrap data), their instance GoofyMachines (owner references, deletion, Ready) and their
// Cluster's creation, resyncs and pause transitions.
func (r *GoofyMachinePoolReconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, options controller.Options) error {
	log := predicateLogger(ctrl.LoggerFrom(ctx))
	r.recorder = mgr.GetEventRecorder("goofymachinepool-controller")
	clusterToPools, err := util.ClusterToTypedObjectsMapper(mgr.GetClient(), &infrav1.GoofyMachinePoolList{}, mgr.GetScheme())
	if err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&infrav1.GoofyMachinePool{}, builder.WithPredicates(specOrMetadataChanged())).
		WithOptions(options).
		WithEventFilter(predicates.ResourceHasFilterLabel(mgr.GetScheme(), log, r.WatchFilterValue)).
		Watches(&clusterv1.MachinePool{},
			handler.EnqueueRequestsFromMapFunc(util.MachinePoolToInfrastructureMapFunc(ctx, infrav1.GroupVersion.WithKind("GoofyMachinePool"))),
			builder.WithPredicates(specOrMetadataChanged()),
		).
		Watches(&infrav1.GoofyMachine{},
			handler.EnqueueRequestsFromMapFunc(instanceToPool),
			builder.WithPredicates(instanceChanged()),
		).
		Watches(&clusterv1.Cluster{},
			handler.EnqueueRequestsFromMapFunc(clusterToPools),
			builder.WithPredicates(clusterToGoofyClusterEvents(mgr.GetScheme(), log)),
		).
		Complete(r)
}

// instanceToPool maps an instance GoofyMachine to the GoofyMachinePool that owns it.
func instanceToPool(_ context.Context, o client.Object) []reconcile.Request {
	if ref := poolOwnerRef(o); ref != nil {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: ref.Name}}}
	}
	return nil
}

// instanceChanged lets through what changes a pool's view of an instance: its creation and
// deletion, spec or metadata changes (CAPI's owner reference, the provider ID), its Ready
// condition, and resyncs.
func instanceChanged() predicate.Funcs {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		o, ok := e.ObjectOld.(*infrav1.GoofyMachine)
		n, ok2 := e.ObjectNew.(*infrav1.GoofyMachine)
		if !ok || !ok2 {
			return true
		}
		return isResync(e) || metadataOrSpecDiffers(o, n) ||
			conditions.IsTrue(o, infrav1.ReadyCondition) != conditions.IsTrue(n, infrav1.ReadyCondition)
	}}
}

// poolOwnerRef is the GoofyMachinePool owner reference of o, if any.
func poolOwnerRef(o metav1.Object) *metav1.OwnerReference {
	for i, ref := range o.GetOwnerReferences() {
		if ref.Kind == "GoofyMachinePool" && ref.APIVersion == infrav1.GroupVersion.String() {
			return &o.GetOwnerReferences()[i]
		}
	}
	return nil
}

// Reconcile follows CAPI's reconciler shape: owner MachinePool and Cluster, pause, finalizer, one
// deferred patch that carries the pool's spec.providerIDList, status and conditions.
func (r *GoofyMachinePoolReconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, reterr error) {
	log := ctrl.LoggerFrom(ctx)
	pool := &infrav1.GoofyMachinePool{}
	if err := r.Client.Get(ctx, req.NamespacedName, pool); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if annotations.IsExternallyManaged(pool) {
		log.V(4).Info("GoofyMachinePool is externally managed, skipping")
		return ctrl.Result{}, nil
	}
	deleting := !pool.DeletionTimestamp.IsZero()
	mp, err := util.GetOwnerMachinePool(ctx, r.Client, pool.ObjectMeta)
	if err != nil {
		if apierrors.IsNotFound(err) && deleting {
			return r.releaseOrphan(ctx, pool)
		}
		return ctrl.Result{}, err
	}
	if mp == nil {
		if deleting {
			return r.releaseOrphan(ctx, pool)
		}
		log.Info("Waiting for the MachinePool controller to set the owner reference")
		return ctrl.Result{}, nil
	}
	cluster, err := util.GetClusterFromMetadata(ctx, r.Client, mp.ObjectMeta)
	if err != nil {
		if apierrors.IsNotFound(err) && deleting {
			return r.releaseOrphan(ctx, pool)
		}
		if !apierrors.IsNotFound(err) && !errors.Is(err, util.ErrNoCluster) {
			return ctrl.Result{}, err
		}
		log.Info("Waiting for the MachinePool's Cluster", "MachinePool", klogRef(mp), "reason", err.Error())
		return ctrl.Result{}, nil
	}

	patcher := newObjectPatcher(r.Client, pool)
	defer patcher.finish(ctx, pool, &res, &reterr)
	if setPausedCondition(cluster, pool, "GoofyMachinePool") {
		log.V(4).Info("Reconciliation is paused")
		return ctrl.Result{}, nil
	}
	// Only the GoofyMachinePool the MachinePool names is its infrastructure: a copy owned by the
	// same MachinePool would otherwise add instances of its own.
	if ref := mp.Spec.Template.Spec.InfrastructureRef; ref.Name != pool.Name || ref.Kind != "GoofyMachinePool" || ref.APIGroup != infrav1.GroupVersion.Group {
		if deleting {
			return r.releaseOrphan(ctx, pool)
		}
		conditions.Set(pool, metav1.Condition{Type: infrav1.ReadyCondition, Status: metav1.ConditionFalse, Reason: infrav1.NotMachineInfrastructureReason,
			Message: fmt.Sprintf("MachinePool %s names %s %q in spec.template.spec.infrastructureRef, not this GoofyMachinePool: it creates no instances",
				klogRef(mp), ref.Kind, ref.Name)})
		return ctrl.Result{}, nil
	}

	s := &machinePoolScope{cluster: cluster, machinePool: mp, pool: pool, patcher: patcher}
	if ref := cluster.Spec.InfrastructureRef; ref.Name != "" {
		gc := &infrav1.GoofyCluster{}
		if err := r.Client.Get(ctx, client.ObjectKey{Namespace: cluster.Namespace, Name: ref.Name}, gc); err == nil {
			s.gc = gc
		} else if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
	}
	backend := r.machinePoolBackend(s)
	if deleting {
		return r.reconcileDelete(ctx, s, backend)
	}
	// The finalizer goes first, in a write of its own, before any instance exists.
	if err := patcher.persistFinalizer(ctx, pool, infrav1.MachinePoolFinalizer); err != nil {
		return ctrl.Result{}, err
	}
	pool.Status.InfrastructureMachineKind = "GoofyMachine"
	res, err = backend.ReconcileNormal(ctx, s)
	setPoolSummary(pool)
	// The pool's faults apply to its instances (their GoofyMachine reconciler reads them); the
	// pool reports them too, and is reconciled again when the first one ends.
	now := r.now()
	active, _, _, _ := mux.MachineFaults(pool.Spec.Simulation, false, now)
	return sooner(res, recordFaults(ctx, r.recorder, pool, "", active, now)), err
}

func (r *GoofyMachinePoolReconciler) now() time.Time {
	if r.Clock == nil {
		return time.Now()
	}
	return r.Clock.Now()
}

func (r *GoofyMachinePoolReconciler) reconcileDelete(ctx context.Context, s *machinePoolScope, backend MachinePoolBackend) (ctrl.Result, error) {
	conditions.Set(s.pool, metav1.Condition{Type: infrav1.ReadyCondition, Status: metav1.ConditionFalse, Reason: infrav1.DeletingReason,
		Message: "deleting the pool's instances"})
	released, err := backend.ReconcileDelete(ctx, s)
	if err != nil || !released {
		// Each instance's deletion (and that of its Machine) wakes the pool again.
		return ctrl.Result{}, err
	}
	controllerutil.RemoveFinalizer(s.pool, infrav1.MachinePoolFinalizer)
	return ctrl.Result{}, nil
}

// releaseOrphan deletes the instances of a pool whose MachinePool or Cluster is gone, or that its
// MachinePool does not name, and then removes its finalizer.
func (r *GoofyMachinePoolReconciler) releaseOrphan(ctx context.Context, pool *infrav1.GoofyMachinePool) (ctrl.Result, error) {
	ctrl.LoggerFrom(ctx).Info("Owner already deleted or not naming this GoofyMachinePool, deleting its instances")
	released, err := deletePoolInstances(ctx, r.Client, pool)
	if err != nil || !released {
		return ctrl.Result{}, err
	}
	orig := pool.DeepCopy()
	controllerutil.RemoveFinalizer(pool, infrav1.MachinePoolFinalizer)
	return ctrl.Result{}, client.IgnoreNotFound(r.Client.Patch(ctx, pool, client.MergeFrom(orig)))
}

// reader is the reader of the live state (APIReader, else Client).
func (r *GoofyMachinePoolReconciler) reader() client.Reader {
	if r.APIReader != nil {
		return r.APIReader
	}
	return r.Client
}

// setPoolSummary sets Ready from InstancesReady and ProviderIDsUnique (a collision wins).
func setPoolSummary(pool *infrav1.GoofyMachinePool) {
	if c := conditions.Get(pool, infrav1.ProviderIDsUniqueCondition); c != nil && c.Status == metav1.ConditionFalse {
		conditions.Set(pool, metav1.Condition{Type: infrav1.ReadyCondition, Status: metav1.ConditionFalse, Reason: c.Reason, Message: c.Message})
		return
	}
	c := conditions.Get(pool, infrav1.InstancesReadyCondition)
	if c == nil {
		return
	}
	ready := metav1.Condition{Type: infrav1.ReadyCondition, Status: c.Status, Reason: c.Reason, Message: c.Message}
	if c.Status == metav1.ConditionUnknown {
		ready.Status = metav1.ConditionFalse
	}
	conditions.Set(pool, ready)
}
