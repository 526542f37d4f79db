package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

// ClusterFinalizer lets the GoofyCluster reconciler release the listener and the workload store.
const ClusterFinalizer = "goofycluster.infrastructure.cluster.x-k8s.io"

// GoofyClusterSpec defines the desired state of a GoofyCluster.
type GoofyClusterSpec struct {
	// controlPlaneEndpoint is the endpoint of the simulated workload cluster's API server. It is set
	// by the controller once a port is reserved; a value set by the user is kept.
	// +optional
	ControlPlaneEndpoint clusterv1.APIEndpoint `json:"controlPlaneEndpoint,omitempty,omitzero"`

	// backend selects how the cluster's machines are provided: simulated in memory (the default)
	// or bound to instances discovered in Azure.
	// +optional
	// +kubebuilder:default={inMemory:{}}
	Backend GoofyClusterBackend `json:"backend,omitempty,omitzero"`

	// failureDomains are the failure domains the in-memory backend advertises.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=100
	FailureDomains []GoofyFailureDomain `json:"failureDomains,omitempty"`

	// simulation injects faults into the simulated workload cluster (docs/faults.md) and
	// configures its workloads (docs/workloads.md).
	// +optional
	Simulation *ClusterSimulation `json:"simulation,omitempty"`
}

// GoofyClusterBackend holds exactly one backend; empty means inMemory.
// +kubebuilder:validation:XValidation:rule="!(has(self.inMemory) && has(self.azure))",message="backend: set exactly one of inMemory or azure"
type GoofyClusterBackend struct {
	// inMemory simulates the cluster's machines in the provider process.
	// +optional
	InMemory *InMemoryClusterBackend `json:"inMemory,omitempty"`

	// azure binds the cluster's machines to VM instances discovered in Azure Resource Manager.
	// +optional
	Azure *AzureClusterBackend `json:"azure,omitempty"`
}

// InMemoryClusterBackend has no settings yet; its presence selects the backend.
type InMemoryClusterBackend struct{}

// AzureClusterBackend says where the cluster's instances live in Azure.
// +kubebuilder:validation:XValidation:rule="!(has(self.identityRef) && has(self.cloud))",message="azure: the cloud comes from the identity when identityRef is set; omit cloud"
type AzureClusterBackend struct {
	// subscriptionID is the Azure subscription holding the resource group.
	// +required
	// +kubebuilder:validation:Pattern=`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`
	SubscriptionID string `json:"subscriptionID"`

	// resourceGroup holds the cluster's VMs, scale sets and load balancer.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=90
	// +kubebuilder:validation:Pattern=`^[-\w\._\(\)]*[-\w_\(\)]$`
	ResourceGroup string `json:"resourceGroup"`

	// clusterUID is the value of the UID tag that marks the cluster's instances and load balancer.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	ClusterUID string `json:"clusterUID"`

	// identityRef names the GoofyAzureClusterIdentity the operator created for this cluster's
	// namespace: the manager sends its Azure credential only to the cloud that identity names.
	// Omitted, the manager's own cloud (its environment, docs/azure.md) is used, and only in the
	// namespaces the operator names in the manager's --azure-default-credential-namespaces
	// (none by default): elsewhere the GoofyCluster is refused with the AzureIdentityRequired
	// reason, and the manager sends no request.
	// +optional
	IdentityRef *GoofyAzureClusterIdentityReference `json:"identityRef,omitempty"`

	// cloud selects one of Azure's public clouds; omitted, the manager's own cloud. Custom
	// clouds come only from a GoofyAzureClusterIdentity (identityRef) or the manager's
	// environment: a GoofyCluster naming one itself is refused with the AzureCustomCloudNotAllowed
	// reason, and the manager sends no request.
	// +optional
	Cloud *AzureCloud `json:"cloud,omitempty"`
}

// GoofyAzureClusterIdentityReference names a GoofyAzureClusterIdentity.
type GoofyAzureClusterIdentityReference struct {
	// name of the GoofyAzureClusterIdentity.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// AzureCloudName names a known Azure cloud, or Custom for an explicit endpoint.
// +kubebuilder:validation:Enum=AzurePublicCloud;AzureChinaCloud;AzureUSGovernmentCloud;Custom
type AzureCloudName string

const (
	AzurePublicCloud       AzureCloudName = "AzurePublicCloud"
	AzureChinaCloud        AzureCloudName = "AzureChinaCloud"
	AzureUSGovernmentCloud AzureCloudName = "AzureUSGovernmentCloud"
	AzureCustomCloud       AzureCloudName = "Custom"
)

// AzureCloud selects the ARM endpoint and token audience.
// +kubebuilder:validation:XValidation:rule="self.name != 'Custom' || (has(self.resourceManagerEndpoint) && has(self.resourceManagerAudience) && has(self.activeDirectoryAuthorityHost))",message="cloud: name Custom requires resourceManagerEndpoint, resourceManagerAudience and activeDirectoryAuthorityHost"
type AzureCloud struct {
	// name of the cloud.
	// +required
	Name AzureCloudName `json:"name"`

	// resourceManagerEndpoint is the ARM endpoint URL of a Custom cloud (Azure Stack Hub, an emulator).
	// +optional
	// +kubebuilder:validation:Pattern=`^https?://`
	// +kubebuilder:validation:MaxLength=512
	ResourceManagerEndpoint string `json:"resourceManagerEndpoint,omitempty"`

	// resourceManagerAudience is the token audience of a Custom cloud's ARM endpoint.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	ResourceManagerAudience string `json:"resourceManagerAudience,omitempty"`

	// activeDirectoryAuthorityHost is the Entra ID authority of a Custom cloud.
	// +optional
	// +kubebuilder:validation:Pattern=`^https?://`
	// +kubebuilder:validation:MaxLength=512
	ActiveDirectoryAuthorityHost string `json:"activeDirectoryAuthorityHost,omitempty"`
}

// GoofyFailureDomain is a failure domain the in-memory backend advertises.
type GoofyFailureDomain struct {
	// name of the failure domain.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Name string `json:"name"`

	// controlPlane says whether control-plane machines may be placed here.
	// +optional
	ControlPlane *bool `json:"controlPlane,omitempty"`

	// attributes are free-form labels of the failure domain.
	// +optional
	Attributes map[string]string `json:"attributes,omitempty"`
}

// GoofyClusterStatus defines the observed state of a GoofyCluster.
type GoofyClusterStatus struct {
	// initialization reports provisioning as the CAPI contract requires.
	// +optional
	Initialization GoofyClusterInitializationStatus `json:"initialization,omitempty,omitzero"`

	// failureDomains are the failure domains machines can be placed in.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=100
	FailureDomains []clusterv1.FailureDomain `json:"failureDomains,omitempty"`

	// loadBalancerEndpoint is the Azure load balancer's API endpoint (azure backend only).
	// +optional
	LoadBalancerEndpoint *clusterv1.APIEndpoint `json:"loadBalancerEndpoint,omitempty"`

	// conditions represent the observations of the GoofyCluster's state.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// GoofyClusterInitializationStatus is the CAPI v1beta2 initialization block.
type GoofyClusterInitializationStatus struct {
	// provisioned is true once the endpoint is reserved and served.
	// +optional
	Provisioned *bool `json:"provisioned,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=goofyclusters,scope=Namespaced,categories=cluster-api,shortName=gfc
// +kubebuilder:storageversion
// +kubebuilder:printcolumn:name="Cluster",type="string",JSONPath=".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']",description="Cluster"
// +kubebuilder:printcolumn:name="Host",type="string",JSONPath=".spec.controlPlaneEndpoint.host",description="API endpoint host"
// +kubebuilder:printcolumn:name="Port",type="integer",JSONPath=".spec.controlPlaneEndpoint.port",description="API endpoint port"
// +kubebuilder:printcolumn:name="Provisioned",type="boolean",JSONPath=".status.initialization.provisioned",description="Infrastructure provisioned"
// +kubebuilder:printcolumn:name="Ready",type="string",JSONPath=`.status.conditions[?(@.type=="Ready")].status`,description="Ready condition"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"

// GoofyCluster is the infrastructure of one simulated (or Azure-backed) workload cluster.
type GoofyCluster struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty,omitzero"`

	// +optional
	Spec GoofyClusterSpec `json:"spec,omitempty,omitzero"`
	// +optional
	Status GoofyClusterStatus `json:"status,omitempty,omitzero"`
}

// GetConditions returns the conditions, for CAPI's conditions utilities.
func (c *GoofyCluster) GetConditions() []metav1.Condition { return c.Status.Conditions }

// SetConditions sets the conditions, for CAPI's conditions utilities.
func (c *GoofyCluster) SetConditions(conditions []metav1.Condition) { c.Status.Conditions = conditions }

// +kubebuilder:object:root=true

// GoofyClusterList contains a list of GoofyCluster.
type GoofyClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GoofyCluster `json:"items"`
}

func init() {
	objectTypes = append(objectTypes, &GoofyCluster{}, &GoofyClusterList{})
}
