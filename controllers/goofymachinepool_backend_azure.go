package controllers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/goofy-capi/cluster-api-provider-goofy/api/v1alpha1"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/azure"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/azure/metadata"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/mux"
)

// azureMachinePoolBackend maps a pool to the Azure scale set its spec.azure.scaleSet selects
// (uniform or flexible, by name or tags) in its GoofyCluster's resource group. The scale set's
// VMs are the pool's instances: one instance GoofyMachine per VM, carrying the VM's provider ID
// (as cloud-provider-azure writes it), for which CAPI creates a Machine (MachinePool Machines);
// the GoofyMachine reconciler binds it to its VM and provisions its simulated Node. Goofy reads
// Azure and never scales it: the scale set decides how many instances there are, and a
// difference from the MachinePool's replicas is only reported (ReplicasMatchScaleSet). A VM that
// leaves the scale set loses its instance through its Machine (CAPI drains the Node first); a
// scale set that cannot be found keeps every instance and spec.providerIDList as last seen.
type azureMachinePoolBackend struct {
	client client.Client
	live   client.Reader // uncached reads before creating or deleting; nil: client
	clouds *AzureClouds  // nil: the Azure backend is not enabled for pools in this manager
}

// newAzureMachinePoolBackend is the pool backend of an Azure-backed GoofyCluster.
func newAzureMachinePoolBackend(c client.Client, live client.Reader, clouds *AzureClouds) MachinePoolBackend {
	return azureMachinePoolBackend{client: c, live: live, clouds: clouds}
}

func (b azureMachinePoolBackend) reader() client.Reader {
	if b.live != nil {
		return b.live
	}
	return b.client
}

func (b azureMachinePoolBackend) ReconcileNormal(ctx context.Context, s *machinePoolScope) (ctrl.Result, error) {
	pool := s.pool
	notReady := func(reason, msg string) {
		conditions.Set(pool, metav1.Condition{Type: infrav1.InstancesReadyCondition, Status: metav1.ConditionFalse, Reason: reason, Message: msg})
	}
	if b.clouds == nil {
		notReady(infrav1.BackendNotSupportedReason, "the Azure backend is not enabled for machine pools in this manager")
		return ctrl.Result{}, nil
	}
	if pool.Spec.Azure == nil {
		notReady(infrav1.ScaleSetNotSelectedReason, "the GoofyCluster uses the Azure backend: set spec.azure.scaleSet (name or tags) to the scale set whose VMs are this pool's instances")
		return ctrl.Result{}, nil
	}
	sel := scaleSetSelector(pool.Spec.Azure.ScaleSet)
	key := mux.ClusterKey(s.cluster.Namespace, s.cluster.Name)
	c, err := b.clouds.cluster(ctx, b.client, key, s.gc)
	var denied errAzureNotAllowed
	switch {
	case errors.As(err, &denied):
		notReady(denied.reason, denied.message)
		return ctrl.Result{RequeueAfter: azureNoInstanceRetry}, nil
	case err != nil:
		notReady(infrav1.AzureErrorReason, err.Error())
		return ctrl.Result{}, err
	}
	set, err := b.clouds.scaleSet(ctx, c, sel)
	if err != nil {
		// Nothing is created or deleted, spec.providerIDList and status stay as last seen: a
		// scale set that is away (deleted, not there yet, or a tag on a second one) is no
		// reason to lose instances. ARM errors are retried with backoff, the others looked at
		// again after a while.
		reason, res := infrav1.AzureErrorReason, ctrl.Result{RequeueAfter: azureNoInstanceRetry}
		switch {
		case errors.Is(err, azure.ErrScaleSetNotFound):
			reason = infrav1.ScaleSetNotFoundReason
		case errors.Is(err, azure.ErrScaleSetAmbiguous):
			reason = infrav1.ScaleSetAmbiguousReason
		default:
			res = ctrl.Result{}
		}
		msg := err.Error()
		if n := len(pool.Spec.ProviderIDList); n > 0 {
			msg += fmt.Sprintf("; keeping the %d instances last seen", n)
		}
		notReady(reason, msg)
		conditions.Set(pool, metav1.Condition{Type: infrav1.ReplicasMatchScaleSetCondition, Status: metav1.ConditionUnknown, Reason: reason,
			Message: "the scale set cannot be read"})
		if reason == infrav1.AzureErrorReason {
			return res, err
		}
		return res, nil
	}
	b.clouds.holdAll(c, poolClaimant(pool), set.Members)
	pool.Spec.ProviderID = set.ProviderID

	sim := &simulatedMachinePoolBackend{client: b.client}
	instances, others, err := sim.instances(ctx, b.client, s)
	if err != nil {
		return ctrl.Result{}, err
	}
	plan := planScaleSet(set, instances, others)
	waitingForBootstrap := ptr.Deref(s.machinePool.Spec.Template.Spec.Bootstrap.DataSecretName, "") == ""
	if len(plan.remove) > 0 || len(plan.create) > 0 && !waitingForBootstrap {
		// A stale cache would create an instance twice, or delete a new one: read again, uncached.
		if instances, others, err = sim.instances(ctx, b.reader(), s); err != nil {
			return ctrl.Result{}, err
		}
		plan = planScaleSet(set, instances, others)
	}
	for _, in := range plan.remove {
		if err := b.removeInstance(ctx, set, in); err != nil {
			return ctrl.Result{}, err
		}
		for i := range instances {
			if instances[i].gm == in.gm {
				instances[i].leaving = true
			}
		}
	}
	if !waitingForBootstrap {
		for _, vm := range plan.create {
			gm, err := b.createInstance(ctx, s, vm)
			if err != nil {
				return ctrl.Result{}, err
			}
			instances = append(instances, poolInstance{gm: gm})
		}
	}
	report(s, instances, others, int32(plan.desired))
	if waitingForBootstrap && len(plan.create) > 0 {
		notReady(infrav1.WaitingForBootstrapDataReason, fmt.Sprintf("waiting for MachinePool %s's bootstrap data secret before making instances of %d VMs of scale set %s",
			klogRef(s.machinePool), len(plan.create), set.Name))
	}
	if len(plan.collisions) > 0 {
		conditions.Set(pool, metav1.Condition{Type: infrav1.ProviderIDsUniqueCondition, Status: metav1.ConditionFalse, Reason: infrav1.ProviderIDCollisionReason,
			Message: "VMs of scale set " + set.Name + " already bound to other GoofyMachines get no instance: " + strings.Join(plan.collisions, "; ")})
	}
	reportScaleSetReplicas(s, set)
	// Azure sends no events: look at the scale set again after a while.
	return ctrl.Result{RequeueAfter: azureRecheckInterval}, nil
}

func (b azureMachinePoolBackend) ReconcileDelete(ctx context.Context, s *machinePoolScope) (bool, error) {
	released, err := deletePoolInstances(ctx, b.client, s.pool)
	if err == nil && released && b.clouds != nil && s.cluster != nil {
		b.clouds.release(mux.ClusterKey(s.cluster.Namespace, s.cluster.Name), poolClaimant(s.pool))
	}
	return released, err
}

// scaleSetPlan is what a pool does to follow its scale set.
type scaleSetPlan struct {
	create     []metadata.InstanceMetadata // VMs without an instance
	remove     []poolInstance              // instances whose VM left the scale set
	desired    int                         // instances the pool should have
	collisions []string                    // VMs bound to other GoofyMachines: no instance
}

// planScaleSet compares the scale set's VMs with the pool's instances by provider ID (ARM's
// letter case may change; provider IDs compare case-insensitively, as instances bind). A member
// VM that could not be described yet (no NIC, no IP) keeps its instance, and gets none until it
// can be.
func planScaleSet(set *azure.ScaleSet, instances []poolInstance, others []infrav1.GoofyMachine) scaleSetPlan {
	var p scaleSetPlan
	members := map[string]bool{}
	for _, id := range set.Members {
		members[strings.ToLower(id)] = true
	}
	have := map[string]bool{}
	for _, in := range instances {
		id := strings.ToLower(in.gm.Spec.ProviderID)
		have[id] = true
		if in.leaving {
			continue
		}
		if members[id] {
			p.desired++
		} else {
			p.remove = append(p.remove, in)
		}
	}
	boundTo := map[string]string{}
	for _, o := range others {
		if o.Spec.ProviderID != "" {
			boundTo[strings.ToLower(o.Spec.ProviderID)] = o.Name
		}
	}
	for _, vm := range set.Instances {
		id := strings.ToLower(vm.ProviderID)
		switch {
		case have[id]:
		case boundTo[id] != "":
			p.collisions = append(p.collisions, fmt.Sprintf("%s (GoofyMachine %s)", vm.ProviderID, boundTo[id]))
		default:
			p.create = append(p.create, vm)
			p.desired++
		}
	}
	slices.Sort(p.collisions)
	return p
}

// removeInstance deletes the instance of a VM that left the scale set: through its Machine (CAPI
// drains the Node, then deletes the instance), or directly when CAPI has not made one.
func (b azureMachinePoolBackend) removeInstance(ctx context.Context, set *azure.ScaleSet, in poolInstance) error {
	log := ctrl.LoggerFrom(ctx).WithValues("GoofyMachine", klogRef(in.gm), "providerID", in.gm.Spec.ProviderID, "scaleSet", set.Name)
	if m := in.machine; m != nil {
		log.Info("The VM left the scale set: deleting the Machine of its pool instance", "Machine", klogRef(m))
		if err := b.client.Delete(ctx, m.DeepCopy(), client.Preconditions{UID: &m.UID}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting Machine %s of pool instance %s: %w", klogRef(m), in.gm.Name, err)
		}
		return nil
	}
	log.Info("The VM left the scale set: deleting its pool instance, which has no Machine")
	if err := b.client.Delete(ctx, in.gm.DeepCopy(), client.Preconditions{UID: &in.gm.UID}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting pool instance %s: %w", klogRef(in.gm), err)
	}
	return nil
}

// createInstance creates the instance GoofyMachine of one VM: labelled and owned as the simulated
// backend's instances, with the VM's provider ID, the MachinePool's bootstrap data secret and
// Kubernetes version, the Azure machine backend, and the template's metadata and capacity.
func (b azureMachinePoolBackend) createInstance(ctx context.Context, s *machinePoolScope, vm metadata.InstanceMetadata) (*infrav1.GoofyMachine, error) {
	gm, err := createPoolInstance(ctx, b.client, s, func(gm *infrav1.GoofyMachine) {
		gm.Spec.ProviderID = vm.ProviderID
		gm.Spec.Backend = infrav1.GoofyMachineBackend{Azure: &infrav1.AzureMachineBackend{}}
	})
	if err != nil {
		return nil, fmt.Errorf("creating the instance of VM %s of GoofyMachinePool %s: %w", vm.ProviderID, klogRef(s.pool), err)
	}
	ctrl.LoggerFrom(ctx).Info("Created a pool instance for a VM of the scale set", "GoofyMachine", klogRef(gm), "providerID", vm.ProviderID)
	return gm, nil
}

// reportScaleSetReplicas compares the MachinePool's replicas with the scale set's capacity (its
// VM count when it has none): ReplicasMatchScaleSet.
func reportScaleSetReplicas(s *machinePoolScope, set *azure.ScaleSet) {
	capacity, what := int64(len(set.Members)), "VMs"
	if set.Capacity != nil {
		capacity, what = *set.Capacity, "capacity"
	}
	replicas := int64(ptr.Deref(s.machinePool.Spec.Replicas, 1))
	c := metav1.Condition{Type: infrav1.ReplicasMatchScaleSetCondition, Status: metav1.ConditionTrue, Reason: infrav1.ReplicasMatchReason,
		Message: fmt.Sprintf("MachinePool %s asks for %d replicas; scale set %s has %s %d", klogRef(s.machinePool), replicas, set.Name, what, capacity)}
	if replicas != capacity {
		c.Status, c.Reason = metav1.ConditionFalse, infrav1.ReplicasMismatchReason
		c.Message = fmt.Sprintf("MachinePool %s asks for %d replicas but scale set %s has %s %d (%d VMs): the pool follows the scale set (Goofy does not scale Azure); "+
			"scale the scale set in Azure, or set the MachinePool's replicas to match", klogRef(s.machinePool), replicas, set.Name, what, capacity, len(set.Members))
	}
	conditions.Set(s.pool, c)
}
