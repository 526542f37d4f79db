package azure

import (
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/cloud"
)

// Cloud names, as spelled in the GoofyCluster's spec.backend.azure.cloud.name and in the
// AZURE_ENVIRONMENT variable (the names IMDS reports in compute.azEnvironment).
const (
	CloudPublic       = "AzurePublicCloud"
	CloudChina        = "AzureChinaCloud"
	CloudUSGovernment = "AzureUSGovernmentCloud"
	CloudCustom       = "Custom"
)

// Environment variables that choose the cloud when the configuration does not.
const (
	// EnvEnvironment names the cloud, as cloud-provider-azure, CAPZ and go-autorest read it.
	EnvEnvironment = "AZURE_ENVIRONMENT"
	// EnvResourceManagerEndpoint is the ARM endpoint of a custom cloud (Azure Stack Hub, an emulator).
	EnvResourceManagerEndpoint = "GOOFY_AZURE_RESOURCE_MANAGER_ENDPOINT"
	// EnvResourceManagerAudience is the token audience of a custom cloud's ARM endpoint.
	EnvResourceManagerAudience = "GOOFY_AZURE_RESOURCE_MANAGER_AUDIENCE"
	// EnvAuthorityHost is the Microsoft Entra authority host; azidentity reads it too.
	EnvAuthorityHost = "AZURE_AUTHORITY_HOST"
)

// CloudSpec chooses the Azure cloud. It mirrors spec.backend.azure.cloud of a GoofyCluster.
// The zero value means "not chosen": the environment decides, and Azure public cloud is the default.
type CloudSpec struct {
	// Name is one of CloudPublic, CloudChina, CloudUSGovernment or CloudCustom (case-insensitive;
	// the Azure CLI spellings AzureCloud and AzureUSGovernment are accepted too).
	Name string
	// ResourceManagerEndpoint is the ARM base URL; required for CloudCustom, ignored otherwise.
	ResourceManagerEndpoint string
	// ResourceManagerAudience is the audience of ARM tokens; for CloudCustom it defaults to the endpoint.
	ResourceManagerAudience string
	// ActiveDirectoryAuthorityHost is the authority host for CloudCustom. Empty leaves it to azidentity,
	// which then reads AZURE_AUTHORITY_HOST (and falls back to the public cloud's host).
	ActiveDirectoryAuthorityHost string
}

// IsZero reports whether nothing was chosen.
func (s CloudSpec) IsZero() bool { return s == CloudSpec{} }

// CloudSpecFromEnv reads the cloud from AZURE_ENVIRONMENT and, for a custom cloud,
// GOOFY_AZURE_RESOURCE_MANAGER_ENDPOINT, GOOFY_AZURE_RESOURCE_MANAGER_AUDIENCE and AZURE_AUTHORITY_HOST.
// A set GOOFY_AZURE_RESOURCE_MANAGER_ENDPOINT without AZURE_ENVIRONMENT also means a custom cloud.
func CloudSpecFromEnv() CloudSpec {
	spec := CloudSpec{Name: os.Getenv(EnvEnvironment)}
	endpoint := os.Getenv(EnvResourceManagerEndpoint)
	if spec.Name == "" && endpoint != "" {
		spec.Name = CloudCustom
	}
	if strings.EqualFold(spec.Name, CloudCustom) {
		spec.ResourceManagerEndpoint = endpoint
		spec.ResourceManagerAudience = os.Getenv(EnvResourceManagerAudience)
		spec.ActiveDirectoryAuthorityHost = os.Getenv(EnvAuthorityHost)
	}
	return spec
}

// Configuration returns the SDK's cloud configuration for the spec. The zero spec is the public cloud.
func (s CloudSpec) Configuration() (cloud.Configuration, error) {
	switch strings.ToLower(strings.TrimSpace(s.Name)) {
	case "", "azurepubliccloud", "azurecloud", "public":
		return cloud.AzurePublic, nil
	case "azurechinacloud", "china":
		return cloud.AzureChina, nil
	case "azureusgovernmentcloud", "azureusgovernment", "usgovernment":
		return cloud.AzureGovernment, nil
	case "custom":
		return s.customConfiguration()
	default:
		return cloud.Configuration{}, fmt.Errorf("unknown Azure cloud %q (want %s, %s, %s or %s)",
			s.Name, CloudPublic, CloudChina, CloudUSGovernment, CloudCustom)
	}
}

func (s CloudSpec) customConfiguration() (cloud.Configuration, error) {
	if s.ResourceManagerEndpoint == "" {
		return cloud.Configuration{}, fmt.Errorf("custom Azure cloud needs a resource manager endpoint")
	}
	if err := checkAbsoluteURL("resource manager endpoint", s.ResourceManagerEndpoint); err != nil {
		return cloud.Configuration{}, err
	}
	if s.ActiveDirectoryAuthorityHost != "" {
		if err := checkAbsoluteURL("active directory authority host", s.ActiveDirectoryAuthorityHost); err != nil {
			return cloud.Configuration{}, err
		}
	}
	audience := s.ResourceManagerAudience
	if audience == "" {
		audience = s.ResourceManagerEndpoint
	}
	return cloud.Configuration{
		ActiveDirectoryAuthorityHost: s.ActiveDirectoryAuthorityHost,
		Services: map[cloud.ServiceName]cloud.ServiceConfiguration{
			cloud.ResourceManager: {Endpoint: s.ResourceManagerEndpoint, Audience: audience},
		},
	}, nil
}

func checkAbsoluteURL(what, raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return fmt.Errorf("custom Azure cloud: %s %q is not an absolute http(s) URL", what, raw)
	}
	return nil
}
