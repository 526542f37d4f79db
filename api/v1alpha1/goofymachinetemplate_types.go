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

// GoofyMachineTemplateStatus is the observed state of the template: what CAPI's contract for
// autoscaling from zero asks of an infrastructure machine template, filled by the controller.
type GoofyMachineTemplateStatus struct {
	// capacity of a machine made from this template: spec.template.spec.capacity over the
	// simulated Node's defaults, exactly the capacity its Nodes get. The cluster autoscaler reads
	// it to scale a MachineDeployment up from zero.
	// +optional
	Capacity corev1.ResourceList `json:"capacity,omitempty"`

	// nodeInfo is the architecture and operating system of the template's simulated Nodes.
	// +optional
	NodeInfo NodeInfo `json:"nodeInfo,omitempty,omitzero"`
}

// Architecture is a Node's CPU architecture, as in CAPI's contract: amd64, arm64, s390x or ppc64le.
// +kubebuilder:validation:Enum=amd64;arm64;s390x;ppc64le
type Architecture string

// The architectures CAPI's contract names.
const (
	ArchitectureAmd64   Architecture = "amd64"
	ArchitectureArm64   Architecture = "arm64"
	ArchitectureS390x   Architecture = "s390x"
	ArchitecturePpc64le Architecture = "ppc64le"
)

// NodeInfo is the architecture and operating system of a machine's Node.
// +kubebuilder:validation:MinProperties=1
type NodeInfo struct {
	// architecture is the Node's CPU architecture (its kubernetes.io/arch label).
	// +optional
	Architecture Architecture `json:"architecture,omitempty"`

	// operatingSystem is the Node's operating system, e.g. linux or windows (its kubernetes.io/os
	// label).
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	OperatingSystem string `json:"operatingSystem,omitempty"`
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
