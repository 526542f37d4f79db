package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

// GoofyMachineTemplateSpec defines the machines created from this template.
type GoofyMachineTemplateSpec struct {
	// template is the GoofyMachine each Machine gets.
	// +required
	Template GoofyMachineTemplateResource `json:"template"`
}

// GoofyMachineTemplateResource is the template's metadata and spec.
type GoofyMachineTemplateResource struct {
	// metadata is copied onto every GoofyMachine made from the template.
	// +optional
	ObjectMeta clusterv1.ObjectMeta `json:"metadata,omitempty,omitzero"`

	// spec of the GoofyMachines.
	// +optional
	Spec GoofyMachineSpec `json:"spec,omitempty,omitzero"`
}

// GoofyMachineTemplateStatus is the observed state of the template.
type GoofyMachineTemplateStatus struct {
	// capacity of a machine made from this template (cpu, memory, pods, ...). It enables the
	// cluster autoscaler to scale from zero, and sets the simulated Nodes' capacity.
	// +optional
	Capacity corev1.ResourceList `json:"capacity,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=goofymachinetemplates,scope=Namespaced,categories=cluster-api,shortName=gfmt
// +kubebuilder:storageversion
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"

// GoofyMachineTemplate is the template KubeadmControlPlane and MachineDeployments create GoofyMachines from.
type GoofyMachineTemplate struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty,omitzero"`

	// +required
	Spec GoofyMachineTemplateSpec `json:"spec"`
	// +optional
	Status GoofyMachineTemplateStatus `json:"status,omitempty,omitzero"`
}

// +kubebuilder:object:root=true

// GoofyMachineTemplateList contains a list of GoofyMachineTemplate.
type GoofyMachineTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GoofyMachineTemplate `json:"items"`
}

func init() {
	objectTypes = append(objectTypes, &GoofyMachineTemplate{}, &GoofyMachineTemplateList{})
}
