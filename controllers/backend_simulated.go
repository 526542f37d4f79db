package controllers

import (
	"context"
	"fmt"
	"net/netip"

	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/goofy-capi/cluster-api-provider-goofy/api/v1alpha1"
)

// The simulated backend (spec.backend.inMemory, the default): the cluster's failure domains are
// its spec's, and a machine's VM is made up here: a goofy:// provider ID, an InternalIP from the
// cluster's simulated node network, the Machine's failure domain.

// simulatedClusterBackend reports the failure domains of the GoofyCluster's spec.
type simulatedClusterBackend struct{}

func (simulatedClusterBackend) ReconcileNormal(_ context.Context, s *clusterScope) (ctrl.Result, error) {
	s.gc.Status.FailureDomains = nil
	for _, fd := range s.gc.Spec.FailureDomains {
		s.gc.Status.FailureDomains = append(s.gc.Status.FailureDomains, clusterv1.FailureDomain{
			Name: fd.Name, ControlPlane: fd.ControlPlane, Attributes: fd.Attributes,
		})
	}
	markClusterProvisioned(s.gc)
	return ctrl.Result{}, nil
}

func (simulatedClusterBackend) ReconcileDelete(context.Context, *clusterScope) error { return nil }

// simulatedMachineBackend runs a machine through its phases on a simulated VM.
type simulatedMachineBackend struct{ *machineEnv }

func (b *simulatedMachineBackend) ReconcileNormal(ctx context.Context, s *machineScope) (ctrl.Result, error) {
	l, res, ok := b.listener(s)
	if !ok {
		return res, nil
	}
	res, err := b.runPhases(ctx, s, l, machineSteps{persist: b.persistFinalizer, vm: b.ensureVM})
	setSummary(s)
	return res, err
}

func (b *simulatedMachineBackend) ReconcileDelete(ctx context.Context, s *machineScope) error {
	return b.releaseNode(ctx, s)
}

// persistFinalizer stores the machine's finalizer before it provisions anything; the provider ID,
// known in advance, rides along (the write it would need anyway).
func (b *simulatedMachineBackend) persistFinalizer(ctx context.Context, s *machineScope) error {
	if s.gm.Spec.ProviderID == "" {
		s.gm.Spec.ProviderID = simulatedProviderID(s)
	}
	return s.patcher.persistFinalizer(ctx, s.gm, infrav1.MachineFinalizer)
}

// ensureVM gives the machine its identity: provider ID, addresses and failure domain.
func (b *simulatedMachineBackend) ensureVM(ctx context.Context, s *machineScope) error {
	gm := s.gm
	if gm.Spec.ProviderID == "" {
		gm.Spec.ProviderID = simulatedProviderID(s)
	}
	ip, err := b.nodes.nodeIP(s.node(), internalIP(gm), func() (map[netip.Addr]bool, error) { return b.otherMachinesIPs(ctx, s) })
	if err != nil {
		return err
	}
	gm.Status.Addresses = []clusterv1.MachineAddress{
		{Type: clusterv1.MachineHostName, Address: s.nodeName()},
		{Type: clusterv1.MachineInternalIP, Address: ip.String()},
	}
	if s.machine.Spec.FailureDomain != "" {
		gm.Status.FailureDomain = s.machine.Spec.FailureDomain
	}
	gm.Status.Initialization.Provisioned = ptr.To(true)
	return nil
}

// otherMachinesIPs are the InternalIPs the cluster's other GoofyMachines recorded in their status
// (for the first machine after a restart, before the others re-registered theirs).
func (b *simulatedMachineBackend) otherMachinesIPs(ctx context.Context, s *machineScope) (map[netip.Addr]bool, error) {
	others := &infrav1.GoofyMachineList{}
	// Read-only: the cache's own objects, not copies (a cluster of 500 workers listed its 500
	// GoofyMachines, deep-copied, for each machine it provisioned).
	if err := b.client.List(ctx, others, client.InNamespace(s.gm.Namespace), client.MatchingLabels{clusterv1.ClusterNameLabel: s.cluster.Name},
		client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	taken := map[netip.Addr]bool{}
	for _, o := range others.Items {
		if o.UID == s.gm.UID {
			continue
		}
		for _, a := range o.Status.Addresses {
			if ip, err := netip.ParseAddr(a.Address); err == nil && a.Type == clusterv1.MachineInternalIP {
				taken[ip] = true
			}
		}
	}
	return taken, nil
}

// simulatedProviderID is the provider ID of a simulated machine.
func simulatedProviderID(s *machineScope) string {
	return fmt.Sprintf("goofy://%s/%s/%s", s.gm.Namespace, s.cluster.Name, s.gm.Name)
}
