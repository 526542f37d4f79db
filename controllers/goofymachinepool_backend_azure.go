package controllers

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/goofy-capi/cluster-api-provider-goofy/api/v1alpha1"
)

// azureMachinePoolBackend is the place of Azure scale sets, which are not supported yet: the pool
// says so in its conditions and creates nothing.
type azureMachinePoolBackend struct{ client client.Client }

func (azureMachinePoolBackend) ReconcileNormal(_ context.Context, s *machinePoolScope) (ctrl.Result, error) {
	msg := "the Azure backend does not provide machine pools yet (scale sets come later); use an inMemory GoofyCluster"
	conditions.Set(s.pool, metav1.Condition{Type: infrav1.InstancesReadyCondition, Status: metav1.ConditionFalse, Reason: infrav1.BackendNotSupportedReason, Message: msg})
	return ctrl.Result{}, nil
}

func (b azureMachinePoolBackend) ReconcileDelete(ctx context.Context, s *machinePoolScope) (bool, error) {
	// Instances made while the cluster was simulated still go.
	return deletePoolInstances(ctx, b.client, s.pool)
}
