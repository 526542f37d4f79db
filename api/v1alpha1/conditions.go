package v1alpha1

import clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

// Condition types and reasons shared by the Goofy kinds. Ready and Paused follow CAPI's names so
// that CAPI mirrors them; the phase conditions of a GoofyMachine tell where provisioning stands.
const (
	// ReadyCondition summarises the object's state.
	ReadyCondition = clusterv1.ReadyCondition
	// PausedCondition is true while the object or its Cluster is paused.
	PausedCondition = clusterv1.PausedCondition

	// VMProvisionedCondition: the simulated (or Azure-bound) VM exists.
	VMProvisionedCondition = "VMProvisioned"
	// NodeProvisionedCondition: the Node exists in the workload cluster.
	NodeProvisionedCondition = "NodeProvisioned"
	// EtcdProvisionedCondition: the etcd member serves (control-plane machines only).
	EtcdProvisionedCondition = "EtcdProvisioned"
	// APIServerProvisionedCondition: the API server serves (control-plane machines only).
	APIServerProvisionedCondition = "APIServerProvisioned"
	// FaultsInjectedCondition is True while a fault of spec.simulation is active; its message
	// names them (docs/faults.md).
	FaultsInjectedCondition = "FaultsInjected"
	// LoadBalancerReadyCondition: the cluster's API endpoint is allocated and served.
	LoadBalancerReadyCondition = "LoadBalancerReady"

	// ReadyReason and friends are the reasons the reconcilers set.
	ReadyReason                             = "Ready"
	NotReadyReason                          = "NotReady"
	ProvisionedReason                       = "Provisioned"
	ProvisioningReason                      = "Provisioning"
	WaitingForClusterInfrastructureReason   = "WaitingForClusterInfrastructure"
	WaitingForBootstrapDataReason           = "WaitingForBootstrapData"
	WaitingForControlPlaneInitializedReason = "WaitingForControlPlaneInitialized"
	WaitingForPreviousPhaseReason           = "WaitingForPreviousPhase"
	NotApplicableReason                     = "NotApplicable"
	DeletingReason                          = "Deleting"
	PortRangeExhaustedReason                = "PortRangeExhausted"
	ListenerFailedReason                    = "ListenerFailed"
	StateUnreadableReason                   = "StateUnreadable"
	NoFreeInstanceReason                    = "NoFreeInstance"
	InstanceGoneReason                      = "InstanceGone"
	AzureErrorReason                        = "AzureError"
	// AzureIdentityNotFoundReason: spec.backend.azure.identityRef names no GoofyAzureClusterIdentity.
	AzureIdentityNotFoundReason = "AzureIdentityNotFound"
	// AzureIdentityNotAllowedReason: the GoofyAzureClusterIdentity's allowedNamespaces do not
	// include the GoofyCluster's namespace.
	AzureIdentityNotAllowedReason = "AzureIdentityNotAllowed"
	// AzureIdentityRequiredReason: the GoofyCluster has no spec.backend.azure.identityRef and its
	// namespace is not one the operator lets use the manager's own Azure credential (the
	// manager's --azure-default-credential-namespaces).
	AzureIdentityRequiredReason = "AzureIdentityRequired"
	// AzureCustomCloudNotAllowedReason: a GoofyCluster names a Custom cloud itself; custom clouds
	// come only from a GoofyAzureClusterIdentity or the manager's environment.
	AzureCustomCloudNotAllowedReason = "AzureCustomCloudNotAllowed"
	// FaultsActiveReason and NoFaultsReason are the reasons of FaultsInjected.
	FaultsActiveReason = "FaultsActive"
	NoFaultsReason     = "NoFaults"
	// NotClusterInfrastructureReason: the GoofyCluster is not the one its Cluster's
	// spec.infrastructureRef names (a copy): it serves and frees nothing.
	NotClusterInfrastructureReason = "NotClusterInfrastructure"
	// WorkloadClusterHeldReason: the Cluster names this GoofyCluster, but another GoofyCluster
	// it named before still holds the workload cluster.
	WorkloadClusterHeldReason = "WorkloadClusterHeld"
	// PortNotHeldReason: spec.controlPlaneEndpoint.port is not a port this workload cluster held:
	// another workload cluster's, one other than the port it held before a restart, one the
	// GoofyCluster of another workload cluster records too with no record of which held it, or
	// one outside the manager's --listener-port-range. The cluster is not served on it, and the
	// holder keeps it.
	PortNotHeldReason = "PortNotHeld"
	// PortUnavailableReason: the workload cluster's own port cannot be bound (another process
	// listens on it). The endpoint cannot move (CAPI's Cluster.spec.controlPlaneEndpoint is
	// immutable once set), so binding it is retried, with backoff, until it is free.
	PortUnavailableReason = "PortUnavailable"
	// NotMachineInfrastructureReason: the GoofyMachine is not the one its Machine's
	// spec.infrastructureRef names (a copy or a decoy): it provisions and releases nothing.
	NotMachineInfrastructureReason = "NotMachineInfrastructure"
	// VMFailedReason: spec.simulation.vmFailed, a terminal failure of the machine (Ready=False).
	VMFailedReason = "VMFailed"
)
