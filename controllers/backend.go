package controllers

import (
	"context"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/goofy-capi/cluster-api-provider-goofy/api/v1alpha1"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/mux"
)

// A backend provides the infrastructure of one kind of GoofyCluster or GoofyMachine. The
// reconcilers choose it once per object and reconcile (from the object's spec: its GoofyCluster's
// spec.backend), then only delegate to it: they keep CAPI's reconciler shape (owners, pause,
// finalizer, one deferred patch) and know of no backend. Two backends exist: the simulated one
// (the default: everything in this process) and the Azure one (machines bound to instances
// discovered in Azure; their Nodes and the control plane stay simulated). Machine pools have a
// third interface of the same shape (MachinePoolBackend: ReconcileNormal and ReconcileDelete over
// a pool's scope), simulated only for now.

// ClusterBackend reconciles what a backend adds to a GoofyCluster once its simulated endpoint
// serves: failure domains, the load balancer, and the Ready conditions saying whether it could.
type ClusterBackend interface {
	// ReconcileNormal reports the backend's part of the cluster in s.gc's status: failure domains,
	// status.initialization.provisioned and LoadBalancerReady/Ready (True, or False with the
	// reason). An error is retried with backoff; a refusal that waits for a change is not an error.
	ReconcileNormal(ctx context.Context, s *clusterScope) (ctrl.Result, error)
	// ReconcileDelete releases what the backend keeps for the workload cluster, once the
	// GoofyCluster that held it released it.
	ReconcileDelete(ctx context.Context, s *clusterScope) error
}

// MachineBackend provides a GoofyMachine: its VM (identity, addresses, failure domain) and, through
// the simulated node unit (nodeProvisioner), its Node, static pods, etcd member and API server.
type MachineBackend interface {
	// ReconcileNormal provisions the machine (or keeps it provisioned) and sets its conditions,
	// Ready included. It runs once the machine no longer waits for its Cluster or Machine.
	ReconcileNormal(ctx context.Context, s *machineScope) (ctrl.Result, error)
	// ReconcileDelete releases what the machine holds; the reconciler then removes the finalizer.
	ReconcileDelete(ctx context.Context, s *machineScope) error
}

// MachinePoolBackend provides a GoofyMachinePool's instances: one GoofyMachine per replica of its
// MachinePool, whose nodes the machine backends provision as any machine's.
type MachinePoolBackend interface {
	// ReconcileNormal keeps the pool's instances at the MachinePool's replicas and reports them
	// in s.pool: spec.providerIDList, status.replicas, status.initialization.provisioned and the
	// InstancesReady and ProviderIDsUnique conditions (True, or False with the reason). An error
	// is retried with backoff; a refusal that waits for a change is not an error.
	ReconcileNormal(ctx context.Context, s *machinePoolScope) (ctrl.Result, error)
	// ReconcileDelete deletes the pool's instances and reports whether none is left; the
	// reconciler then removes the finalizer.
	ReconcileDelete(ctx context.Context, s *machinePoolScope) (released bool, err error)
}

// clusterScope is what one reconcile knows about a GoofyCluster.
type clusterScope struct {
	cluster *clusterv1.Cluster // nil when the Cluster is gone already (release only)
	gc      *infrav1.GoofyCluster
	key     string // the workload cluster in the mux
}

// clusterBackend chooses the backend of gc, once per reconcile.
func (r *GoofyClusterReconciler) clusterBackend(gc *infrav1.GoofyCluster) ClusterBackend {
	if r.chooseBackend != nil {
		return r.chooseBackend(gc)
	}
	if gc.Spec.Backend.Azure != nil {
		return &azureClusterBackend{client: r.Client, clouds: r.Azure}
	}
	return simulatedClusterBackend{}
}

// backendWatches adds the watches the backends need to end a GoofyCluster's wait.
func (r *GoofyClusterReconciler) backendWatches(b *builder.Builder) *builder.Builder {
	return azureClusterWatches(r, b)
}

// machineBackend chooses the backend of the machine in s, once per reconcile: the backend of its
// GoofyCluster (simulated when that is gone).
func (r *GoofyMachineReconciler) machineBackend(s *machineScope) MachineBackend {
	if r.chooseBackend != nil {
		return r.chooseBackend(s)
	}
	env := r.env()
	if s.gc != nil && s.gc.Spec.Backend.Azure != nil {
		return &azureMachineBackend{machineEnv: env, clouds: r.Azure}
	}
	return &simulatedMachineBackend{machineEnv: env}
}

// machineEnv is what every machine backend shares: the management client, the mux, the clock of
// the phases, and the simulated node unit with its records (IPs, provisioned nodes).
type machineEnv struct {
	client client.Client
	mux    *mux.WorkloadClustersMux
	clock  clock.PassiveClock
	nodes  *nodeProvisioner
}

// machineEnvOnce builds a reconciler's machineEnv on first use (tests build reconcilers as
// literals, without SetupWithManager).
type machineEnvOnce struct {
	once sync.Once
	env  *machineEnv
}

func (r *GoofyMachineReconciler) env() *machineEnv {
	r.envOnce.once.Do(func() {
		if r.Clock == nil {
			r.Clock = clock.RealClock{}
		}
		r.envOnce.env = &machineEnv{client: r.Client, mux: r.Mux, clock: r.Clock,
			nodes: newNodeProvisioner(r.Client, r.Mux, r.Clock)}
	})
	return r.envOnce.env
}

// listener returns the machine's workload cluster listener, or the result to return when the
// machine cannot go on: the listener is away (after a restart, until its GoofyCluster gets its
// port back), or the VM failed before it was provisioned.
func (e *machineEnv) listener(s *machineScope) (*mux.WorkloadClusterListener, ctrl.Result, bool) {
	l, ok := e.mux.Listener(s.key)
	if !ok {
		// A provisioned machine keeps its phases while its cluster's listener is away (after a
		// restart, until its GoofyCluster gets its port back: PortUnavailable): its VM did not
		// go, and re-timing the VM phase would hold its Node, etcd member and API server back
		// for the phase's startupDuration once the listener is back.
		if !conditions.IsTrue(s.gm, infrav1.VMProvisionedCondition) {
			setWaiting(s.gm, infrav1.VMProvisionedCondition, infrav1.WaitingForClusterInfrastructureReason, "waiting for the workload cluster listener")
			setSummary(s)
		}
		return nil, ctrl.Result{RequeueAfter: waitForListener}, false
	}
	if s.faults.vmFailed && !conditions.IsTrue(s.gm, infrav1.VMProvisionedCondition) {
		// A VM that fails before it is provisioned never comes up.
		conditions.Set(s.gm, metav1.Condition{Type: infrav1.VMProvisionedCondition, Status: metav1.ConditionFalse, Reason: infrav1.VMFailedReason,
			Message: "the VM failed (spec.simulation.vmFailed)"})
		setSummary(s)
		return nil, ctrl.Result{}, false
	}
	return l, ctrl.Result{}, true
}

// releaseNode removes what the machine's node added to its workload cluster (when it still
// serves) and the node's records.
func (e *machineEnv) releaseNode(ctx context.Context, s *machineScope) error {
	if l, ok := e.mux.Listener(s.key); ok {
		if err := e.nodes.teardown(ctx, s.node(), l); err != nil {
			return err
		}
	}
	e.nodes.release(s.node())
	return nil
}

// markClusterProvisioned reports a GoofyCluster's infrastructure ready.
func markClusterProvisioned(gc *infrav1.GoofyCluster) {
	provisioned := true
	gc.Status.Initialization.Provisioned = &provisioned
	setTrue(gc, infrav1.LoadBalancerReadyCondition, infrav1.ReadyReason, "")
	setTrue(gc, infrav1.ReadyCondition, infrav1.ReadyReason, "")
}
