package azure

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	azfake "github.com/Azure/azure-sdk-for-go/sdk/azcore/fake"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
	. "github.com/onsi/gomega"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/azure/metadata"
)

// bigPool is a resource group with a uniform scale set "big" and a flexible scale set "bigflex" of
// n VMs each, and what ScaleSet must find in them.
type bigPool struct {
	f                 *fakeAzure
	uniform, flexible []metadata.InstanceMetadata
	// NICs the listings of the uniform set and of the resource group hold.
	uniformNICs, groupNICs int
}

// newBigPool builds the sets. In each, VM 7 is scaling in (its NIC gone), and every tenth VM has a
// second, secondary NIC: a uniform one then names no NIC (the one marked primary counts), a
// flexible one names both (the one it marks primary counts). Flexible member 3's NIC is listed
// without its VM reference (found by its ID). The resource group also holds a standalone VM's NIC.
func newBigPool(n int) *bigPool {
	p := &bigPool{f: &fakeAzure{}}
	sets := map[string]*armcompute.VirtualMachineScaleSet{
		"big":     scaleSet("big", armcompute.OrchestrationModeUniform, to.Ptr(int64(n)), nil),
		"bigflex": scaleSet("bigflex", armcompute.OrchestrationModeFlexible, to.Ptr(int64(n)), nil),
	}
	p.f.compute.VirtualMachineScaleSetsServer.Get = func(_ context.Context, _, name string, _ *armcompute.VirtualMachineScaleSetsClientGetOptions) (resp azfake.Responder[armcompute.VirtualMachineScaleSetsClientGetResponse], errResp azfake.ErrorResponder) {
		resp.SetResponse(http.StatusOK, armcompute.VirtualMachineScaleSetsClientGetResponse{VirtualMachineScaleSet: *sets[name]}, nil)
		return
	}
	nics := map[string]armnetwork.Interface{
		"standalone-nic": withVM(nic(nicID("standalone-nic"), "10.7.0.4"), vmID("standalone")),
	}
	var ssVMs []*armcompute.VirtualMachineScaleSetVM
	var flexVMs []*armcompute.VirtualMachine
	for i := range n {
		ip := func(net int) string { return fmt.Sprintf("10.%d.%d.%d", net, i/200, 4+i%200) }
		twoNICs := i%10 == 9

		instance := strconv.Itoa(i)
		computer := fmt.Sprintf("big%06d", i)
		v := &armcompute.VirtualMachineScaleSetVM{ID: to.Ptr(ssVMID("big", instance)), Name: to.Ptr("big_" + instance), InstanceID: to.Ptr(instance),
			Properties: &armcompute.VirtualMachineScaleSetVMProperties{OSProfile: &armcompute.OSProfile{ComputerName: to.Ptr(computer)}}}
		switch {
		case twoNICs:
			nics["big/"+instance+"/a-secondary"] = primaryNIC(nic("x", ip(20)), false)
			nics["big/"+instance+"/b-primary"] = primaryNIC(nic("x", ip(10)), true)
		case i != 7:
			v.Properties.NetworkProfile = nicRefs(ssVMID("big", instance) + "/networkInterfaces/big-nic")
			nics["big/"+instance+"/big-nic"] = nic("x", ip(10), ip(11))
		default:
			v.Properties.NetworkProfile = nicRefs(ssVMID("big", instance) + "/networkInterfaces/big-nic")
		}
		ssVMs = append(ssVMs, v)

		name := fmt.Sprintf("flex-%02d", i)
		m := vm(name, "", "1")
		m.Tags = nil
		m.Properties.VirtualMachineScaleSet = &armcompute.SubResource{ID: to.Ptr(scaleSetID("bigflex"))}
		switch {
		case twoNICs:
			m.Properties.NetworkProfile = nicRefs(nicID(name+"-nic"), nicID(name+"-nic2"))
			nics[name+"-nic"] = withVM(nic(nicID(name+"-nic"), ip(12)), vmID(name))
			nics[name+"-nic2"] = withVM(nic(nicID(name+"-nic2"), ip(22)), vmID(name))
		case i == 3:
			nics[name+"-nic"] = nic(nicID(name+"-nic"), ip(12))
		case i != 7:
			nics[name+"-nic"] = withVM(nic(nicID(name+"-nic"), ip(12)), vmID(name))
		}
		flexVMs = append(flexVMs, m)

		if i == 7 {
			continue
		}
		u := metadata.InstanceMetadata{Name: computer, ProviderID: pidPrefix + "virtualMachineScaleSets/big/virtualMachines/" + instance,
			Role: metadata.RoleWorker, VPCIP: ip(10), AliasIPRanges: []string{ip(11) + "/32"}}
		if twoNICs {
			u.AliasIPRanges = nil
		}
		p.uniform = append(p.uniform, u)
		p.flexible = append(p.flexible, metadata.InstanceMetadata{Name: name, ProviderID: pidPrefix + "virtualMachines/" + name,
			Role: metadata.RoleWorker, VPCIP: ip(12), Zone: "1"})
	}
	p.f.compute.VirtualMachineScaleSetVMsServer.NewListPager = func(_, _ string, _ *armcompute.VirtualMachineScaleSetVMsClientListOptions) (resp azfake.PagerResponder[armcompute.VirtualMachineScaleSetVMsClientListResponse]) {
		resp.AddPage(http.StatusOK, armcompute.VirtualMachineScaleSetVMsClientListResponse{
			VirtualMachineScaleSetVMListResult: armcompute.VirtualMachineScaleSetVMListResult{Value: ssVMs}}, nil)
		return resp
	}
	p.f.serveVMs(flexVMs)
	p.f.serveNICs(nics)
	for key := range nics {
		if strings.HasPrefix(key, "big/") {
			p.uniformNICs++
		} else {
			p.groupNICs++
		}
	}
	return p
}

func withVM(n armnetwork.Interface, vm string) armnetwork.Interface {
	n.Properties.VirtualMachine = &armnetwork.SubResource{ID: to.Ptr(vm)}
	return n
}

func pages(items int) int { return (items + nicPageSize - 1) / nicPageSize }

// A re-read of a scale set of 50 VMs costs the pages of one NIC listing, not a request per VM
// (before: 45 GetVirtualMachineScaleSetNetworkInterface and 5 per-VM listings for the uniform set,
// 50 Gets for the flexible one), and every instance still gets its own primary NIC's addresses.
func TestScaleSetReReadCostsOneNICListing(t *testing.T) {
	const n = 50
	for name, tc := range map[string]struct {
		sel    ScaleSetSelector
		want   func(*bigPool) []metadata.InstanceMetadata
		method string
		listed func(*bigPool) int
	}{
		"uniform": {sel: ScaleSetSelector{Name: "big"}, want: func(p *bigPool) []metadata.InstanceMetadata { return p.uniform },
			method: "InterfacesClient.NewListVirtualMachineScaleSetNetworkInterfacesPager", listed: func(p *bigPool) int { return p.uniformNICs }},
		"flexible": {sel: ScaleSetSelector{Name: "bigflex"}, want: func(p *bigPool) []metadata.InstanceMetadata { return p.flexible },
			method: "InterfacesClient.NewListPager", listed: func(p *bigPool) int { return p.groupNICs }},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			p := newBigPool(n)
			env := newTestCloud(t, p.f, nil, nil)
			g.Expect(pages(tc.listed(p))).To(Equal(3), "the listing spans pages")
			for read := range 3 {
				got, err := env.cloud.ScaleSet(context.Background(), tc.sel)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(got.Instances).To(HaveLen(n - 1))
				g.Expect(got.Instances).To(Equal(tc.want(p)), "read %d", read)
				g.Expect(got.Members).To(HaveLen(n), "the VM whose NIC is gone is still a member")
				calls := env.route.requests()
				g.Expect(nicRequests(calls)).To(Equal(map[string]int{tc.method: 3}), "read %d: one listing of 3 pages, nothing per VM", read)
				total := 0
				for _, c := range calls {
					total += c
				}
				g.Expect(total).To(Equal(5), "read %d: the scale set, one page of VMs, 3 pages of NICs", read)
			}
			g.Expect(env.logs.String()).To(ContainSubstring("network interface is gone"))
		})
	}
}

// A source of NICs that only one VM needs is read with that NIC's own request, never more than
// its listing would cost.
func TestALoneVMsNICIsReadByItself(t *testing.T) {
	g := NewWithT(t)
	f := &fakeAzure{}
	f.serveVMs([]*armcompute.VirtualMachine{vm("cp-0", "control-plane", "1")})
	f.serveScaleSets()
	f.serveNICs(map[string]armnetwork.Interface{"cp-0-nic": nic(nicID("cp-0-nic"), "10.0.0.4")})
	env := newTestCloud(t, f, nil, nil)
	got, err := env.cloud.List(context.Background())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(Equal([]metadata.InstanceMetadata{{Name: "cp-0", ProviderID: pidPrefix + "virtualMachines/cp-0", Role: metadata.RoleControlPlane, VPCIP: "10.0.0.4", Zone: "1"}}))
	g.Expect(nicRequests(env.route.requests())).To(Equal(map[string]int{"InterfacesClient.Get": 1}))

	// A uniform scale set of one VM: its named NIC read through the scale set; one naming none,
	// its NICs listed.
	for _, named := range []bool{true, false} {
		f := poolFakes()
		f.compute.VirtualMachineScaleSetVMsServer.NewListPager = func(_, _ string, _ *armcompute.VirtualMachineScaleSetVMsClientListOptions) (resp azfake.PagerResponder[armcompute.VirtualMachineScaleSetVMsClientListResponse]) {
			v := &armcompute.VirtualMachineScaleSetVM{ID: to.Ptr(ssVMID("pool", "0")), Name: to.Ptr("pool_0"), InstanceID: to.Ptr("0"),
				Properties: &armcompute.VirtualMachineScaleSetVMProperties{}}
			if named {
				v.Properties.NetworkProfile = nicRefs(ssVMID("pool", "0") + "/networkInterfaces/pool-nic")
			}
			resp.AddPage(http.StatusOK, armcompute.VirtualMachineScaleSetVMsClientListResponse{
				VirtualMachineScaleSetVMListResult: armcompute.VirtualMachineScaleSetVMListResult{Value: []*armcompute.VirtualMachineScaleSetVM{v}}}, nil)
			return resp
		}
		f.network.InterfacesServer.NewListVirtualMachineScaleSetVMNetworkInterfacesPager = func(_, _, _ string, _ *armnetwork.InterfacesClientListVirtualMachineScaleSetVMNetworkInterfacesOptions) (resp azfake.PagerResponder[armnetwork.InterfacesClientListVirtualMachineScaleSetVMNetworkInterfacesResponse]) {
			secondary, primary := primaryNIC(nic("p0b", "10.5.9.9"), false), primaryNIC(nic("p0a", "10.5.0.4"), true)
			resp.AddPage(http.StatusOK, armnetwork.InterfacesClientListVirtualMachineScaleSetVMNetworkInterfacesResponse{
				InterfaceListResult: armnetwork.InterfaceListResult{Value: []*armnetwork.Interface{&secondary, &primary}}}, nil)
			return resp
		}
		env := newTestCloud(t, f, nil, nil)
		got, err := env.cloud.ScaleSet(context.Background(), ScaleSetSelector{Name: "pool"})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(got.Instances).To(Equal([]metadata.InstanceMetadata{{Name: "pool_0", ProviderID: pidPrefix + "virtualMachineScaleSets/pool/virtualMachines/0",
			Role: metadata.RoleWorker, VPCIP: "10.5.0.4"}}))
		want := map[string]int{"InterfacesClient.GetVirtualMachineScaleSetNetworkInterface": 1}
		if !named {
			want = map[string]int{"InterfacesClient.NewListVirtualMachineScaleSetVMNetworkInterfacesPager": 1}
		}
		g.Expect(nicRequests(env.route.requests())).To(Equal(want))
	}
}

// A NIC listing that answers 404 (the scale set went after its VMs were listed) makes its VMs'
// NICs gone: members, no instances, no error, as a 404 on each NIC did.
func TestScaleSetWhoseNICListingIsGone(t *testing.T) {
	g := NewWithT(t)
	f := poolFakes()
	f.network.InterfacesServer.NewListVirtualMachineScaleSetNetworkInterfacesPager = func(string, string, *armnetwork.InterfacesClientListVirtualMachineScaleSetNetworkInterfacesOptions) (resp azfake.PagerResponder[armnetwork.InterfacesClientListVirtualMachineScaleSetNetworkInterfacesResponse]) {
		resp.AddResponseError(http.StatusNotFound, "ResourceNotFound")
		return resp
	}
	env := newTestCloud(t, f, nil, nil)
	got, err := env.cloud.ScaleSet(context.Background(), ScaleSetSelector{Name: "pool"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.Instances).To(BeEmpty())
	g.Expect(got.Members).To(HaveLen(3))
	g.Expect(env.logs.String()).To(ContainSubstring("network interface is gone"))
}
