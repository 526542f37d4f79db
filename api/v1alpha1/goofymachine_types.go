package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

// MachineFinalizer lets the GoofyMachine reconciler tear down the simulated node and control plane.
const MachineFinalizer = "goofymachine.infrastructure.cluster.x-k8s.io"

// GoofyMachineSpec defines the desired state of a GoofyMachine.
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.providerID) || (has(self.providerID) && self.providerID == oldSelf.providerID)",message="providerID is immutable once set",fieldPath=".providerID"
type GoofyMachineSpec struct {
	// providerID is the machine's identity, equal to its Node's spec.providerID. Set by the
	// controller (goofy://<namespace>/<cluster>/<machine>, or azure://... on Azure); immutable once set.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	ProviderID string `json:"providerID,omitempty"`

	// backend configures how this machine is provided; it follows the GoofyCluster's backend.
	// +optional
	Backend GoofyMachineBackend `json:"backend,omitempty,omitzero"`

	// capacity of the machine's simulated Node (cpu, memory, pods, ephemeral-storage, or extended
	// resources such as nvidia.com/gpu), also its allocatable. Resources it does not name keep the
	// defaults: 2 CPUs, 8Gi of memory, 110 pods, 100Gi of ephemeral storage. On a
	// GoofyMachineTemplate it is reported in status.capacity for the cluster autoscaler.
	// +optional
	Capacity corev1.ResourceList `json:"capacity,omitempty"`

	// simulation injects faults into the simulated machine (docs/faults.md).
	// +optional
	Simulation *MachineSimulation `json:"simulation,omitempty"`
}

// GoofyMachineBackend holds at most one backend.
// +kubebuilder:validation:XValidation:rule="!(has(self.inMemory) && has(self.azure))",message="backend: set exactly one of inMemory or azure"
type GoofyMachineBackend struct {
	// inMemory tunes the simulated provisioning phases.
	// +optional
	InMemory *InMemoryMachineBackend `json:"inMemory,omitempty"`

	// azure binds the machine to a discovered Azure instance.
	// +optional
	Azure *AzureMachineBackend `json:"azure,omitempty"`
}

// InMemoryMachineBackend sets the duration of each simulated phase.
type InMemoryMachineBackend struct {
	// vm is the phase that creates the simulated VM.
	// +optional
	VM PhaseSpec `json:"vm,omitempty,omitzero"`
	// node is the phase that registers the Node.
	// +optional
	Node PhaseSpec `json:"node,omitempty,omitzero"`
	// apiServer is the phase that starts the API server (control plane only).
	// +optional
	APIServer PhaseSpec `json:"apiServer,omitempty,omitzero"`
	// etcd is the phase that adds the etcd member (control plane only).
	// +optional
	Etcd PhaseSpec `json:"etcd,omitempty,omitzero"`
}

// PhaseSpec wraps the provisioning settings of one phase.
type PhaseSpec struct {
	// provisioning sets how long the phase takes.
	// +optional
	Provisioning ProvisioningSpec `json:"provisioning,omitempty,omitzero"`
}

// ProvisioningSpec is the simulated duration of a phase: startupDuration plus a uniform random
// share of it, up to startupJitter (0.2 = up to 20 % longer).
type ProvisioningSpec struct {
	// startupDuration is the phase's base duration; zero makes the phase immediate.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="startupDuration must be a duration >= 0"
	StartupDuration metav1.Duration `json:"startupDuration,omitempty,omitzero"`

	// startupJitter is a decimal in [0,1], e.g. "0.2".
	// +optional
	// +kubebuilder:validation:Pattern=`^(0(\.[0-9]+)?|1(\.0+)?|\.[0-9]+)$`
	// +kubebuilder:validation:MaxLength=16
	StartupJitter string `json:"startupJitter,omitempty"`
}

// AzureMachineBackend has no settings yet; the machine binds to an instance of its cluster.
type AzureMachineBackend struct{}

// GoofyMachineStatus defines the observed state of a GoofyMachine.
type GoofyMachineStatus struct {
	// initialization reports provisioning as the CAPI contract requires.
	// +optional
	Initialization GoofyMachineInitializationStatus `json:"initialization,omitempty,omitzero"`

	// addresses of the machine (Hostname, InternalIP).
	// +optional
	// +kubebuilder:validation:MaxItems=32
	Addresses []clusterv1.MachineAddress `json:"addresses,omitempty"`

	// failureDomain the machine was placed in.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	FailureDomain string `json:"failureDomain,omitempty"`

	// conditions represent the observations of the GoofyMachine's state.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// GoofyMachineInitializationStatus is the CAPI v1beta2 initialization block.
type GoofyMachineInitializationStatus struct {
	// provisioned is true once the VM exists and spec.providerID is set.
	// +optional
	Provisioned *bool `json:"provisioned,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=goofymachines,scope=Namespaced,categories=cluster-api,shortName=gfm
// +kubebuilder:storageversion
// +kubebuilder:printcolumn:name="Cluster",type="string",JSONPath=".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']",description="Cluster"
// +kubebuilder:printcolumn:name="Machine",type="string",JSONPath=".metadata.ownerReferences[?(@.kind==\"Machine\")].name",description="Owning Machine"
// +kubebuilder:printcolumn:name="ProviderID",type="string",JSONPath=".spec.providerID",description="Provider ID"
// +kubebuilder:printcolumn:name="Provisioned",type="boolean",JSONPath=".status.initialization.provisioned",description="VM provisioned"
// +kubebuilder:printcolumn:name="Ready",type="string",JSONPath=`.status.conditions[?(@.type=="Ready")].status`,description="Ready condition"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"

// GoofyMachine is one simulated (or Azure-bound) machine of a workload cluster.
type GoofyMachine struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty,omitzero"`

	// +optional
	Spec GoofyMachineSpec `json:"spec,omitempty,omitzero"`
	// +optional
	Status GoofyMachineStatus `json:"status,omitempty,omitzero"`
}

// GetConditions returns the conditions, for CAPI's conditions utilities.
func (m *GoofyMachine) GetConditions() []metav1.Condition { return m.Status.Conditions }

// SetConditions sets the conditions, for CAPI's conditions utilities.
func (m *GoofyMachine) SetConditions(conditions []metav1.Condition) { m.Status.Conditions = conditions }

// +kubebuilder:object:root=true

// GoofyMachineList contains a list of GoofyMachine.
type GoofyMachineList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GoofyMachine `json:"items"`
}

func init() {
	objectTypes = append(objectTypes, &GoofyMachine{}, &GoofyMachineList{})
}
