// Package azure is Goofy's Azure backend: it discovers the VM instances of a cluster through Azure
// Resource Manager (ARM), identifies the instance it runs on through the Instance Metadata Service
// (IMDS), finds the cluster's load-balancer endpoint, and prepares control-plane nodes behind an
// internal load balancer.
//
// The package follows CAPZ's split: Cloud is the scope (subscription, resource group, cluster UID,
// credential, clients); instances.go, loadbalancer.go and hairpin.go are the services, each behind
// the narrow SDK interfaces declared below. Everything is read-only in Azure.
package azure

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/azure/metadata"
)

// Default tag keys. ARM compares tag names case-insensitively, and so does this package.
const (
	DefaultUIDTagKey            = "goofy-uid"
	DefaultRoleTagKey           = "goofy-role"
	DefaultInitSecretHashTagKey = "goofy-init-secret-hash"
)

// TagKeys names the tags that tie Azure resources to a cluster. Empty fields take the defaults.
type TagKeys struct {
	// UID marks VMs, scale sets and the load balancer of one cluster; its value is the cluster UID.
	UID string
	// Role says "control-plane" or "worker" on each VM or scale set.
	Role string
	// InitSecretHash carries the hash of the cluster's init secret on its VMs.
	InitSecretHash string
}

func (k TagKeys) withDefaults() TagKeys {
	if k.UID == "" {
		k.UID = DefaultUIDTagKey
	}
	if k.Role == "" {
		k.Role = DefaultRoleTagKey
	}
	if k.InitSecretHash == "" {
		k.InitSecretHash = DefaultInitSecretHashTagKey
	}
	return k
}

// Config is the explicit configuration of a Cloud, e.g. built by the controller from a
// GoofyCluster's spec.backend.azure.
type Config struct {
	// SubscriptionID, ResourceGroup and ClusterUID say where the cluster's resources are and which
	// of them belong to it. When one is empty and IMDS is set, it is read from IMDS (the
	// subscription and resource group of this VM, the value of its UID tag); otherwise it is required.
	SubscriptionID string
	ResourceGroup  string
	ClusterUID     string

	// Cloud chooses the Azure cloud. When it is zero (and ClientOptions.Cloud is too), the
	// environment decides (CloudSpecFromEnv), then IMDS's azEnvironment if IMDS is being asked
	// anyway, and finally the public cloud.
	Cloud CloudSpec

	// Credential authenticates ARM requests; nil means azidentity.NewDefaultAzureCredential, which
	// honours the AZURE_* variables, workload identity and managed identity.
	Credential azcore.TokenCredential

	// ClientOptions configure the ARM clients (transport, retry, cloud). They are copied; unset
	// retry fields get DefaultARMRetry's values.
	ClientOptions *arm.ClientOptions

	// TagKeys names the tags; zero fields take the defaults.
	TagKeys TagKeys

	// IMDS is used by Self, InitSecretHash and PrepareControlPlaneNode (and to fill empty fields
	// above). Nil means NewIMDSClient(), created lazily, so code off Azure never touches it unless
	// it calls those methods.
	IMDS *IMDSClient

	// IPTables programs the hairpin rule in PrepareControlPlaneNode; nil means the system's
	// iptables (Linux only) through github.com/coreos/go-iptables.
	IPTables IPTables

	// Logger receives the reasons VMs are skipped and what PrepareControlPlaneNode did; nil discards.
	Logger *slog.Logger
}

// DefaultARMRetry is applied to unset fields of ClientOptions.Retry. ARM answers 429 with a
// Retry-After of up to a minute or so; the SDK honours it only below MaxRetryDelay. StatusCodes is
// left to the SDK's default: 408, 429, 500, 502, 503 and 504.
var DefaultARMRetry = policy.RetryOptions{
	MaxRetries:    5,
	RetryDelay:    2 * time.Second,
	MaxRetryDelay: 90 * time.Second,
	TryTimeout:    time.Minute,
}

// The narrow slices of the SDK clients the services use.
type (
	vmLister interface {
		NewListPager(resourceGroupName string, options *armcompute.VirtualMachinesClientListOptions) *runtime.Pager[armcompute.VirtualMachinesClientListResponse]
	}
	scaleSetLister interface {
		NewListPager(resourceGroupName string, options *armcompute.VirtualMachineScaleSetsClientListOptions) *runtime.Pager[armcompute.VirtualMachineScaleSetsClientListResponse]
		Get(ctx context.Context, resourceGroupName, scaleSetName string, options *armcompute.VirtualMachineScaleSetsClientGetOptions) (armcompute.VirtualMachineScaleSetsClientGetResponse, error)
	}
	scaleSetVMLister interface {
		NewListPager(resourceGroupName, scaleSetName string, options *armcompute.VirtualMachineScaleSetVMsClientListOptions) *runtime.Pager[armcompute.VirtualMachineScaleSetVMsClientListResponse]
	}
	interfaceReader interface {
		Get(ctx context.Context, resourceGroupName, nicName string, options *armnetwork.InterfacesClientGetOptions) (armnetwork.InterfacesClientGetResponse, error)
		GetVirtualMachineScaleSetNetworkInterface(ctx context.Context, resourceGroupName, scaleSetName, instanceID, nicName string, options *armnetwork.InterfacesClientGetVirtualMachineScaleSetNetworkInterfaceOptions) (armnetwork.InterfacesClientGetVirtualMachineScaleSetNetworkInterfaceResponse, error)
		NewListVirtualMachineScaleSetVMNetworkInterfacesPager(resourceGroupName, scaleSetName, instanceID string, options *armnetwork.InterfacesClientListVirtualMachineScaleSetVMNetworkInterfacesOptions) *runtime.Pager[armnetwork.InterfacesClientListVirtualMachineScaleSetVMNetworkInterfacesResponse]
		NewListVirtualMachineScaleSetNetworkInterfacesPager(resourceGroupName, scaleSetName string, options *armnetwork.InterfacesClientListVirtualMachineScaleSetNetworkInterfacesOptions) *runtime.Pager[armnetwork.InterfacesClientListVirtualMachineScaleSetNetworkInterfacesResponse]
		NewListPager(resourceGroupName string, options *armnetwork.InterfacesClientListOptions) *runtime.Pager[armnetwork.InterfacesClientListResponse]
	}
	loadBalancerLister interface {
		NewListPager(resourceGroupName string, options *armnetwork.LoadBalancersClientListOptions) *runtime.Pager[armnetwork.LoadBalancersClientListResponse]
	}
	publicIPReader interface {
		Get(ctx context.Context, resourceGroupName, publicIPName string, options *armnetwork.PublicIPAddressesClientGetOptions) (armnetwork.PublicIPAddressesClientGetResponse, error)
	}
)

// Cloud answers questions about one cluster's resources in one resource group. It is safe for
// concurrent use; create one per cluster and reuse it.
type Cloud struct {
	subscriptionID string
	resourceGroup  string
	uid            string
	tags           TagKeys
	log            *slog.Logger
	imds           *IMDSClient
	ipt            IPTables

	vms           vmLister
	scaleSets     scaleSetLister
	scaleSetVMs   scaleSetVMLister
	interfaces    interfaceReader
	loadBalancers loadBalancerLister
	publicIPs     publicIPReader
}

// New creates a Cloud for code running on an Azure VM: subscription, resource group and cluster
// UID (the VM's UID tag) come from IMDS, the cloud from AZURE_ENVIRONMENT or IMDS, the credential
// from azidentity's default chain (managed identity on a VM).
func New(ctx context.Context) (*Cloud, error) {
	return NewWithConfig(ctx, Config{IMDS: NewIMDSClient()})
}

// NewWithConfig creates a Cloud from explicit configuration (see Config). It makes no ARM call;
// it asks IMDS only for fields left empty when cfg.IMDS is set.
func NewWithConfig(ctx context.Context, cfg Config) (*Cloud, error) {
	c := &Cloud{
		subscriptionID: cfg.SubscriptionID,
		resourceGroup:  cfg.ResourceGroup,
		uid:            cfg.ClusterUID,
		tags:           cfg.TagKeys.withDefaults(),
		log:            cfg.Logger,
		imds:           cfg.IMDS,
		ipt:            cfg.IPTables,
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	askIMDS := cfg.IMDS != nil && (c.subscriptionID == "" || c.resourceGroup == "" || c.uid == "")
	if askIMDS {
		if err := c.fillFromIMDS(ctx); err != nil {
			return nil, err
		}
	}
	var missing []string
	for _, f := range []struct{ name, value string }{
		{"subscription ID", c.subscriptionID}, {"resource group", c.resourceGroup}, {"cluster UID", c.uid},
	} {
		if strings.TrimSpace(f.value) == "" {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("azure: missing %s (set it in the configuration or let IMDS fill it on an Azure VM)", strings.Join(missing, ", "))
	}
	if c.imds == nil {
		c.imds = NewIMDSClient()
	}

	opts, err := armClientOptions(ctx, cfg, askIMDS)
	if err != nil {
		return nil, err
	}
	cred := cfg.Credential
	if cred == nil {
		cred, err = azidentity.NewDefaultAzureCredential(&azidentity.DefaultAzureCredentialOptions{ClientOptions: opts.ClientOptions})
		if err != nil {
			return nil, fmt.Errorf("azure: creating the default credential: %w", err)
		}
	}
	compute, err := armcompute.NewClientFactory(c.subscriptionID, cred, opts)
	if err != nil {
		return nil, fmt.Errorf("azure: creating compute clients: %w", err)
	}
	network, err := armnetwork.NewClientFactory(c.subscriptionID, cred, opts)
	if err != nil {
		return nil, fmt.Errorf("azure: creating network clients: %w", err)
	}
	c.vms = compute.NewVirtualMachinesClient()
	c.scaleSets = compute.NewVirtualMachineScaleSetsClient()
	c.scaleSetVMs = compute.NewVirtualMachineScaleSetVMsClient()
	c.interfaces = network.NewInterfacesClient()
	c.loadBalancers = network.NewLoadBalancersClient()
	c.publicIPs = network.NewPublicIPAddressesClient()
	return c, nil
}

// fillFromIMDS reads the empty subscription, resource group and UID from IMDS.
func (c *Cloud) fillFromIMDS(ctx context.Context) error {
	var err error
	if c.subscriptionID == "" {
		if c.subscriptionID, err = c.imds.SubscriptionID(ctx); err != nil {
			return fmt.Errorf("azure: %w", err)
		}
	}
	if c.resourceGroup == "" {
		if c.resourceGroup, err = c.imds.ResourceGroup(ctx); err != nil {
			return fmt.Errorf("azure: %w", err)
		}
	}
	if c.uid == "" {
		tags, err := c.imds.Tags(ctx)
		if err != nil {
			return fmt.Errorf("azure: %w", err)
		}
		uid, _ := tagValue(stringPtrs(tags), c.tags.UID)
		if strings.TrimSpace(uid) == "" {
			return fmt.Errorf("azure: this VM has no (or an empty) %q tag, so its cluster is unknown", c.tags.UID)
		}
		c.uid = uid
	}
	return nil
}

// armClientOptions copies the caller's options and fills in the cloud and retry defaults.
func armClientOptions(ctx context.Context, cfg Config, askIMDS bool) (*arm.ClientOptions, error) {
	opts := &arm.ClientOptions{}
	if cfg.ClientOptions != nil {
		opts = cfg.ClientOptions.Clone()
	}
	if reflect.ValueOf(opts.Cloud).IsZero() {
		spec := cfg.Cloud
		if spec.IsZero() {
			spec = CloudSpecFromEnv()
		}
		if spec.IsZero() && askIMDS {
			env, err := cfg.IMDS.AzEnvironment(ctx)
			if err != nil {
				return nil, fmt.Errorf("azure: %w", err)
			}
			spec.Name = env
		}
		conf, err := spec.Configuration()
		if err != nil {
			return nil, fmt.Errorf("azure: %w", err)
		}
		opts.Cloud = conf
	}
	if opts.Retry.MaxRetries == 0 {
		opts.Retry.MaxRetries = DefaultARMRetry.MaxRetries
	}
	if opts.Retry.RetryDelay == 0 {
		opts.Retry.RetryDelay = DefaultARMRetry.RetryDelay
	}
	if opts.Retry.MaxRetryDelay == 0 {
		opts.Retry.MaxRetryDelay = DefaultARMRetry.MaxRetryDelay
	}
	if opts.Retry.TryTimeout == 0 {
		opts.Retry.TryTimeout = DefaultARMRetry.TryTimeout
	}
	// The package only reads; a Reader cannot register resource providers anyway.
	opts.DisableRPRegistration = true
	return opts, nil
}

// UID returns the cluster UID whose tag selects the cluster's resources.
func (c *Cloud) UID(ctx context.Context) (string, error) {
	return c.uid, nil
}

// Self describes the instance this code runs on, from IMDS alone (no ARM call): its host name,
// provider ID, role tag, the private IPs of its first network interface and its zone.
func (c *Cloud) Self(ctx context.Context) (metadata.InstanceMetadata, error) {
	name, err := c.imds.Name(ctx)
	if err != nil {
		return metadata.InstanceMetadata{}, fmt.Errorf("azure: self: %w", err)
	}
	providerID, err := c.imds.ProviderID(ctx)
	if err != nil {
		return metadata.InstanceMetadata{}, fmt.Errorf("azure: self: %w", err)
	}
	tags, err := c.imds.Tags(ctx)
	if err != nil {
		return metadata.InstanceMetadata{}, fmt.Errorf("azure: self: %w", err)
	}
	roleTag, _ := tagValue(stringPtrs(tags), c.tags.Role)
	role, err := metadata.ParseRole(roleTag)
	if err != nil {
		return metadata.InstanceMetadata{}, fmt.Errorf("azure: self: tag %q: %w", c.tags.Role, err)
	}
	ips, err := c.imds.PrivateIPs(ctx)
	if err != nil {
		return metadata.InstanceMetadata{}, fmt.Errorf("azure: self: %w", err)
	}
	zone, err := c.imds.Zone(ctx)
	if err != nil {
		return metadata.InstanceMetadata{}, fmt.Errorf("azure: self: %w", err)
	}
	return metadata.InstanceMetadata{
		Name:          name,
		ProviderID:    providerID,
		Role:          role,
		VPCIP:         ips[0],
		AliasIPRanges: hostPrefixes(ips[1:]),
		Zone:          zone,
	}, nil
}

// InitSecretHash returns the value of the init-secret-hash tag of the instance this code runs on
// (read from IMDS), as bytes. Every instance of a cluster carries the same value; the node uses it
// to check the init secret it is handed. A missing or empty tag is an error.
func (c *Cloud) InitSecretHash(ctx context.Context) ([]byte, error) {
	tags, err := c.imds.Tags(ctx)
	if err != nil {
		return nil, fmt.Errorf("azure: init secret hash: %w", err)
	}
	v, ok := tagValue(stringPtrs(tags), c.tags.InitSecretHash)
	if !ok {
		return nil, fmt.Errorf("azure: this VM has no %q tag", c.tags.InitSecretHash)
	}
	if v == "" {
		return nil, fmt.Errorf("azure: this VM's %q tag is empty", c.tags.InitSecretHash)
	}
	return []byte(v), nil
}

// isNotFound reports whether ARM answered 404.
func isNotFound(err error) bool {
	var respErr *azcore.ResponseError
	return errors.As(err, &respErr) && respErr.StatusCode == 404
}

func stringPtrs(m map[string]string) map[string]*string {
	out := make(map[string]*string, len(m))
	for k, v := range m {
		out[k] = &v
	}
	return out
}
