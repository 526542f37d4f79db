package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

// GoofyClusterTemplateSpec defines the GoofyCluster a ClusterClass creates.
type GoofyClusterTemplateSpec struct {
	// template is the GoofyCluster each topology Cluster gets.
	// +required
	Template GoofyClusterTemplateResource `json:"template"`
}

// GoofyClusterTemplateResource is the template's metadata and spec.
type GoofyClusterTemplateResource struct {
	// metadata is copied onto the GoofyCluster made from the template.
	// +optional
	ObjectMeta clusterv1.ObjectMeta `json:"metadata,omitempty,omitzero"`

	// spec of the GoofyCluster.
	// +optional
	Spec GoofyClusterSpec `json:"spec,omitempty,omitzero"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:path=goofyclustertemplates,scope=Namespaced,categories=cluster-api,shortName=gfct
// +kubebuilder:storageversion
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"

// GoofyClusterTemplate is the template a ClusterClass creates GoofyClusters from.
type GoofyClusterTemplate struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty,omitzero"`

	// +required
	Spec GoofyClusterTemplateSpec `json:"spec"`
}

// +kubebuilder:object:root=true

// GoofyClusterTemplateList contains a list of GoofyClusterTemplate.
type GoofyClusterTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GoofyClusterTemplate `json:"items"`
}

func init() {
	objectTypes = append(objectTypes, &GoofyClusterTemplate{}, &GoofyClusterTemplateList{})
}
