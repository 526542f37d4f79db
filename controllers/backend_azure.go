package controllers

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sort"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	infrav1 "github.com/goofy-capi/cluster-api-provider-goofy/api/v1alpha1"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/azure"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/azure/metadata"
)

// The Azure backend (spec.backend.azure of the GoofyCluster): the control plane stays simulated;
// the cluster reports the Azure load balancer and the instances' zones, and each machine binds to
// a discovered instance and takes over its provider ID, private IP and zone (docs/azure.md).

// azureClusterBackend reports an Azure-backed GoofyCluster's load balancer and failure domains.
type azureClusterBackend struct {
	client client.Client
	clouds *AzureClouds // nil: the backend is not enabled in this manager
}

func (b *azureClusterBackend) ReconcileNormal(ctx context.Context, s *clusterScope) (ctrl.Result, error) {
	gc := s.gc
	gc.Status.FailureDomains = nil
	if err := b.reconcile(ctx, s.key, gc); err != nil {
		var denied errAzureNotAllowed
		if errors.As(err, &denied) {
			// Waits for a change of the GoofyCluster or of the identity (both watched).
			setNotReady(gc, infrav1.LoadBalancerReadyCondition, denied.reason, denied.message)
			setNotReady(gc, infrav1.ReadyCondition, denied.reason, denied.message)
			return ctrl.Result{}, nil
		}
		setNotReady(gc, infrav1.LoadBalancerReadyCondition, infrav1.AzureErrorReason, err.Error())
		setNotReady(gc, infrav1.ReadyCondition, infrav1.AzureErrorReason, err.Error())
		return ctrl.Result{}, err
	}
	markClusterProvisioned(gc)
	return ctrl.Result{}, nil
}

// ReconcileDelete drops the cluster's ARM clients, cached instances and claims.
func (b *azureClusterBackend) ReconcileDelete(_ context.Context, s *clusterScope) error {
	if b.clouds != nil {
		b.clouds.forget(s.key)
	}
	return nil
}

// reconcile reports the load balancer endpoint and the failure domains (zones).
func (b *azureClusterBackend) reconcile(ctx context.Context, key string, gc *infrav1.GoofyCluster) error {
	if b.clouds == nil {
		return fmt.Errorf("the Azure backend is not enabled in this manager")
	}
	c, err := b.clouds.cluster(ctx, b.client, key, gc)
	if err != nil {
		return err
	}
	host, port, err := c.cloud.GetLoadBalancerEndpoint(ctx)
	if err != nil {
		return fmt.Errorf("finding the cluster's load balancer: %w", err)
	}
	p, err := net.LookupPort("tcp", port)
	if err != nil {
		return fmt.Errorf("load balancer port %q: %w", port, err)
	}
	gc.Status.LoadBalancerEndpoint = &clusterv1.APIEndpoint{Host: host, Port: int32(p)}
	instances, err := b.clouds.list(ctx, c)
	if err != nil {
		return fmt.Errorf("listing the cluster's instances: %w", err)
	}
	zones := map[string]bool{}
	for _, in := range instances {
		if in.Zone != "" {
			zones[in.Zone] = zones[in.Zone] || in.Role == metadata.RoleControlPlane
		}
	}
	names := make([]string, 0, len(zones))
	for z := range zones {
		names = append(names, z)
	}
	sort.Strings(names)
	for _, z := range names {
		cp := zones[z]
		gc.Status.FailureDomains = append(gc.Status.FailureDomains, clusterv1.FailureDomain{Name: z, ControlPlane: &cp})
	}
	return nil
}

// azureClusterWatches: an identity created or changed (allowedNamespaces, cloud) ends a
// GoofyCluster's wait on it, or stops its use.
func azureClusterWatches(r *GoofyClusterReconciler, b *builder.Builder) *builder.Builder {
	return b.Watches(&infrav1.GoofyAzureClusterIdentity{}, handler.EnqueueRequestsFromMapFunc(r.identityToGoofyClusters))
}

// identityToGoofyClusters maps a GoofyAzureClusterIdentity to the GoofyClusters naming it.
func (r *GoofyClusterReconciler) identityToGoofyClusters(ctx context.Context, o client.Object) []ctrl.Request {
	list := &infrav1.GoofyClusterList{}
	if err := r.Client.List(ctx, list); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing the GoofyClusters of an Azure identity", "identity", o.GetName())
		return nil
	}
	var out []ctrl.Request
	for i := range list.Items {
		az := list.Items[i].Spec.Backend.Azure
		if az != nil && az.IdentityRef != nil && az.IdentityRef.Name == o.GetName() {
			out = append(out, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
	}
	return out
}

// azureMachineBackend binds a machine to an Azure instance, then runs the simulated node on it.
type azureMachineBackend struct {
	*machineEnv
	clouds *AzureClouds // nil: the backend is not enabled in this manager

	// instance is the instance the machine is bound to in this reconcile; nil when it vanished.
	instance *metadata.InstanceMetadata
}

func (b *azureMachineBackend) ReconcileNormal(ctx context.Context, s *machineScope) (ctrl.Result, error) {
	l, res, ok := b.listener(s)
	if !ok {
		return res, nil
	}
	// Binding reserves an instance: from here on deletion has something to release.
	if err := b.persistFinalizer(ctx, s); err != nil {
		setSummary(s)
		return ctrl.Result{}, err
	}
	bound, err := b.bind(ctx, s)
	var denied errAzureNotAllowed
	if errors.As(err, &denied) {
		conditions.Set(s.gm, metav1.Condition{Type: infrav1.VMProvisionedCondition, Status: metav1.ConditionFalse, Reason: denied.reason, Message: denied.message})
		bound, err = false, nil
	}
	if err != nil || !bound {
		setSummary(s)
		if err != nil {
			return ctrl.Result{}, err // controller-runtime ignores a result that comes with an error
		}
		return ctrl.Result{RequeueAfter: azureNoInstanceRetry}, nil
	}
	res, err = b.runPhases(ctx, s, l, machineSteps{persist: b.persistFinalizer, vm: b.ensureVM})
	setSummary(s)
	if err == nil && res.IsZero() {
		// Look again later: an instance that disappears from Azure makes the node NotReady.
		res.RequeueAfter = azureRecheckInterval
	}
	return res, err
}

func (b *azureMachineBackend) ReconcileDelete(ctx context.Context, s *machineScope) error {
	if err := b.releaseNode(ctx, s); err != nil {
		return err
	}
	if b.clouds != nil {
		b.clouds.release(s.key, claimant(s))
	}
	return nil
}

func (b *azureMachineBackend) persistFinalizer(ctx context.Context, s *machineScope) error {
	return s.patcher.persistFinalizer(ctx, s.gm, infrav1.MachineFinalizer)
}

// ensureVM gives the machine the identity of its instance: addresses and zone. A machine whose
// instance vanished keeps the identity it recorded.
func (b *azureMachineBackend) ensureVM(_ context.Context, s *machineScope) error {
	in := b.instance
	if in == nil {
		return nil
	}
	gm := s.gm
	gm.Status.Addresses = []clusterv1.MachineAddress{
		{Type: clusterv1.MachineHostName, Address: in.Name},
		{Type: clusterv1.MachineInternalIP, Address: in.VPCIP},
	}
	if in.Zone != "" {
		gm.Status.FailureDomain = in.Zone
	}
	gm.Status.Initialization.Provisioned = ptr.To(true)
	return nil
}

// bind gives the machine the identity of a discovered instance. It returns false (and sets the
// reason) when no instance is free yet. A bound instance that is gone from Azure keeps the
// machine's identity and makes its node NotReady (s.vmGone).
func (b *azureMachineBackend) bind(ctx context.Context, s *machineScope) (bool, error) {
	if b.clouds == nil {
		return false, fmt.Errorf("the Azure backend is not enabled in this manager")
	}
	c, err := b.clouds.cluster(ctx, b.client, s.key, s.gc)
	if err != nil {
		return false, err
	}
	if ref := poolOwnerRef(s.gm); ref != nil {
		return b.bindPoolInstance(ctx, s, c, ref)
	}
	instances, err := b.clouds.list(ctx, c)
	if err != nil {
		return false, fmt.Errorf("listing the cluster's instances: %w", err)
	}
	if s.gm.Spec.ProviderID != "" {
		for _, in := range instances {
			if strings.EqualFold(in.ProviderID, s.gm.Spec.ProviderID) {
				b.instance = &in
				return true, nil
			}
		}
		s.vmGone = fmt.Sprintf("instance %s no longer exists in Azure", s.gm.Spec.ProviderID)
		return true, nil
	}
	role := metadata.RoleWorker
	if s.controlPlane() {
		role = metadata.RoleControlPlane
	}
	others := &infrav1.GoofyMachineList{}
	if err := b.client.List(ctx, others, client.InNamespace(s.gm.Namespace), client.MatchingLabels{clusterv1.ClusterNameLabel: s.cluster.Name}); err != nil {
		return false, err
	}
	bound := map[string]bool{}
	for _, o := range others.Items {
		if o.UID != s.gm.UID && o.Spec.ProviderID != "" {
			bound[strings.ToLower(o.Spec.ProviderID)] = true
		}
	}
	in, ok := b.clouds.claim(c, claimant(s), role, s.machine.Spec.FailureDomain, instances, bound)
	if !ok {
		msg := fmt.Sprintf("no free %s instance", role)
		if s.machine.Spec.FailureDomain != "" {
			msg += " in zone " + s.machine.Spec.FailureDomain
		}
		conditions.Set(s.gm, metav1.Condition{Type: infrav1.VMProvisionedCondition, Status: metav1.ConditionFalse,
			Reason: infrav1.NoFreeInstanceReason, Message: msg + fmt.Sprintf(" among %d discovered instances", len(instances))})
		return false, nil
	}
	s.gm.Spec.ProviderID = in.ProviderID
	b.instance = &in
	return true, nil
}

// bindPoolInstance binds an instance of a machine pool to the VM of its scale set whose provider
// ID the pool gave it. A VM no longer in the scale set, or a scale set gone, makes its node
// NotReady (the pool then removes the instance through its Machine, or keeps it while the scale
// set is away); the machine keeps its identity either way.
func (b *azureMachineBackend) bindPoolInstance(ctx context.Context, s *machineScope, c *azureCluster, ref *metav1.OwnerReference) (bool, error) {
	if s.gm.Spec.ProviderID == "" {
		conditions.Set(s.gm, metav1.Condition{Type: infrav1.VMProvisionedCondition, Status: metav1.ConditionFalse, Reason: infrav1.NoFreeInstanceReason,
			Message: fmt.Sprintf("an instance of GoofyMachinePool %s gets its VM's provider ID from the pool", ref.Name)})
		return false, nil
	}
	pool := &infrav1.GoofyMachinePool{}
	if err := b.client.Get(ctx, client.ObjectKey{Namespace: s.gm.Namespace, Name: ref.Name}, pool); err != nil {
		if !apierrors.IsNotFound(err) {
			return false, err
		}
		s.vmGone = fmt.Sprintf("GoofyMachinePool %s of instance %s is gone", ref.Name, s.gm.Spec.ProviderID)
		return true, nil
	}
	if pool.UID != ref.UID || pool.Spec.Azure == nil {
		s.vmGone = fmt.Sprintf("GoofyMachinePool %s selects no scale set for instance %s", ref.Name, s.gm.Spec.ProviderID)
		return true, nil
	}
	set, err := b.clouds.scaleSet(ctx, c, scaleSetSelector(pool.Spec.Azure.ScaleSet))
	switch {
	case errors.Is(err, azure.ErrScaleSetNotFound):
		s.vmGone = fmt.Sprintf("instance %s: %v", s.gm.Spec.ProviderID, err)
		return true, nil
	case errors.Is(err, azure.ErrScaleSetAmbiguous):
		return true, nil // the VM is not known to be gone: the machine keeps its identity
	case err != nil:
		return false, fmt.Errorf("reading the scale set of GoofyMachinePool %s: %w", pool.Name, err)
	}
	for _, in := range set.Instances {
		if strings.EqualFold(in.ProviderID, s.gm.Spec.ProviderID) {
			b.instance = &in
			return true, nil
		}
	}
	if !slices.ContainsFunc(set.Members, func(id string) bool { return strings.EqualFold(id, s.gm.Spec.ProviderID) }) {
		s.vmGone = fmt.Sprintf("instance %s is no longer in scale set %s", s.gm.Spec.ProviderID, set.Name)
	}
	return true, nil
}

// claimant is who holds a machine's instance claim: its UID (a GoofyMachine re-created under the
// same name is another machine). After a restart claims come back from spec.providerID.
func claimant(s *machineScope) string { return string(s.gm.UID) }
