package azure

import (
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/cloud"
	. "github.com/onsi/gomega"
)

func TestProviderIDFromResourceID(t *testing.T) {
	for in, want := range map[string]string{
		"/subscriptions/s/resourceGroups/My-RG/providers/Microsoft.Compute/virtualMachines/VM-0":                         "azure:///subscriptions/s/resourceGroups/my-rg/providers/Microsoft.Compute/virtualMachines/VM-0",
		"/subscriptions/s/resourcegroups/MY-RG/providers/Microsoft.Compute/virtualMachineScaleSets/SS/virtualMachines/3": "azure:///subscriptions/s/resourcegroups/my-rg/providers/Microsoft.Compute/virtualMachineScaleSets/SS/virtualMachines/3",
		"/SUBSCRIPTIONS/s/RESOURCEGROUPS/rg/PROVIDERS/microsoft.compute/virtualmachines/vm":                              "azure:///SUBSCRIPTIONS/s/RESOURCEGROUPS/rg/PROVIDERS/microsoft.compute/virtualmachines/vm",
	} {
		got, err := ProviderIDFromResourceID(in)
		if err != nil || got != want {
			t.Errorf("ProviderIDFromResourceID(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{
		"", "vm-0", "azure:///subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/vm",
		"/subscriptions/s/resourceGroups/rg", "/subscriptions//resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/vm",
		"/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/",
		"/subscriptions/s/locations/rg/providers/Microsoft.Compute/virtualMachines/vm",
	} {
		if got, err := ProviderIDFromResourceID(bad); err == nil {
			t.Errorf("ProviderIDFromResourceID(%q) = %q, want an error", bad, got)
		}
	}
}

func TestCloudSpecConfiguration(t *testing.T) {
	g := NewWithT(t)
	for name, want := range map[string]cloud.Configuration{
		"": cloud.AzurePublic, "AzurePublicCloud": cloud.AzurePublic, "azurecloud": cloud.AzurePublic,
		"AzureChinaCloud": cloud.AzureChina, "AZURECHINACLOUD": cloud.AzureChina,
		"AzureUSGovernmentCloud": cloud.AzureGovernment, "AzureUSGovernment": cloud.AzureGovernment,
	} {
		got, err := CloudSpec{Name: name}.Configuration()
		g.Expect(err).NotTo(HaveOccurred(), name)
		g.Expect(got).To(Equal(want), name)
	}
	for spec, want := range map[CloudSpec]string{
		{Name: "AzureGermanCloud"}: `unknown Azure cloud "AzureGermanCloud"`,
		{Name: CloudCustom}:        "needs a resource manager endpoint",
		{Name: CloudCustom, ResourceManagerEndpoint: "arm.local"}:                                                `resource manager endpoint "arm.local" is not an absolute http(s) URL`,
		{Name: CloudCustom, ResourceManagerEndpoint: "ftp://arm.local"}:                                          "not an absolute http(s) URL",
		{Name: CloudCustom, ResourceManagerEndpoint: "https://arm.local", ActiveDirectoryAuthorityHost: "login"}: `authority host "login"`,
	} {
		_, err := spec.Configuration()
		g.Expect(err).To(MatchError(ContainSubstring(want)), spec.Name)
	}
}

func TestCloudSpecFromEnv(t *testing.T) {
	g := NewWithT(t)
	t.Setenv(EnvEnvironment, "")
	t.Setenv(EnvResourceManagerEndpoint, "")
	t.Setenv(EnvResourceManagerAudience, "")
	t.Setenv(EnvAuthorityHost, "https://login.goofy.test/")
	g.Expect(CloudSpecFromEnv().IsZero()).To(BeTrue(), "AZURE_AUTHORITY_HOST alone is left to azidentity")

	t.Setenv(EnvEnvironment, "AzureChinaCloud")
	g.Expect(CloudSpecFromEnv()).To(Equal(CloudSpec{Name: "AzureChinaCloud"}))

	t.Setenv(EnvEnvironment, "")
	t.Setenv(EnvResourceManagerEndpoint, "https://arm.goofy.test")
	t.Setenv(EnvResourceManagerAudience, "https://aud.goofy.test")
	g.Expect(CloudSpecFromEnv()).To(Equal(CloudSpec{Name: CloudCustom, ResourceManagerEndpoint: "https://arm.goofy.test",
		ResourceManagerAudience: "https://aud.goofy.test", ActiveDirectoryAuthorityHost: "https://login.goofy.test/"}))
}

func TestTagValue(t *testing.T) {
	g := NewWithT(t)
	v := "exact"
	m := map[string]*string{"Goofy-UID": ptr("folded"), "goofy-uid": &v, "empty": nil}
	got, ok := tagValue(m, "goofy-uid")
	g.Expect(ok).To(BeTrue())
	g.Expect(got).To(Equal("exact"), "an exact key wins over a case-folded one")
	got, ok = tagValue(map[string]*string{"Goofy-UID": ptr("folded")}, "goofy-uid")
	g.Expect(ok).To(BeTrue())
	g.Expect(got).To(Equal("folded"))
	got, ok = tagValue(m, "EMPTY")
	g.Expect(ok).To(BeTrue())
	g.Expect(got).To(BeEmpty())
	_, ok = tagValue(m, "missing")
	g.Expect(ok).To(BeFalse())
	_, ok = tagValue(nil, "missing")
	g.Expect(ok).To(BeFalse())
}

func ptr(s string) *string { return &s }
