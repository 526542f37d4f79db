package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

// GoofyMachinePoolTemplateSpec defines the GoofyMachinePools created from this template.
type GoofyMachinePoolTemplateSpec struct {
	// template is the GoofyMachinePool each MachinePool gets.
	// +required
	Template GoofyMachinePoolTemplateResource `json:"template"`
}

// GoofyMachinePoolTemplateResource is the template's metadata and spec.
type GoofyMachinePoolTemplateResource struct {
	// metadata is copied onto every GoofyMachinePool made from the template.
	// +optional
	ObjectMeta clusterv1.ObjectMeta `json:"metadata,omitempty,omitzero"`

	// spec of the GoofyMachinePools.
	// +optional
	Spec GoofyMachinePoolSpec `json:"spec,omitempty,omitzero"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:path=goofymachinepooltemplates,scope=Namespaced,categories=cluster-api,shortName=gfmpt
// +kubebuilder:storageversion
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"

// GoofyMachinePoolTemplate is the template a ClusterClass creates GoofyMachinePools from.
type GoofyMachinePoolTemplate struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty,omitzero"`

	// +required
	Spec GoofyMachinePoolTemplateSpec `json:"spec"`
}

// +kubebuilder:object:root=true

// GoofyMachinePoolTemplateList contains a list of GoofyMachinePoolTemplate.
type GoofyMachinePoolTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GoofyMachinePoolTemplate `json:"items"`
}

func init() {
	objectTypes = append(objectTypes, &GoofyMachinePoolTemplate{}, &GoofyMachinePoolTemplateList{})
}
