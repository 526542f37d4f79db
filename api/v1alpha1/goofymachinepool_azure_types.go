package v1alpha1

// Condition types and reasons of a GoofyMachinePool on the Azure backend.
const (
	// ReplicasMatchScaleSetCondition is True when the MachinePool's spec.replicas equals the
	// capacity of the pool's Azure scale set, False (ReplicasMismatch) when they differ: Goofy does
	// not scale Azure, the scale set's VMs are the pool's instances, so the difference is only
	// reported. Unknown while the scale set cannot be read.
	ReplicasMatchScaleSetCondition = "ReplicasMatchScaleSet"
	// ReplicasMatchReason: the MachinePool asks for as many replicas as the scale set has.
	ReplicasMatchReason = "ReplicasMatch"
	// ReplicasMismatchReason: the MachinePool asks for another number of replicas than the scale
	// set's capacity; the pool follows the scale set.
	ReplicasMismatchReason = "ReplicasMismatch"

	// ScaleSetNotSelectedReason: the pool's GoofyCluster uses the Azure backend but the pool has
	// no spec.azure.scaleSet; it creates nothing until it has one.
	ScaleSetNotSelectedReason = "ScaleSetNotSelected"
	// ScaleSetNotFoundReason: no scale set of the cluster's resource group matches the pool's
	// spec.azure.scaleSet (it was deleted, or is not there yet). The pool keeps its instances and
	// spec.providerIDList as last seen and looks again.
	ScaleSetNotFoundReason = "ScaleSetNotFound"
	// ScaleSetAmbiguousReason: more than one scale set carries the pool's spec.azure.scaleSet.tags.
	ScaleSetAmbiguousReason = "ScaleSetAmbiguous"
)

// AzureMachinePoolBackend maps a GoofyMachinePool whose GoofyCluster uses the Azure backend to a
// virtual machine scale set (uniform or flexible) in the GoofyCluster's resource group: the
// scale set's VMs are the pool's instances, and its capacity, not the MachinePool's replicas,
// says how many there are (Goofy reads Azure, it never scales it).
type AzureMachinePoolBackend struct {
	// scaleSet selects the scale set, by name or by tags.
	// +required
	ScaleSet AzureScaleSetSelector `json:"scaleSet"`
}

// AzureScaleSetSelector selects one scale set of the GoofyCluster's resource group.
// +kubebuilder:validation:XValidation:rule="has(self.name) != has(self.tags)",message="scaleSet: set exactly one of name or tags"
type AzureScaleSetSelector struct {
	// name of the scale set.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[a-zA-Z0-9]([-a-zA-Z0-9._]*[a-zA-Z0-9_])?$`
	Name string `json:"name,omitempty"`

	// tags the scale set carries, every one of them (tag names compare case-insensitively, as in
	// ARM; values exactly). Exactly one scale set of the resource group may carry them.
	// +optional
	// +kubebuilder:validation:MinProperties=1
	// +kubebuilder:validation:MaxProperties=16
	// +kubebuilder:validation:XValidation:rule="self.all(k, size(k) >= 1 && size(k) <= 512 && size(self[k]) <= 256)",message="tags: names of 1 to 512 characters, values of at most 256"
	Tags map[string]string `json:"tags,omitempty"`
}
