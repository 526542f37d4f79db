package azure

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"

	azfake "github.com/Azure/azure-sdk-for-go/sdk/azcore/fake"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
	. "github.com/onsi/gomega"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/azure/metadata"
)

func scaleSetID(name string) string {
	return "/subscriptions/" + testSub + "/resourceGroups/" + testRG + "/providers/Microsoft.Compute/virtualMachineScaleSets/" + name
}

func scaleSet(name string, mode armcompute.OrchestrationMode, capacity *int64, tagList map[string]*string) *armcompute.VirtualMachineScaleSet {
	ss := &armcompute.VirtualMachineScaleSet{ID: to.Ptr(scaleSetID(name)), Name: to.Ptr(name), Tags: tagList,
		Properties: &armcompute.VirtualMachineScaleSetProperties{OrchestrationMode: to.Ptr(mode)}}
	if capacity != nil {
		ss.SKU = &armcompute.SKU{Name: to.Ptr("Standard_D2s_v5"), Capacity: capacity}
	}
	return ss
}

// poolFakes is a resource group with a uniform scale set "pool" (capacity 3, three VMs: one of them
// scaling in, its NIC gone), a flexible scale set "flex" tagged pool=flex (two member VMs), another
// flexible set, standalone VMs, and no cluster tags on any of the sets' VMs.
func poolFakes() *fakeAzure {
	f := &fakeAzure{}
	sets := map[string]*armcompute.VirtualMachineScaleSet{
		"pool":       scaleSet("pool", armcompute.OrchestrationModeUniform, to.Ptr[int64](3), tags("team", "a")),
		"flex":       scaleSet("flex", armcompute.OrchestrationModeFlexible, to.Ptr[int64](2), tags("Pool", "flex", "team", "a")),
		"flex-other": scaleSet("flex-other", armcompute.OrchestrationModeFlexible, nil, tags("pool", "other")),
	}
	f.compute.VirtualMachineScaleSetsServer.Get = func(_ context.Context, rg, name string, _ *armcompute.VirtualMachineScaleSetsClientGetOptions) (resp azfake.Responder[armcompute.VirtualMachineScaleSetsClientGetResponse], errResp azfake.ErrorResponder) {
		ss, ok := sets[name]
		if !ok || rg != testRG {
			errResp.SetResponseError(http.StatusNotFound, "ResourceNotFound")
			return
		}
		resp.SetResponse(http.StatusOK, armcompute.VirtualMachineScaleSetsClientGetResponse{VirtualMachineScaleSet: *ss}, nil)
		return
	}
	f.serveScaleSets(sets["flex-other"], sets["pool"], sets["flex"])
	ssVM := func(instance, computer, zone string) *armcompute.VirtualMachineScaleSetVM {
		return &armcompute.VirtualMachineScaleSetVM{
			ID: to.Ptr(ssVMID("pool", instance)), Name: to.Ptr("pool_" + instance), InstanceID: to.Ptr(instance), Zones: []*string{to.Ptr(zone)},
			Properties: &armcompute.VirtualMachineScaleSetVMProperties{
				OSProfile:      &armcompute.OSProfile{ComputerName: to.Ptr(computer)},
				NetworkProfile: nicRefs(ssVMID("pool", instance) + "/networkInterfaces/pool-nic"),
			},
		}
	}
	f.compute.VirtualMachineScaleSetVMsServer.NewListPager = func(rg, ss string, _ *armcompute.VirtualMachineScaleSetVMsClientListOptions) (resp azfake.PagerResponder[armcompute.VirtualMachineScaleSetVMsClientListResponse]) {
		if ss != "pool" {
			resp.AddResponseError(http.StatusNotFound, "ResourceNotFound")
			return resp
		}
		page := func(vms ...*armcompute.VirtualMachineScaleSetVM) {
			resp.AddPage(http.StatusOK, armcompute.VirtualMachineScaleSetVMsClientListResponse{
				VirtualMachineScaleSetVMListResult: armcompute.VirtualMachineScaleSetVMListResult{Value: vms}}, nil)
		}
		page(ssVM("0", "Pool000000", "1"), ssVM("3", "pool000003", "2"))
		page(ssVM("4", "pool000004", "3")) // scaling in: its NIC is gone
		return resp
	}
	member := func(name, set, zone string) *armcompute.VirtualMachine {
		v := vm(name, "", zone)
		v.Tags = nil
		v.Properties.VirtualMachineScaleSet = &armcompute.SubResource{ID: to.Ptr(scaleSetID(set))}
		return v
	}
	// The VM list answers the resource group's VMs whatever the filter, so the client's own check
	// of each VM's scale set is tested too.
	f.serveVMs(
		[]*armcompute.VirtualMachine{member("flex-a", "flex", "1"), vm("standalone", "worker", "")},
		[]*armcompute.VirtualMachine{member("flex-b", "flex", ""), member("other-a", "flex-other", "")},
	)
	f.serveNICs(map[string]armnetwork.Interface{
		"pool/0/pool-nic": nic("p0", "10.5.0.4"),
		"pool/3/pool-nic": nic("p3", "10.5.0.7", "10.5.1.7"),
		"flex-a-nic":      nic(nicID("flex-a-nic"), "10.6.0.4"),
		"flex-b-nic":      nic(nicID("flex-b-nic"), "10.6.0.5"),
		"standalone-nic":  nic(nicID("standalone-nic"), "10.7.0.4"),
		"other-a-nic":     nic(nicID("other-a-nic"), "10.7.0.5"),
	})
	return f
}

// recordFilters wraps the VM list fake to record the $filter of each listing.
func recordFilters(f *fakeAzure) func() []string {
	var mu sync.Mutex
	var filters []string
	next := f.compute.VirtualMachinesServer.NewListPager
	f.compute.VirtualMachinesServer.NewListPager = func(rg string, o *armcompute.VirtualMachinesClientListOptions) azfake.PagerResponder[armcompute.VirtualMachinesClientListResponse] {
		mu.Lock()
		if o != nil && o.Filter != nil {
			filters = append(filters, *o.Filter)
		} else {
			filters = append(filters, "")
		}
		mu.Unlock()
		return next(rg, o)
	}
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), filters...)
	}
}

func TestScaleSetUniformByName(t *testing.T) {
	g := NewWithT(t)
	env := newTestCloud(t, poolFakes(), nil, nil)
	got, err := env.cloud.ScaleSet(context.Background(), ScaleSetSelector{Name: "pool"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(Equal(&ScaleSet{
		Name: "pool", ID: scaleSetID("pool"),
		ProviderID: "azure:///subscriptions/" + testSub + "/resourceGroups/goofy-rg/providers/Microsoft.Compute/virtualMachineScaleSets/pool",
		Capacity:   to.Ptr[int64](3),
		Instances: []metadata.InstanceMetadata{
			// Exactly cloud-provider-azure's provider IDs: the resource group lower-cased, nothing else.
			{Name: "pool000000", ProviderID: "azure:///subscriptions/" + testSub + "/resourceGroups/goofy-rg/providers/Microsoft.Compute/virtualMachineScaleSets/pool/virtualMachines/0",
				Role: metadata.RoleWorker, VPCIP: "10.5.0.4", Zone: "1"},
			{Name: "pool000003", ProviderID: pidPrefix + "virtualMachineScaleSets/pool/virtualMachines/3",
				Role: metadata.RoleWorker, VPCIP: "10.5.0.7", AliasIPRanges: []string{"10.5.1.7/32"}, Zone: "2"},
		},
		Members: []string{
			pidPrefix + "virtualMachineScaleSets/pool/virtualMachines/0",
			pidPrefix + "virtualMachineScaleSets/pool/virtualMachines/3",
			pidPrefix + "virtualMachineScaleSets/pool/virtualMachines/4",
		},
	}))
	g.Expect(env.logs.String()).To(ContainSubstring("network interface is gone"))
}

func TestScaleSetFlexibleByTags(t *testing.T) {
	g := NewWithT(t)
	f := poolFakes()
	filters := recordFilters(f)
	env := newTestCloud(t, f, nil, nil)
	// Tag names compare case-insensitively ("Pool" on the set), values exactly.
	got, err := env.cloud.ScaleSet(context.Background(), ScaleSetSelector{Tags: map[string]string{"pool": "flex", "TEAM": "a"}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(Equal(&ScaleSet{
		Name: "flex", ID: scaleSetID("flex"), Flexible: true, Capacity: to.Ptr[int64](2),
		ProviderID: pidPrefix + "virtualMachineScaleSets/flex",
		Instances: []metadata.InstanceMetadata{
			// Flexible members have the plain VM form of provider ID.
			{Name: "flex-a", ProviderID: "azure:///subscriptions/" + testSub + "/resourceGroups/goofy-rg/providers/Microsoft.Compute/virtualMachines/flex-a",
				Role: metadata.RoleWorker, VPCIP: "10.6.0.4", Zone: "1"},
			{Name: "flex-b", ProviderID: pidPrefix + "virtualMachines/flex-b", Role: metadata.RoleWorker, VPCIP: "10.6.0.5"},
		},
		Members: []string{pidPrefix + "virtualMachines/flex-a", pidPrefix + "virtualMachines/flex-b"},
	}))
	g.Expect(filters()).To(Equal([]string{"'virtualMachineScaleSet/id' eq '" + scaleSetID("flex") + "'"}))

	// A flexible set without capacity (no VM profile) reports none.
	got, err = env.cloud.ScaleSet(context.Background(), ScaleSetSelector{Name: "flex-other"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.Capacity).To(BeNil())
	g.Expect(got.Members).To(Equal([]string{pidPrefix + "virtualMachines/other-a"}))
}

func TestScaleSetNotFoundAndAmbiguous(t *testing.T) {
	for name, tc := range map[string]struct {
		sel    ScaleSetSelector
		mutate func(*fakeAzure)
		want   error
		msg    string
	}{
		"no scale set by that name": {sel: ScaleSetSelector{Name: "gone"}, want: ErrScaleSetNotFound, msg: `scale set "gone" in resource group ` + testRG},
		"no scale set with the tags": {sel: ScaleSetSelector{Tags: map[string]string{"pool": "FLEX"}}, want: ErrScaleSetNotFound,
			msg: "no scale set tagged pool=FLEX"},
		"two scale sets with the tags": {sel: ScaleSetSelector{Tags: map[string]string{"team": "a"}}, want: ErrScaleSetAmbiguous,
			msg: "scale sets flex, pool in resource group " + testRG + " are all tagged team=a"},
		"deleted between the read and the VM list": {sel: ScaleSetSelector{Name: "pool"}, want: ErrScaleSetNotFound, mutate: func(f *fakeAzure) {
			f.compute.VirtualMachineScaleSetVMsServer.NewListPager = func(string, string, *armcompute.VirtualMachineScaleSetVMsClientListOptions) (resp azfake.PagerResponder[armcompute.VirtualMachineScaleSetVMsClientListResponse]) {
				resp.AddResponseError(http.StatusNotFound, "ResourceNotFound")
				return resp
			}
		}, msg: "listing the VMs of scale set pool"},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			f := poolFakes()
			if tc.mutate != nil {
				tc.mutate(f)
			}
			env := newTestCloud(t, f, nil, nil)
			got, err := env.cloud.ScaleSet(context.Background(), tc.sel)
			g.Expect(got).To(BeNil())
			g.Expect(errors.Is(err, tc.want)).To(BeTrue(), "got %v", err)
			g.Expect(err).To(MatchError(ContainSubstring(tc.msg)))
		})
	}
}

func TestScaleSetARMErrorsAreNotNotFound(t *testing.T) {
	g := NewWithT(t)
	f := poolFakes()
	f.compute.VirtualMachineScaleSetsServer.Get = func(context.Context, string, string, *armcompute.VirtualMachineScaleSetsClientGetOptions) (resp azfake.Responder[armcompute.VirtualMachineScaleSetsClientGetResponse], errResp azfake.ErrorResponder) {
		errResp.SetResponseError(http.StatusForbidden, "AuthorizationFailed")
		return
	}
	env := newTestCloud(t, f, nil, nil)
	_, err := env.cloud.ScaleSet(context.Background(), ScaleSetSelector{Name: "pool"})
	g.Expect(responseStatus(err)).To(Equal(http.StatusForbidden))
	g.Expect(errors.Is(err, ErrScaleSetNotFound)).To(BeFalse())

	_, err = env.cloud.ScaleSet(context.Background(), ScaleSetSelector{})
	g.Expect(err).To(MatchError(ContainSubstring("needs a name or tags")))
}

// ARM's throttling and server errors on the scale set's read are retried by the SDK's policy, as
// on the VM listing (raw responses: the SDK fakes' own errors are never retried).
func TestScaleSetRetriesThrottlingAndServerErrors(t *testing.T) {
	g := NewWithT(t)
	var flaky *flakyTransport
	env := newTestCloud(t, poolFakes(), nil, func(next policy.Transporter) policy.Transporter {
		flaky = &flakyTransport{next: next, suffix: "/virtualMachineScaleSets/pool", pending: []rawResponse{
			{status: 429, header: map[string]string{"retry-after-ms": "5"}, body: `{"error":{"code":"TooManyRequests"}}`},
			{status: 503},
		}}
		return flaky
	})
	got, err := env.cloud.ScaleSet(context.Background(), ScaleSetSelector{Name: "pool"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.Instances).To(HaveLen(2))
	g.Expect(flaky.count()).To(Equal(3), "two canned answers, then the fake")

	// Throttled beyond the retries: an error that is not "not found".
	env = newTestCloud(t, poolFakes(), nil, func(next policy.Transporter) policy.Transporter {
		return &flakyTransport{next: next, suffix: "/virtualMachineScaleSets/pool", pending: []rawResponse{{status: 429}, {status: 429}, {status: 429}, {status: 429}}}
	})
	_, err = env.cloud.ScaleSet(context.Background(), ScaleSetSelector{Name: "pool"})
	g.Expect(responseStatus(err)).To(Equal(http.StatusTooManyRequests))
	g.Expect(errors.Is(err, ErrScaleSetNotFound)).To(BeFalse())
	g.Expect(strings.Contains(err.Error(), "reading scale set")).To(BeTrue(), err.Error())
}
