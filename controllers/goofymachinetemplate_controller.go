package controllers

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/cluster-api/util/predicates"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	infrav1 "github.com/goofy-capi/cluster-api-provider-goofy/api/v1alpha1"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/workload"
)

// simulatedNodeInfo is the architecture and operating system of every simulated Node (the
// kubernetes.io/arch and kubernetes.io/os labels workload.Node gives them).
var simulatedNodeInfo = infrav1.NodeInfo{Architecture: infrav1.ArchitectureAmd64, OperatingSystem: "linux"}

// machineCapacity is the capacity of a machine's simulated Node: spec.capacity over the defaults.
func machineCapacity(spec *infrav1.GoofyMachineSpec) corev1.ResourceList {
	capacity := workload.DefaultCapacity()
	for name, q := range spec.Capacity {
		capacity[name] = q.DeepCopy()
	}
	return capacity
}

// GoofyMachineTemplateReconciler reports in each GoofyMachineTemplate's status what a machine made
// from it will be (status.capacity, status.nodeInfo), as CAPI's contract for autoscaling from zero
// asks: the cluster autoscaler reads them to scale a MachineDeployment up from zero machines.
type GoofyMachineTemplateReconciler struct {
	Client client.Client
	// WatchFilterValue, when set, restricts reconciliation to objects with the watch-filter label.
	WatchFilterValue string
}

// SetupWithManager registers the reconciler: template creations, spec and metadata changes, resyncs.
func (r *GoofyMachineTemplateReconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, options controller.Options) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&infrav1.GoofyMachineTemplate{}, builder.WithPredicates(specOrMetadataChanged())).
		WithOptions(options).
		WithEventFilter(predicates.ResourceHasFilterLabel(mgr.GetScheme(), predicateLogger(ctrl.LoggerFrom(ctx)), r.WatchFilterValue)).
		Complete(r)
}

// Reconcile writes the template's status when it differs from what its spec makes (one status
// patch, none when it is current).
func (r *GoofyMachineTemplateReconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, reterr error) {
	t := &infrav1.GoofyMachineTemplate{}
	if err := r.Client.Get(ctx, req.NamespacedName, t); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !t.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	defer newObjectPatcher(r.Client, t).finish(ctx, t, &res, &reterr)
	t.Status.Capacity = machineCapacity(&t.Spec.Template.Spec)
	t.Status.NodeInfo = simulatedNodeInfo
	return ctrl.Result{}, nil
}
