package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

// MachinePoolFinalizer lets the GoofyMachinePool reconciler delete the pool's instances (through
// their Machines, so that their Nodes are drained) before the pool goes.
const MachinePoolFinalizer = "goofymachinepool.infrastructure.cluster.x-k8s.io"

// Condition types and reasons of a GoofyMachinePool (besides Ready and Paused).
const (
	// InstancesReadyCondition is True when the pool has exactly the MachinePool's replicas as
	// instances and every one of them is Ready; False says why not (scaling, instances not Ready,
	// waiting, invalid replicas, an unsupported backend).
	InstancesReadyCondition = "InstancesReady"
	// ProviderIDsUniqueCondition is False when an instance's provider ID is also another
	// GoofyMachine's in the cluster: CAPI matches Nodes by provider ID, so such an instance is
	// left out of spec.providerIDList until the collision is resolved.
	ProviderIDsUniqueCondition = "ProviderIDsUnique"

	// ScalingUpReason: the pool creates instances to reach the MachinePool's replicas.
	ScalingUpReason = "ScalingUp"
	// ScalingDownReason: the pool deletes the Machines of instances beyond the MachinePool's
	// replicas (CAPI drains their Nodes, then deletes the instances).
	ScalingDownReason = "ScalingDown"
	// InstancesNotReadyReason: some instances are not Ready yet.
	InstancesNotReadyReason = "InstancesNotReady"
	// InvalidReplicasReason: the MachinePool's spec.replicas is negative; the pool neither creates
	// nor deletes anything until it is fixed.
	InvalidReplicasReason = "InvalidReplicas"
	// ProviderIDCollisionReason: an instance's provider ID is also another GoofyMachine's.
	ProviderIDCollisionReason = "ProviderIDCollision"
	// NoProviderIDCollisionReason: every instance's provider ID is its own.
	NoProviderIDCollisionReason = "NoProviderIDCollision"
	// BackendNotSupportedReason: the GoofyCluster's backend provides no machine pools (yet).
	BackendNotSupportedReason = "BackendNotSupported"

	// RollingOutCondition is True while the pool replaces instances that are not up to date
	// (made from another instance template, Kubernetes version or bootstrap configuration than
	// the current ones), as CAPI's MachineDeployment RollingOut condition; False once every
	// instance is up to date.
	RollingOutCondition = "RollingOut"
	// RollingUpdateInProgressReason: RollingOut is True, and InstancesReady is False while
	// instances are replaced.
	RollingUpdateInProgressReason = "RollingUpdateInProgress"
	// NotRollingOutReason: every instance is up to date.
	NotRollingOutReason = "NotRollingOut"
	// InvalidStrategyReason: spec.strategy.rollingUpdate has a maxSurge or maxUnavailable that is
	// neither a non-negative integer nor a percentage; out-of-date instances are not replaced.
	InvalidStrategyReason = "InvalidStrategy"
)

// Labels and annotations on a pool's instance GoofyMachines.
const (
	// MachinePoolInstanceLabel names the GoofyMachinePool an instance GoofyMachine belongs to
	// (its name, hashed when longer than a label value may be).
	MachinePoolInstanceLabel = "goofy.infrastructure.cluster.x-k8s.io/machine-pool"
	// InstanceKubernetesVersionAnnotation is the Kubernetes version an instance was created with
	// (the MachinePool's spec.template.spec.version at the time): its Node's kubelet version.
	InstanceKubernetesVersionAnnotation = "goofy.infrastructure.cluster.x-k8s.io/kubernetes-version"
	// InstanceBootstrapDataAnnotation is the bootstrap data secret an instance joins with: the
	// MachinePool's spec.template.spec.bootstrap.dataSecretName when the instance was created.
	InstanceBootstrapDataAnnotation = "goofy.infrastructure.cluster.x-k8s.io/bootstrap-data-secret"
	// InstanceTemplateHashAnnotation is the hash of what an instance was made from: the pool's
	// spec.template, the MachinePool's Kubernetes version, bootstrap config reference and data
	// secret name. An instance whose hash differs from the current one is out of date and is
	// replaced by a rolling update.
	InstanceTemplateHashAnnotation = "goofy.infrastructure.cluster.x-k8s.io/instance-template-hash"
)

// MachinePoolStrategyType is how a pool replaces out-of-date instances.
// +kubebuilder:validation:Enum=RollingUpdate
type MachinePoolStrategyType string

// RollingUpdateMachinePoolStrategyType replaces out-of-date instances a few at a time: new ones
// first (maxSurge), old ones removed (through their Machines) as long as no more than
// maxUnavailable are missing from the desired ready instances.
const RollingUpdateMachinePoolStrategyType MachinePoolStrategyType = "RollingUpdate"

// GoofyMachinePoolStrategy is the shape of CAPZ's AzureMachinePoolDeploymentStrategy.
type GoofyMachinePoolStrategy struct {
	// type of the strategy; only RollingUpdate (the default).
	// +optional
	// +kubebuilder:default:=RollingUpdate
	Type MachinePoolStrategyType `json:"type,omitempty"`

	// rollingUpdate bounds the replacement of out-of-date instances.
	// +optional
	RollingUpdate *MachinePoolRollingUpdate `json:"rollingUpdate,omitempty"`
}

// MachinePoolRollingUpdate bounds a rolling replacement of a pool's instances, as CAPZ's
// MachineRollingUpdateDeployment does. Both may not be 0: then maxUnavailable counts as 1, as a
// Deployment's.
type MachinePoolRollingUpdate struct {
	// maxUnavailable is how many instances, an integer or a percentage of the MachinePool's
	// replicas (rounded down), may be missing from the Ready ones during the update. Default 0.
	// +optional
	// +kubebuilder:default:=0
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`

	// maxSurge is how many instances, an integer or a percentage of the MachinePool's replicas
	// (rounded up), the pool may have beyond its replicas during the update. Default 1.
	// +optional
	// +kubebuilder:default:=1
	MaxSurge *intstr.IntOrString `json:"maxSurge,omitempty"`

	// deletePolicy chooses which out-of-date instances go first, after those whose Machine has
	// the cluster.x-k8s.io/delete-machine annotation and those not Ready: Oldest or Newest.
	// Unset: spec.deletePolicy.
	// +optional
	DeletePolicy MachinePoolDeletePolicy `json:"deletePolicy,omitempty"`
}

// MachinePoolDeletePolicy chooses which instances go first when a pool scales down, after those
// whose Machine has the cluster.x-k8s.io/delete-machine annotation and those not Ready.
// +kubebuilder:validation:Enum=Oldest;Newest
type MachinePoolDeletePolicy string

// The delete policies.
const (
	// DeletePolicyOldest deletes the oldest instances first (the default).
	DeletePolicyOldest MachinePoolDeletePolicy = "Oldest"
	// DeletePolicyNewest deletes the newest instances first.
	DeletePolicyNewest MachinePoolDeletePolicy = "Newest"
)

// GoofyMachinePoolSpec defines the desired state of a GoofyMachinePool. Its number of instances
// is the owning MachinePool's spec.replicas.
type GoofyMachinePoolSpec struct {
	// providerID identifies the pool itself (goofy://<namespace>/<cluster>/machinepools/<pool>);
	// set by the controller, informational.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	ProviderID string `json:"providerID,omitempty"`

	// providerIDList is the provider IDs of the pool's instances, set by the controller: exactly
	// the spec.providerID of each instance GoofyMachine (sorted), which their Nodes carry.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=10000
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=512
	ProviderIDList []string `json:"providerIDList,omitempty"`

	// template is what each instance GoofyMachine gets. Changing it makes the existing instances
	// out of date: they are replaced as spec.strategy says.
	// +optional
	Template GoofyMachinePoolInstanceTemplate `json:"template,omitempty,omitzero"`

	// deletePolicy chooses the instances a scale-down deletes, after those whose Machine has the
	// cluster.x-k8s.io/delete-machine annotation and those not Ready: Oldest (default) or Newest.
	// +optional
	DeletePolicy MachinePoolDeletePolicy `json:"deletePolicy,omitempty"`

	// azure maps the pool to an Azure scale set when its GoofyCluster uses the Azure backend
	// (spec.backend.azure): the scale set's VMs are the pool's instances (docs/machinepools.md).
	// Ignored on the simulated backend.
	// +optional
	Azure *AzureMachinePoolBackend `json:"azure,omitempty"`

	// strategy replaces out-of-date instances (after a change of spec.template or of the
	// MachinePool's Kubernetes version or bootstrap configuration). Default: RollingUpdate with
	// maxSurge 1 and maxUnavailable 0.
	// +optional
	Strategy GoofyMachinePoolStrategy `json:"strategy,omitempty,omitzero"`

	// simulation injects faults into every instance of the pool (docs/faults.md), now and at once:
	// changing it replaces no instance. An instance whose own GoofyMachine spec.simulation is set
	// has that instead (simulation: {} exempts it from the pool's faults).
	// +optional
	Simulation *MachineSimulation `json:"simulation,omitempty"`
}

// GoofyMachinePoolInstanceTemplate is the metadata and spec of a pool's instance GoofyMachines.
type GoofyMachinePoolInstanceTemplate struct {
	// metadata is copied onto every instance GoofyMachine.
	// +optional
	ObjectMeta clusterv1.ObjectMeta `json:"metadata,omitempty,omitzero"`

	// spec of the instances.
	// +optional
	Spec GoofyMachinePoolInstanceSpec `json:"spec,omitempty,omitzero"`
}

// GoofyMachinePoolInstanceSpec is the part of a GoofyMachine's spec a pool sets on its instances.
type GoofyMachinePoolInstanceSpec struct {
	// capacity of each instance's simulated Node, as a GoofyMachine's spec.capacity.
	// +optional
	Capacity corev1.ResourceList `json:"capacity,omitempty"`

	// inMemory tunes the simulated provisioning phases of each instance.
	// +optional
	InMemory *InMemoryMachineBackend `json:"inMemory,omitempty"`
}

// GoofyMachinePoolStatus defines the observed state of a GoofyMachinePool.
type GoofyMachinePoolStatus struct {
	// initialization reports provisioning as the CAPI contract requires: provisioned turns true
	// once the pool first had the MachinePool's replicas as instances, each with its provider ID.
	// +optional
	Initialization GoofyMachinePoolInitializationStatus `json:"initialization,omitempty,omitzero"`

	// ready mirrors initialization.provisioned for CAPI v1.14's MachinePool controller, which
	// still reads an InfraMachinePool's status.ready (the deprecated v1beta1 contract field the
	// v1beta2 contract keeps supporting for now) and ignores initialization.provisioned.
	// +optional
	Ready bool `json:"ready,omitempty"`

	// replicas is the number of instances the pool has (instance GoofyMachines, including those
	// being deleted).
	// +optional
	// +kubebuilder:validation:Minimum=0
	Replicas *int32 `json:"replicas,omitempty"`

	// readyReplicas is the number of instances whose GoofyMachine is Ready.
	// +optional
	// +kubebuilder:validation:Minimum=0
	ReadyReplicas *int32 `json:"readyReplicas,omitempty"`

	// upToDateReplicas is the number of instances, not being deleted, made from the current
	// instance template, Kubernetes version and bootstrap configuration.
	// +optional
	// +kubebuilder:validation:Minimum=0
	UpToDateReplicas *int32 `json:"upToDateReplicas,omitempty"`

	// infrastructureMachineKind is GoofyMachine: the pool represents each instance as a
	// GoofyMachine, for which CAPI creates a Machine (MachinePool Machines).
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	InfrastructureMachineKind string `json:"infrastructureMachineKind,omitempty"`

	// conditions represent the observations of the GoofyMachinePool's state: Ready,
	// InstancesReady, RollingOut, ProviderIDsUnique, FaultsInjected, Paused.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// GoofyMachinePoolInitializationStatus is the CAPI v1beta2 initialization block.
// +kubebuilder:validation:MinProperties=1
type GoofyMachinePoolInitializationStatus struct {
	// provisioned is true once the pool's infrastructure is provisioned.
	// +optional
	Provisioned *bool `json:"provisioned,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=goofymachinepools,scope=Namespaced,categories=cluster-api,shortName=gfmp
// +kubebuilder:storageversion
// +kubebuilder:printcolumn:name="Cluster",type="string",JSONPath=".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']",description="Cluster"
// +kubebuilder:printcolumn:name="MachinePool",type="string",JSONPath=".metadata.ownerReferences[?(@.kind==\"MachinePool\")].name",description="Owning MachinePool"
// +kubebuilder:printcolumn:name="Replicas",type="integer",JSONPath=".status.replicas",description="Instances"
// +kubebuilder:printcolumn:name="Ready",type="integer",JSONPath=".status.readyReplicas",description="Ready instances"
// +kubebuilder:printcolumn:name="Up-to-date",type="integer",JSONPath=".status.upToDateReplicas",description="Up-to-date instances"
// +kubebuilder:printcolumn:name="Provisioned",type="boolean",JSONPath=".status.initialization.provisioned",description="Pool provisioned"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"

// GoofyMachinePool is the infrastructure of a CAPI MachinePool: one simulated instance
// (a GoofyMachine) per replica.
type GoofyMachinePool struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty,omitzero"`

	// +optional
	Spec GoofyMachinePoolSpec `json:"spec,omitempty,omitzero"`
	// +optional
	Status GoofyMachinePoolStatus `json:"status,omitempty,omitzero"`
}

// GetConditions returns the conditions, for CAPI's conditions utilities.
func (p *GoofyMachinePool) GetConditions() []metav1.Condition { return p.Status.Conditions }

// SetConditions sets the conditions, for CAPI's conditions utilities.
func (p *GoofyMachinePool) SetConditions(conditions []metav1.Condition) {
	p.Status.Conditions = conditions
}

// +kubebuilder:object:root=true

// GoofyMachinePoolList contains a list of GoofyMachinePool.
type GoofyMachinePoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GoofyMachinePool `json:"items"`
}

func init() {
	objectTypes = append(objectTypes, &GoofyMachinePool{}, &GoofyMachinePoolList{})
}
