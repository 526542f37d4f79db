package azure

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"
	azfake "github.com/Azure/azure-sdk-for-go/sdk/azcore/fake"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
	. "github.com/onsi/gomega"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/azure/metadata"
)

const pidPrefix = "azure:///subscriptions/" + testSub + "/resourceGroups/goofy-rg/providers/Microsoft.Compute/"

// clusterFakes is a resource group with standalone VMs over two pages, a NIC in another resource
// group, a flexible scale-set member, a uniform scale set whose VMs span two pages (one of them
// without NIC references), a flexible scale set, and another cluster's machines.
func clusterFakes() *fakeAzure {
	f := &fakeAzure{}

	cp1 := vm("cp-1", "control-plane", "2")
	otherRGNIC := "/subscriptions/" + testSub + "/resourceGroups/Net-RG/providers/Microsoft.Network/networkInterfaces/cp-1-nic"
	cp1.Properties.NetworkProfile = nicRefs(otherRGNIC, nicID("cp-1-second-nic"))
	flex := vm("flex-0", "worker", "3")
	flex.Properties.VirtualMachineScaleSet = &armcompute.SubResource{ID: to.Ptr("/subscriptions/" + testSub + "/resourceGroups/" + testRG + "/providers/Microsoft.Compute/virtualMachineScaleSets/flex")}
	otherCluster := vm("other-0", "worker", "")
	otherCluster.Tags[DefaultUIDTagKey] = to.Ptr("someone-else")
	untagged := vm("jumpbox", "", "")
	untagged.Tags = nil

	f.serveVMs(
		[]*armcompute.VirtualMachine{vm("cp-0", "control-plane", "1"), otherCluster, untagged},
		[]*armcompute.VirtualMachine{cp1, flex},
	)

	workersID := "/subscriptions/" + testSub + "/resourceGroups/" + testRG + "/providers/Microsoft.Compute/virtualMachineScaleSets/workers"
	f.serveScaleSets(
		&armcompute.VirtualMachineScaleSet{ID: to.Ptr(workersID), Name: to.Ptr("workers"),
			Tags:       tags(DefaultUIDTagKey, testUID, DefaultRoleTagKey, "worker"),
			Properties: &armcompute.VirtualMachineScaleSetProperties{OrchestrationMode: to.Ptr(armcompute.OrchestrationModeUniform)}},
		&armcompute.VirtualMachineScaleSet{Name: to.Ptr("flex"), Tags: tags(DefaultUIDTagKey, testUID, DefaultRoleTagKey, "worker"),
			Properties: &armcompute.VirtualMachineScaleSetProperties{OrchestrationMode: to.Ptr(armcompute.OrchestrationModeFlexible)}},
		&armcompute.VirtualMachineScaleSet{Name: to.Ptr("others"), Tags: tags(DefaultUIDTagKey, "someone-else", DefaultRoleTagKey, "worker")},
	)
	ssVM := func(ss, instance, computer string, withNIC bool) *armcompute.VirtualMachineScaleSetVM {
		v := &armcompute.VirtualMachineScaleSetVM{
			ID: to.Ptr(ssVMID(ss, instance)), Name: to.Ptr(ss + "_" + instance), InstanceID: to.Ptr(instance),
			Zones:      []*string{to.Ptr("1")},
			Properties: &armcompute.VirtualMachineScaleSetVMProperties{OSProfile: &armcompute.OSProfile{ComputerName: to.Ptr(computer)}},
		}
		if withNIC {
			v.Properties.NetworkProfile = nicRefs(ssVMID(ss, instance) + "/networkInterfaces/" + ss + "-nic")
		}
		return v
	}
	f.compute.VirtualMachineScaleSetVMsServer.NewListPager = func(rg, ss string, _ *armcompute.VirtualMachineScaleSetVMsClientListOptions) (resp azfake.PagerResponder[armcompute.VirtualMachineScaleSetVMsClientListResponse]) {
		page := func(vms ...*armcompute.VirtualMachineScaleSetVM) {
			resp.AddPage(http.StatusOK, armcompute.VirtualMachineScaleSetVMsClientListResponse{
				VirtualMachineScaleSetVMListResult: armcompute.VirtualMachineScaleSetVMListResult{Value: vms}}, nil)
		}
		switch ss {
		case "workers":
			page(ssVM(ss, "0", "workers000000", true), ssVM(ss, "1", "workers000001", true))
			page(ssVM(ss, "2", "workers000002", false))
		case "flex":
			page(ssVM(ss, "0", "must-not-be-listed", true)) // flexible members come from the VM list
		case "others":
			page(ssVM(ss, "0", "others000000", true))
		}
		return resp
	}
	f.serveNICs(map[string]armnetwork.Interface{
		"cp-0-nic":              nic(nicID("cp-0-nic"), "10.0.0.4"),
		"cp-1-nic":              nic(otherRGNIC, "10.0.0.5", "10.0.1.10", "10.0.1.11"),
		"cp-1-second-nic":       nic(nicID("cp-1-second-nic"), "10.9.9.9"),
		"flex-0-nic":            nic(nicID("flex-0-nic"), "10.0.0.6"),
		"other-0-nic":           nic(nicID("other-0-nic"), "10.0.0.7"),
		"workers/0/workers-nic": nic("w0", "10.1.0.4"),
		"workers/1/workers-nic": nic("w1", "10.1.0.5"),
		"flex/0/flex-nic":       nic("f0", "10.1.9.9"),
		"others/0/others-nic":   nic("o0", "10.1.8.8"),
		// workers/2 names no NIC: of its two, the one marked primary is taken.
		"workers/2/w2a": primaryNIC(nic("w2a", "10.1.0.6"), true),
		"workers/2/w2b": primaryNIC(nic("w2b", "10.2.0.9"), false),
	})
	return f
}

// primaryNIC marks a NIC primary or not, as ARM does on a VM with several.
func primaryNIC(n armnetwork.Interface, primary bool) armnetwork.Interface {
	n.Properties.Primary = to.Ptr(primary)
	return n
}

var wantCluster = []metadata.InstanceMetadata{
	{Name: "cp-0", ProviderID: pidPrefix + "virtualMachines/cp-0", Role: metadata.RoleControlPlane, VPCIP: "10.0.0.4", Zone: "1"},
	{Name: "cp-1", ProviderID: pidPrefix + "virtualMachines/cp-1", Role: metadata.RoleControlPlane, VPCIP: "10.0.0.5",
		AliasIPRanges: []string{"10.0.1.10/32", "10.0.1.11/32"}, Zone: "2"},
	{Name: "flex-0", ProviderID: pidPrefix + "virtualMachines/flex-0", Role: metadata.RoleWorker, VPCIP: "10.0.0.6", Zone: "3"},
	{Name: "workers000000", ProviderID: pidPrefix + "virtualMachineScaleSets/workers/virtualMachines/0", Role: metadata.RoleWorker, VPCIP: "10.1.0.4", Zone: "1"},
	{Name: "workers000001", ProviderID: pidPrefix + "virtualMachineScaleSets/workers/virtualMachines/1", Role: metadata.RoleWorker, VPCIP: "10.1.0.5", Zone: "1"},
	{Name: "workers000002", ProviderID: pidPrefix + "virtualMachineScaleSets/workers/virtualMachines/2", Role: metadata.RoleWorker, VPCIP: "10.1.0.6", Zone: "1"},
}

func TestListFindsTheClusterInstances(t *testing.T) {
	g := NewWithT(t)
	env := newTestCloud(t, clusterFakes(), nil, nil)
	got, err := env.cloud.List(context.Background())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(Equal(wantCluster))
	g.Expect(env.route.seenHosts()).To(ConsistOf("management.azure.com"), "the public cloud by default")
	// One NIC listing per uniform scale set and per resource group of NICs, not a request per VM.
	wantNICRequests := map[string]int{
		"InterfacesClient.NewListPager":                                        1, // cp-0 and flex-0
		"InterfacesClient.NewListVirtualMachineScaleSetNetworkInterfacesPager": 1, // workers 0-2
		"InterfacesClient.Get":                                                 1, // cp-1's NIC, alone in Net-RG
	}
	g.Expect(nicRequests(env.route.requests())).To(Equal(wantNICRequests))

	// A second List reads everything again (the fakes hand out fresh pagers).
	again, err := env.cloud.List(context.Background())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again).To(Equal(wantCluster))
	g.Expect(nicRequests(env.route.requests())).To(Equal(wantNICRequests))
}

func TestListWithCustomTagKeysAndOtherCasing(t *testing.T) {
	g := NewWithT(t)
	f := &fakeAzure{}
	// ARM sometimes reports IDs with "resourcegroups" and the group in upper case; tag names are
	// case-insensitive in ARM.
	odd := vm("cp-0", "", "")
	odd.ID = to.Ptr("/subscriptions/" + testSub + "/resourcegroups/GOOFY-RG/providers/Microsoft.Compute/virtualMachines/cp-0")
	odd.Tags = tags("Cluster", testUID, "NODE-ROLE", "Control-Plane")
	f.serveVMs([]*armcompute.VirtualMachine{odd})
	f.serveScaleSets()
	f.serveNICs(map[string]armnetwork.Interface{"cp-0-nic": nic(nicID("cp-0-nic"), "10.0.0.4")})
	env := newTestCloud(t, f, func(c *Config) { c.TagKeys = TagKeys{UID: "cluster", Role: "node-role"} }, nil)
	got, err := env.cloud.List(context.Background())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(Equal([]metadata.InstanceMetadata{{
		Name: "cp-0", ProviderID: "azure:///subscriptions/" + testSub + "/resourcegroups/goofy-rg/providers/Microsoft.Compute/virtualMachines/cp-0",
		Role: metadata.RoleControlPlane, VPCIP: "10.0.0.4",
	}}))
}

func TestListSkipsUnusableVMs(t *testing.T) {
	g := NewWithT(t)
	f := &fakeAzure{}
	noID := vm("no-id", "worker", "")
	noID.ID = nil
	noName := vm("no-name", "worker", "")
	noName.Name, noName.Properties.OSProfile = nil, nil
	noNIC := vm("no-nic", "worker", "")
	noNIC.Properties.NetworkProfile = nil
	noProps := vm("no-props", "worker", "")
	noProps.Properties = nil
	noRole := vm("no-role", "worker", "")
	delete(noRole.Tags, DefaultRoleTagKey)
	badRole := vm("bad-role", "etcd", "")
	badID := vm("bad-id", "worker", "")
	badID.ID = to.Ptr("not-an-arm-id")
	nilTagValue := vm("nil-uid", "worker", "")
	nilTagValue.Tags[DefaultUIDTagKey] = nil
	f.serveVMs([]*armcompute.VirtualMachine{
		nil, vm("good", "worker", ""), noID, noName, noNIC, noProps, noRole, badRole, badID, nilTagValue,
		vm("scaled-in", "worker", ""), vm("no-primary-ip", "worker", ""), vm("no-ipconfig", "worker", ""),
	})
	// A scale set without a name, and a scale-set VM without an instance ID.
	f.serveScaleSets(nil, &armcompute.VirtualMachineScaleSet{ID: to.Ptr("nameless")},
		&armcompute.VirtualMachineScaleSet{Name: to.Ptr("ss"), Tags: tags(DefaultUIDTagKey, testUID, DefaultRoleTagKey, "worker")})
	f.compute.VirtualMachineScaleSetVMsServer.NewListPager = func(rg, ss string, _ *armcompute.VirtualMachineScaleSetVMsClientListOptions) (resp azfake.PagerResponder[armcompute.VirtualMachineScaleSetVMsClientListResponse]) {
		resp.AddPage(http.StatusOK, armcompute.VirtualMachineScaleSetVMsClientListResponse{VirtualMachineScaleSetVMListResult: armcompute.VirtualMachineScaleSetVMListResult{
			Value: []*armcompute.VirtualMachineScaleSetVM{nil, {ID: to.Ptr(ssVMID("ss", "7")), Name: to.Ptr("ss_7")}}}}, nil)
		return resp
	}
	noPrimary := nic(nicID("no-primary-ip-nic"), "")
	noPrimary.Properties.IPConfigurations[0].Properties.PrivateIPAddress = nil
	f.serveNICs(map[string]armnetwork.Interface{
		"good-nic":          nic(nicID("good-nic"), "10.0.0.4"),
		"no-name-nic":       nic(nicID("no-name-nic"), "10.0.0.5"),
		"no-primary-ip-nic": noPrimary,
		"no-ipconfig-nic":   {ID: to.Ptr(nicID("no-ipconfig-nic")), Properties: &armnetwork.InterfacePropertiesFormat{}},
		// "scaled-in-nic" is missing: 404, as during scale-in.
	})
	env := newTestCloud(t, f, nil, nil)
	got, err := env.cloud.List(context.Background())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(Equal([]metadata.InstanceMetadata{{Name: "good", ProviderID: pidPrefix + "virtualMachines/good", Role: metadata.RoleWorker, VPCIP: "10.0.0.4"}}))

	logs := env.logs.String()
	for _, reason := range []string{
		"it has no resource ID",
		"it has neither a computer name nor a resource name",
		"skipping VM tagged for the cluster: it has no network interface\" id=" + vmID("no-nic"),
		"skipping VM tagged for the cluster: it has no network interface\" id=" + vmID("no-props"),
		`it has no \"goofy-role\" tag`,
		`unknown role \"etcd\"`,
		`\"not-an-arm-id\" is not an ARM resource ID`,
		"skipping VM of another cluster\" id=" + vmID("nil-uid"),
		"network interface is gone (being deleted?)\" id=" + vmID("scaled-in"),
		"has no primary private IP\" id=" + vmID("no-primary-ip"),
		"has no primary private IP\" id=" + vmID("no-ipconfig"),
		"skipping a scale set without a name",
		"skipping scale-set VM tagged for the cluster: it has no instance ID",
	} {
		g.Expect(logs).To(ContainSubstring(reason))
	}
}

func TestListFailsOnARMErrors(t *testing.T) {
	for name, tc := range map[string]struct {
		mutate func(*fakeAzure)
		want   string
		status int
	}{
		"VM pager fails on page two": {mutate: func(f *fakeAzure) {
			f.compute.VirtualMachinesServer.NewListPager = func(string, *armcompute.VirtualMachinesClientListOptions) (resp azfake.PagerResponder[armcompute.VirtualMachinesClientListResponse]) {
				resp.AddPage(http.StatusOK, armcompute.VirtualMachinesClientListResponse{VirtualMachineListResult: armcompute.VirtualMachineListResult{Value: []*armcompute.VirtualMachine{vm("cp-0", "control-plane", "")}}}, nil)
				resp.AddResponseError(http.StatusInternalServerError, "InternalError")
				return resp
			}
		}, want: "listing VMs in resource group " + testRG, status: 500},
		"VM list forbidden": {mutate: func(f *fakeAzure) {
			f.compute.VirtualMachinesServer.NewListPager = func(string, *armcompute.VirtualMachinesClientListOptions) (resp azfake.PagerResponder[armcompute.VirtualMachinesClientListResponse]) {
				resp.AddResponseError(http.StatusForbidden, "AuthorizationFailed")
				return resp
			}
		}, want: "AuthorizationFailed", status: 403},
		"scale-set list fails": {mutate: func(f *fakeAzure) {
			f.compute.VirtualMachineScaleSetsServer.NewListPager = func(string, *armcompute.VirtualMachineScaleSetsClientListOptions) (resp azfake.PagerResponder[armcompute.VirtualMachineScaleSetsClientListResponse]) {
				resp.AddResponseError(http.StatusForbidden, "AuthorizationFailed")
				return resp
			}
		}, want: "listing scale sets", status: 403},
		"scale-set VM pager fails on page two": {mutate: func(f *fakeAzure) {
			f.compute.VirtualMachineScaleSetVMsServer.NewListPager = func(_, ss string, _ *armcompute.VirtualMachineScaleSetVMsClientListOptions) (resp azfake.PagerResponder[armcompute.VirtualMachineScaleSetVMsClientListResponse]) {
				resp.AddPage(http.StatusOK, armcompute.VirtualMachineScaleSetVMsClientListResponse{}, nil)
				resp.AddResponseError(http.StatusBadGateway, "BadGateway")
				return resp
			}
		}, want: "listing VMs of scale set workers", status: 502},
		"NIC read forbidden": {mutate: func(f *fakeAzure) {
			f.network.InterfacesServer.Get = func(context.Context, string, string, *armnetwork.InterfacesClientGetOptions) (resp azfake.Responder[armnetwork.InterfacesClientGetResponse], errResp azfake.ErrorResponder) {
				errResp.SetResponseError(http.StatusForbidden, "AuthorizationFailed")
				return
			}
		}, want: "reading the network interface of /subscriptions/", status: 403},
		"scale-set NIC list fails": {mutate: func(f *fakeAzure) {
			f.network.InterfacesServer.NewListVirtualMachineScaleSetNetworkInterfacesPager = func(string, string, *armnetwork.InterfacesClientListVirtualMachineScaleSetNetworkInterfacesOptions) (resp azfake.PagerResponder[armnetwork.InterfacesClientListVirtualMachineScaleSetNetworkInterfacesResponse]) {
				resp.AddResponseError(http.StatusUnauthorized, "InvalidAuthenticationToken")
				return resp
			}
		}, want: "listing the network interfaces of scale set workers", status: 401},
		"resource group's NIC list fails on page two": {mutate: func(f *fakeAzure) {
			f.network.InterfacesServer.NewListPager = func(string, *armnetwork.InterfacesClientListOptions) (resp azfake.PagerResponder[armnetwork.InterfacesClientListResponse]) {
				resp.AddPage(http.StatusOK, armnetwork.InterfacesClientListResponse{}, nil)
				resp.AddResponseError(http.StatusForbidden, "AuthorizationFailed")
				return resp
			}
		}, want: "listing the network interfaces in resource group " + testRG, status: 403},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			f := clusterFakes()
			tc.mutate(f)
			env := newTestCloud(t, f, nil, nil)
			got, err := env.cloud.List(context.Background())
			g.Expect(got).To(BeNil())
			g.Expect(err).To(MatchError(ContainSubstring(tc.want)))
			g.Expect(responseStatus(err)).To(Equal(tc.status))
		})
	}
}

func TestListRetriesThrottlingAndServerErrors(t *testing.T) {
	for name, tc := range map[string]struct {
		canned []rawResponse
		retry  policy.RetryOptions
	}{
		// ARM's Retry-After is in seconds; with the package's default MaxRetryDelay the SDK waits it out.
		"429 with Retry-After in seconds": {
			canned: []rawResponse{{status: 429, header: map[string]string{"Retry-After": "1"}, body: `{"error":{"code":"TooManyRequests"}}`}},
			retry:  policy.RetryOptions{RetryDelay: time.Millisecond},
		},
		"429 with retry-after-ms": {
			canned: []rawResponse{{status: 429, header: map[string]string{"retry-after-ms": "5"}}, {status: 429, header: map[string]string{"x-ms-retry-after-ms": "5"}}},
			retry:  fastRetry(),
		},
		"5xx then recovery": {
			canned: []rawResponse{{status: 500, body: `{"error":{"code":"InternalServerError"}}`}, {status: 503}, {status: 504}},
			retry:  fastRetry(),
		},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			var flaky *flakyTransport
			env := newTestCloud(t, clusterFakes(), func(c *Config) { c.ClientOptions.Retry = tc.retry },
				func(next policy.Transporter) policy.Transporter {
					flaky = &flakyTransport{next: next, suffix: "/providers/Microsoft.Compute/virtualMachines", pending: tc.canned}
					return flaky
				})
			got, err := env.cloud.List(context.Background())
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(wantCluster))
			// canned answers + the first page (the fake's next-page links have another path)
			g.Expect(flaky.count()).To(Equal(len(tc.canned) + 1))
		})
	}
}

func TestListGivesUpOnPersistentThrottlingAndDoesNotRetryAuthErrors(t *testing.T) {
	for name, tc := range map[string]struct {
		canned    []rawResponse
		wantCalls int
		status    int
	}{
		"429 beyond MaxRetries": {canned: []rawResponse{{status: 429}, {status: 429}, {status: 429}, {status: 429}, {status: 429}}, wantCalls: 4, status: 429},
		"401":                   {canned: []rawResponse{{status: 401, body: `{"error":{"code":"InvalidAuthenticationToken"}}`}}, wantCalls: 1, status: 401},
		"403":                   {canned: []rawResponse{{status: 403, body: `{"error":{"code":"AuthorizationFailed"}}`}}, wantCalls: 1, status: 403},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			var flaky *flakyTransport
			env := newTestCloud(t, clusterFakes(), nil, func(next policy.Transporter) policy.Transporter {
				flaky = &flakyTransport{next: next, suffix: "/providers/Microsoft.Compute/virtualMachines", pending: tc.canned}
				return flaky
			})
			_, err := env.cloud.List(context.Background())
			g.Expect(responseStatus(err)).To(Equal(tc.status))
			g.Expect(flaky.count()).To(Equal(tc.wantCalls), "fastRetry allows 3 retries")
		})
	}
}

func TestListHonoursTheContext(t *testing.T) {
	g := NewWithT(t)
	env := newTestCloud(t, clusterFakes(), nil, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := env.cloud.List(ctx)
	g.Expect(errors.Is(err, context.Canceled)).To(BeTrue(), "got %v", err)
}

func TestNewWithConfigValidates(t *testing.T) {
	g := NewWithT(t)
	_, err := NewWithConfig(context.Background(), Config{SubscriptionID: testSub, Credential: &azfake.TokenCredential{}})
	g.Expect(err).To(MatchError(ContainSubstring("missing resource group, cluster UID")))

	_, err = NewWithConfig(context.Background(), Config{SubscriptionID: testSub, ResourceGroup: testRG, ClusterUID: testUID,
		Credential: &azfake.TokenCredential{}, Cloud: CloudSpec{Name: "Mars"}})
	g.Expect(err).To(MatchError(ContainSubstring(`unknown Azure cloud "Mars"`)))

	_, err = NewWithConfig(context.Background(), Config{SubscriptionID: testSub, ResourceGroup: testRG, ClusterUID: testUID,
		Credential: &azfake.TokenCredential{}, ClientOptions: &arm.ClientOptions{}, Cloud: CloudSpec{Name: CloudCustom}})
	g.Expect(err).To(MatchError(ContainSubstring("needs a resource manager endpoint")))
}

func TestListScaleSetVMTagsOverrideTheScaleSets(t *testing.T) {
	g := NewWithT(t)
	f := &fakeAzure{}
	f.serveVMs()
	f.serveScaleSets(&armcompute.VirtualMachineScaleSet{Name: to.Ptr("pool"),
		Tags: tags("Goofy-Uid", testUID, "Goofy-Role", "worker")})
	f.compute.VirtualMachineScaleSetVMsServer.NewListPager = func(_, ss string, _ *armcompute.VirtualMachineScaleSetVMsClientListOptions) (resp azfake.PagerResponder[armcompute.VirtualMachineScaleSetVMsClientListResponse]) {
		mk := func(instance string, own map[string]*string) *armcompute.VirtualMachineScaleSetVM {
			return &armcompute.VirtualMachineScaleSetVM{ID: to.Ptr(ssVMID(ss, instance)), Name: to.Ptr(ss + "_" + instance), InstanceID: to.Ptr(instance), Tags: own,
				Properties: &armcompute.VirtualMachineScaleSetVMProperties{NetworkProfile: nicRefs(ssVMID(ss, instance) + "/networkInterfaces/nic")}}
		}
		resp.AddPage(http.StatusOK, armcompute.VirtualMachineScaleSetVMsClientListResponse{VirtualMachineScaleSetVMListResult: armcompute.VirtualMachineScaleSetVMListResult{
			Value: []*armcompute.VirtualMachineScaleSetVM{
				mk("0", nil),
				mk("1", tags("GOOFY-ROLE", "control-plane")),
				mk("2", tags(DefaultUIDTagKey, "someone-else")),
			}}}, nil)
		return resp
	}
	f.serveNICs(map[string]armnetwork.Interface{
		"pool/0/nic": nic("n0", "10.3.0.4"), "pool/1/nic": nic("n1", "10.3.0.5"), "pool/2/nic": nic("n2", "10.3.0.6"),
	})
	env := newTestCloud(t, f, nil, nil)
	got, err := env.cloud.List(context.Background())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(Equal([]metadata.InstanceMetadata{
		{Name: "pool_0", ProviderID: pidPrefix + "virtualMachineScaleSets/pool/virtualMachines/0", Role: metadata.RoleWorker, VPCIP: "10.3.0.4"},
		{Name: "pool_1", ProviderID: pidPrefix + "virtualMachineScaleSets/pool/virtualMachines/1", Role: metadata.RoleControlPlane, VPCIP: "10.3.0.5"},
	}))
}
