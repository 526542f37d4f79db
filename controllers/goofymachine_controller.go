package controllers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
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
	"sigs.k8s.io/controller-runtime/pkg/handler"

	infrav1 "github.com/goofy-capi/cluster-api-provider-goofy/api/v1alpha1"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/mux"
)

// NodeNotReadyAnnotation on a GoofyMachine makes its simulated Node NotReady (failure injection for
// MachineHealthCheck rehearsals). Remove it to make the Node Ready again.
//
// Deprecated: set spec.simulation.nodeNotReady instead (docs/faults.md); the annotation is its alias.
const NodeNotReadyAnnotation = "goofy.infrastructure.cluster.x-k8s.io/node-not-ready"

// waitForListener is how long a machine waits for its cluster's listener, which the GoofyCluster
// reconciler re-creates after a restart.
const waitForListener = time.Second

// GoofyMachineReconciler simulates the provisioning of a machine in phases: VM, Node and, for
// control-plane machines, etcd member and API server.
type GoofyMachineReconciler struct {
	Client client.Client
	Mux    *mux.WorkloadClustersMux
	// WatchFilterValue, when set, restricts reconciliation to objects with the watch-filter label.
	WatchFilterValue string
	// Restarter, when set, holds reconciles until the listeners are restored on their ports.
	Restarter *HotRestarter
	// Azure serves machines of Azure-backed GoofyClusters; nil disables that backend.
	Azure *AzureClouds
	// Clock drives phase timing; tests use a fake one.
	Clock clock.PassiveClock

	recorder events.EventRecorder
	// envOnce holds what the machine backends share (machineEnv), built on first use.
	envOnce machineEnvOnce
	// chooseBackend, when set, replaces the choice of the backend (tests).
	chooseBackend func(*machineScope) MachineBackend
}

// SetupWithManager registers the reconciler: GoofyMachines, their Machines, and their Cluster's
// creation, pause, infrastructure and control-plane transitions. Every wait of a reconcile ends
// with an event of these watches (TestWaitingMachinesWake); resyncs pass all of them.
func (r *GoofyMachineReconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, options controller.Options) error {
	log := predicateLogger(ctrl.LoggerFrom(ctx))
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	r.recorder = mgr.GetEventRecorder("goofymachine-controller")
	clusterToMachines, err := util.ClusterToTypedObjectsMapper(mgr.GetClient(), &infrav1.GoofyMachineList{}, mgr.GetScheme())
	if err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&infrav1.GoofyMachine{}, builder.WithPredicates(specOrMetadataChanged())).
		WithOptions(options).
		// Paused objects' events pass: the reconcile that follows records Paused=True (CAPI's
		// v1beta2 contract), as CAPD's reconcilers do with ResourceHasFilterLabel.
		WithEventFilter(predicates.ResourceHasFilterLabel(mgr.GetScheme(), log, r.WatchFilterValue)).
		Watches(&clusterv1.Machine{},
			handler.EnqueueRequestsFromMapFunc(util.MachineToInfrastructureMapFunc(infrav1.GroupVersion.WithKind("GoofyMachine"))),
			builder.WithPredicates(specOrMetadataChanged()),
		).
		Watches(&clusterv1.Cluster{},
			handler.EnqueueRequestsFromMapFunc(clusterToMachines),
			builder.WithPredicates(clusterToMachinesEvents(mgr.GetScheme(), log)),
		).
		// A pool's faults are its instances' (machineFaultsOf).
		Watches(&infrav1.GoofyMachinePool{},
			handler.EnqueueRequestsFromMapFunc(poolToInstances(mgr.GetClient())),
			builder.WithPredicates(poolSimulationChanged()),
		).
		Complete(r)
}

// Reconcile follows CAPI's reconciler shape: owner Machine and Cluster, pause, one deferred patch
// that carries the Paused condition, the finalizer, the phase conditions and the machine's identity.
func (r *GoofyMachineReconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, reterr error) {
	log := ctrl.LoggerFrom(ctx)
	if err := r.Restarter.Wait(ctx); err != nil {
		return ctrl.Result{}, err
	}

	gm := &infrav1.GoofyMachine{}
	if err := r.Client.Get(ctx, req.NamespacedName, gm); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if annotations.IsExternallyManaged(gm) {
		log.V(4).Info("GoofyMachine is externally managed, skipping")
		return ctrl.Result{}, nil
	}
	machine, err := util.GetOwnerMachine(ctx, r.Client, gm.ObjectMeta)
	if err != nil {
		if apierrors.IsNotFound(err) && !gm.DeletionTimestamp.IsZero() {
			// The Machine is gone already (its finalizer removed by hand): without this the
			// GoofyMachine would fail on the missing owner forever and never be deleted.
			return ctrl.Result{}, r.releaseOrphan(ctx, gm)
		}
		return ctrl.Result{}, err
	}
	if machine == nil {
		if !gm.DeletionTimestamp.IsZero() {
			return ctrl.Result{}, r.releaseOrphan(ctx, gm)
		}
		log.Info("Waiting for the Machine controller to set the owner reference")
		return ctrl.Result{}, nil
	}
	cluster, err := util.GetClusterFromMetadata(ctx, r.Client, machine.ObjectMeta)
	if err != nil {
		if apierrors.IsNotFound(err) && !gm.DeletionTimestamp.IsZero() {
			// The Cluster is gone already: nothing left to tear down in the mux but this machine.
			return ctrl.Result{}, r.releaseOrphan(ctx, gm)
		}
		if !apierrors.IsNotFound(err) && !errors.Is(err, util.ErrNoCluster) {
			return ctrl.Result{}, err
		}
		// The Machine's cluster-name label or the Cluster's creation wakes the machine: both
		// watches let them through, and CAPI labels the GoofyMachine for the Cluster's mapper
		// when it sets the owner reference.
		log.Info("Waiting for the Machine's Cluster", "Machine", klogRef(machine), "reason", err.Error())
		return ctrl.Result{}, nil
	}
	// No log.WithValues per reconcile: cloning the logger was 2% of the manager's CPU at scale;
	// controller-runtime's logger already names the GoofyMachine.

	// One deferred patch writes the reconcile's changes (see objectPatcher); a stale read comes back
	// as a conflict and the machine is simply reconciled again.
	patcher := newObjectPatcher(r.Client, gm)
	defer patcher.finish(ctx, gm, &res, &reterr)
	if setPausedCondition(cluster, gm, "GoofyMachine") {
		log.V(4).Info("Reconciliation is paused")
		return ctrl.Result{}, nil
	}

	// Only the GoofyMachine the Machine names is its infrastructure: a copy or a decoy owned by
	// the same Machine would otherwise share its Node, etcd member and API server, and release
	// them on deletion.
	if !isMachineInfrastructure(machine, gm) {
		if !gm.DeletionTimestamp.IsZero() {
			return ctrl.Result{}, r.releaseOrphan(ctx, gm)
		}
		conditions.Set(gm, metav1.Condition{Type: infrav1.ReadyCondition, Status: metav1.ConditionFalse, Reason: infrav1.NotMachineInfrastructureReason,
			Message: fmt.Sprintf("Machine %s names GoofyMachine %q in spec.infrastructureRef, not this one: it provisions and releases nothing",
				klogRef(machine), machine.Spec.InfrastructureRef.Name)})
		return ctrl.Result{}, nil
	}
	// A MachinePool instance joins with its pool's bootstrap data and version.
	machine = poolInstanceMachine(machine, gm)
	s := &machineScope{cluster: cluster, machine: machine, gm: gm, key: mux.ClusterKey(cluster.Namespace, cluster.Name), patcher: patcher}
	if ref := cluster.Spec.InfrastructureRef; ref.Name != "" {
		gc := &infrav1.GoofyCluster{}
		if err := r.Client.Get(ctx, client.ObjectKey{Namespace: cluster.Namespace, Name: ref.Name}, gc); err == nil {
			s.gc = gc
		} else if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
	}
	backend := r.machineBackend(s)
	if !gm.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.reconcileDelete(ctx, s, backend)
	}
	return r.reconcileNormal(ctx, s, backend)
}

// machineScope is what one reconcile knows about a machine.
type machineScope struct {
	cluster *clusterv1.Cluster
	machine *clusterv1.Machine
	gm      *infrav1.GoofyMachine
	gc      *infrav1.GoofyCluster // nil when already deleted
	key     string                // the workload cluster in the mux
	patcher *objectPatcher        // the reconcile's deferred patch

	// faults are the machine's active faults (spec.simulation).
	faults machineFaults
	// vmGone, when set, says why the machine's VM is gone for good while the machine keeps its
	// identity (an Azure instance deleted in Azure): its node is NotReady and so is the machine.
	vmGone string
	// observed is what this reconcile read of the machine's node (its static pods, kubeadm's
	// images), shared by its phases.
	observed nodeObservation
}

func (s *machineScope) controlPlane() bool { return util.IsControlPlaneMachine(s.machine) }

// nodeName is the Node's (and etcd member's) name: the Machine's name.
func (s *machineScope) nodeName() string { return s.machine.Name }

func (r *GoofyMachineReconciler) reconcileNormal(ctx context.Context, s *machineScope, backend MachineBackend) (ctrl.Result, error) {
	now := r.Clock.Now()
	// A pool instance without faults of its own has its pool's.
	active, faults, err := machineFaultsOf(ctx, r.Client, s.gm, now)
	if err != nil {
		return ctrl.Result{}, err
	}
	s.faults = faults
	requeue := recordFaults(ctx, r.recorder, s.gm, machineFaultKey(s.gm), active, now)
	if reason, msg := waitingFor(s); reason != "" {
		setWaiting(s.gm, infrav1.VMProvisionedCondition, reason, msg)
		setSummary(s)
		return sooner(ctrl.Result{}, requeue), nil
	}
	res, err := backend.ReconcileNormal(ctx, s)
	if err != nil {
		return res, err
	}
	return sooner(res, requeue), nil
}

// waitingFor returns why provisioning cannot start yet. Each wait ends with a watch event: the
// Cluster's gates (clusterGatesChanged) and the Machine's spec (specOrMetadataChanged).
func waitingFor(s *machineScope) (reason, message string) {
	gates := clusterGatesOf(s.cluster)
	switch {
	case !gates.infrastructureProvisioned:
		return infrav1.WaitingForClusterInfrastructureReason, "waiting for the Cluster's infrastructure to be provisioned"
	case s.machine.Spec.Bootstrap.DataSecretName == nil:
		return infrav1.WaitingForBootstrapDataReason, "waiting for the Machine's bootstrap data secret"
	case !s.controlPlane() && !gates.controlPlaneInitialized:
		return infrav1.WaitingForControlPlaneInitializedReason, "waiting for the control plane to be initialized"
	}
	return "", ""
}

// clusterGates is what a machine waits for on its Cluster.
type clusterGates struct {
	infrastructureProvisioned bool
	// controlPlaneInitialized is the ControlPlaneInitialized condition (what CAPI's own
	// controllers read) or status.initialization.controlPlaneInitialized, whichever is true first:
	// CAPI's patch helper writes the condition and that field in two requests, conditions first.
	controlPlaneInitialized bool
}

func clusterGatesOf(c *clusterv1.Cluster) clusterGates {
	return clusterGates{
		infrastructureProvisioned: ptr.Deref(c.Status.Initialization.InfrastructureProvisioned, false),
		controlPlaneInitialized: conditions.IsTrue(c, clusterv1.ClusterControlPlaneInitializedCondition) ||
			ptr.Deref(c.Status.Initialization.ControlPlaneInitialized, false),
	}
}

func (r *GoofyMachineReconciler) reconcileDelete(ctx context.Context, s *machineScope, backend MachineBackend) error {
	conditions.Set(s.gm, metav1.Condition{Type: infrav1.ReadyCondition, Status: metav1.ConditionFalse, Reason: infrav1.DeletingReason})
	activeFaults.set(machineFaultKey(s.gm), nil)
	if err := backend.ReconcileDelete(ctx, s); err != nil {
		return err
	}
	controllerutil.RemoveFinalizer(s.gm, infrav1.MachineFinalizer)
	return nil
}

// isMachineInfrastructure reports whether the Machine's spec.infrastructureRef names gm.
func isMachineInfrastructure(machine *clusterv1.Machine, gm *infrav1.GoofyMachine) bool {
	ref := machine.Spec.InfrastructureRef
	return machine.Namespace == gm.Namespace && ref.Name == gm.Name && ref.Kind == "GoofyMachine" &&
		ref.APIGroup == infrav1.GroupVersion.Group
}

// releaseOrphan removes the finalizer of a machine whose Machine or Cluster is already gone, or
// that its Machine does not name. If its workload cluster still serves, what the machine added
// there goes first (Node, pods, etcd member, API server), but only what this GoofyMachine made
// (nodeProvisioner.owns): its labels and owner reference, all a copy or a decoy needs to name
// another machine's Node, are not proof. Otherwise the workload cluster's store goes with its
// GoofyCluster.
func (r *GoofyMachineReconciler) releaseOrphan(ctx context.Context, gm *infrav1.GoofyMachine) error {
	ctrl.LoggerFrom(ctx).Info("Owner already deleted or not naming this GoofyMachine, releasing the GoofyMachine")
	if clusterName := gm.Labels[clusterv1.ClusterNameLabel]; clusterName != "" {
		key := mux.ClusterKey(gm.Namespace, clusterName)
		s := &machineScope{gm: gm, key: key, machine: &clusterv1.Machine{
			ObjectMeta: metav1.ObjectMeta{Namespace: gm.Namespace, Name: ownerMachineName(gm), Labels: gm.Labels},
		}}
		nodes := r.env().nodes
		if l, ok := r.Mux.Listener(key); ok {
			owns, err := nodes.owns(ctx, s.node(), l)
			if err != nil {
				return err
			}
			if owns {
				if err := nodes.teardown(ctx, s.node(), l); err != nil {
					return err
				}
			} else {
				ctrl.LoggerFrom(ctx).Info("The workload Node of that name is not this GoofyMachine's, leaving it", "node", s.nodeName())
			}
		}
		nodes.release(s.node())
	}
	activeFaults.set(machineFaultKey(gm), nil)
	orig := gm.DeepCopy()
	controllerutil.RemoveFinalizer(gm, infrav1.MachineFinalizer)
	return client.IgnoreNotFound(r.Client.Patch(ctx, gm, client.MergeFrom(orig)))
}

// ownerMachineName is the name of the Machine in gm's owner references, else gm's own name.
func ownerMachineName(gm *infrav1.GoofyMachine) string {
	for _, ref := range gm.OwnerReferences {
		if ref.Kind == "Machine" && strings.HasPrefix(ref.APIVersion, clusterv1.GroupVersion.Group+"/") {
			return ref.Name
		}
	}
	return gm.Name
}

func setWaiting(gm *infrav1.GoofyMachine, condType, reason, message string) {
	conditions.Set(gm, metav1.Condition{Type: condType, Status: metav1.ConditionUnknown, Reason: reason, Message: message})
}
