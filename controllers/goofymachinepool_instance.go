package controllers

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/labels/format"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	infrav1 "github.com/goofy-capi/cluster-api-provider-goofy/api/v1alpha1"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/mux"
)

// poolInstanceMachine is the Machine a pool instance's GoofyMachine is provisioned for. CAPI's
// MachinePool controller creates the Machine of an instance with an empty bootstrap data secret
// name and no version (it copies the version from the Node once there is one): an instance joins
// with its MachinePool's bootstrap data and Kubernetes version, which the pool recorded on the
// instance when it created it (InstanceBootstrapDataAnnotation, InstanceKubernetesVersionAnnotation).
// Any other machine's Machine is returned as it is.
func poolInstanceMachine(machine *clusterv1.Machine, gm *infrav1.GoofyMachine) *clusterv1.Machine {
	if poolOwnerRef(gm) == nil {
		return machine
	}
	m := machine.DeepCopy()
	if secret := m.Spec.Bootstrap.DataSecretName; secret == nil || *secret == "" {
		m.Spec.Bootstrap.DataSecretName = nil // waits (WaitingForBootstrapData) without the pool's
		if name := gm.Annotations[infrav1.InstanceBootstrapDataAnnotation]; name != "" {
			m.Spec.Bootstrap.DataSecretName = &name
		}
	}
	if m.Spec.Version == "" {
		m.Spec.Version = gm.Annotations[infrav1.InstanceKubernetesVersionAnnotation]
	}
	return m
}

// machineFaultsOf says which faults of gm are active at now: those of its own spec.simulation,
// or, for a pool instance without one, those of its pool's spec.simulation (read from c), named
// after the pool. The deprecated node-not-ready annotation counts either way.
func machineFaultsOf(ctx context.Context, c client.Reader, gm *infrav1.GoofyMachine, now time.Time) (mux.ActiveFaults, machineFaults, error) {
	annotated := gm.Annotations[NodeNotReadyAnnotation] != ""
	sim, from := gm.Spec.Simulation, ""
	if ref := poolOwnerRef(gm); sim == nil && ref != nil {
		pool := &infrav1.GoofyMachinePool{}
		err := c.Get(ctx, client.ObjectKey{Namespace: gm.Namespace, Name: ref.Name}, pool)
		switch {
		case err == nil && pool.UID == ref.UID:
			sim, from = pool.Spec.Simulation, pool.Name
		case err != nil && !apierrors.IsNotFound(err):
			return mux.ActiveFaults{}, machineFaults{}, err
		}
	}
	if from == "" {
		a, nodeNotReady, etcdUnhealthy, vmFailed := mux.MachineFaults(sim, annotated, now)
		return a, machineFaults{nodeNotReady: nodeNotReady, etcdUnhealthy: etcdUnhealthy, vmFailed: vmFailed}, nil
	}
	a, nodeNotReady, etcdUnhealthy, vmFailed := mux.MachineFaults(sim, false, now)
	for i := range a.Names {
		a.Names[i] += " (GoofyMachinePool " + from + ")"
	}
	if annotated && !nodeNotReady {
		own, _, _, _ := mux.MachineFaults(nil, true, now)
		a.Names = append(own.Names, a.Names...)
		a.Kinds = append(own.Kinds, a.Kinds...)
		nodeNotReady = true
	}
	return a, machineFaults{nodeNotReady: nodeNotReady, etcdUnhealthy: etcdUnhealthy, vmFailed: vmFailed}, nil
}

// poolToInstances maps a GoofyMachinePool to its instance GoofyMachines (read from c), for the
// GoofyMachine reconciler: the pool's faults are theirs.
func poolToInstances(c client.Reader) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		gms := &infrav1.GoofyMachineList{}
		if err := c.List(ctx, gms, client.InNamespace(o.GetNamespace()),
			client.MatchingLabels{infrav1.MachinePoolInstanceLabel: format.MustFormatValue(o.GetName())}); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "Listing the instances of a GoofyMachinePool", "GoofyMachinePool", klog.KObj(o))
			return nil
		}
		var out []reconcile.Request
		for i := range gms.Items {
			if ref := poolOwnerRef(&gms.Items[i]); ref != nil && ref.UID == o.GetUID() {
				out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&gms.Items[i])})
			}
		}
		return out
	}
}

// poolSimulationChanged lets through the updates of a GoofyMachinePool that change its faults.
func poolSimulationChanged() predicate.Funcs {
	return predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok := e.ObjectOld.(*infrav1.GoofyMachinePool)
			n, ok2 := e.ObjectNew.(*infrav1.GoofyMachinePool)
			return ok && ok2 && !equality.Semantic.DeepEqual(o.Spec.Simulation, n.Spec.Simulation)
		},
	}
}
