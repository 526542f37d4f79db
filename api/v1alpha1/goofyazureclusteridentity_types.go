package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// GoofyAzureClusterIdentitySpec says which namespaces' GoofyClusters may use the identity, and
// the Azure cloud they reach through it with the manager's credential.
type GoofyAzureClusterIdentitySpec struct {
	// allowedNamespaces selects the namespaces whose GoofyClusters may use this identity, as
	// CAPZ's AzureClusterIdentity does: omitted, none; an empty object ({}), every namespace;
	// otherwise the namespaces named in list and those whose labels match selector.
	// +optional
	AllowedNamespaces *AllowedNamespaces `json:"allowedNamespaces,omitempty"`

	// cloud is the Azure cloud the GoofyClusters using this identity reach, a Custom one
	// (Azure Stack Hub, an ARM emulator) included; omitted, the manager's environment decides
	// (docs/azure.md).
	// +optional
	Cloud *AzureCloud `json:"cloud,omitempty"`
}

// AllowedNamespaces selects namespaces by name or by label. A namespace in list or matching
// selector is allowed; an object with neither allows every namespace.
type AllowedNamespaces struct {
	// list names allowed namespaces.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=63
	NamespaceList []string `json:"list,omitempty"`

	// selector allows the namespaces whose labels it matches; an empty selector matches none.
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:path=goofyazureclusteridentities,scope=Cluster,categories=cluster-api
// +kubebuilder:storageversion
// +kubebuilder:printcolumn:name="Cloud",type="string",JSONPath=".spec.cloud.name",description="Azure cloud"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"

// GoofyAzureClusterIdentity is the operator's grant of the manager's Azure credential, and of
// the cloud it is sent to, to the GoofyClusters of some namespaces (spec.backend.azure.identityRef).
// It is cluster-scoped: tenants who may create GoofyClusters in their namespace cannot create one.
type GoofyAzureClusterIdentity struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty,omitzero"`

	// +optional
	Spec GoofyAzureClusterIdentitySpec `json:"spec,omitempty,omitzero"`
}

// +kubebuilder:object:root=true

// GoofyAzureClusterIdentityList contains a list of GoofyAzureClusterIdentity.
type GoofyAzureClusterIdentityList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GoofyAzureClusterIdentity `json:"items"`
}

func init() {
	objectTypes = append(objectTypes, &GoofyAzureClusterIdentity{}, &GoofyAzureClusterIdentityList{})
}
