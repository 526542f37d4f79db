package controllers

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"
	azfake "github.com/Azure/azure-sdk-for-go/sdk/azcore/fake"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	azruntime "github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	computefake "github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7/fake"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
	networkfake "github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7/fake"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/goofy-capi/cluster-api-provider-goofy/api/v1alpha1"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/azure"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/mux"
)

// The Azure backend through the reconcilers: real ARM SDK clients (made by internal/azure from
// the GoofyCluster's spec.backend.azure) talk to the SDK's own fake servers, which serve a
// resource group the test changes as it goes (instances appear and vanish).

const (
	azSub = "00000000-0000-4000-8000-0000000000a1"
	// azRG is spelled with capitals, as ARM reports it; provider IDs carry it lower-cased.
	azRG  = "Goofy-RG"
	azUID = "goofy-azure-test-uid"
	// azARMHost is the custom cloud's ARM endpoint named in the GoofyCluster: every request must go there.
	azARMHost = "management.goofy.test"
)

// azProviderID is the provider ID cloud-provider-azure gives the instance at ARM path suffix.
func azProviderID(suffix string) string {
	return "azure:///subscriptions/" + azSub + "/resourceGroups/goofy-rg/providers/Microsoft.Compute/" + suffix
}

func azResourceID(provider, suffix string) string {
	return "/subscriptions/" + azSub + "/resourceGroups/" + azRG + "/providers/" + provider + "/" + suffix
}

// fakeResourceGroup is one Azure resource group, served by the armcompute and armnetwork fake
// servers. Every request reads the current contents, so a test can add and remove instances.
type fakeResourceGroup struct {
	mu        sync.Mutex
	vms       map[string]*armcompute.VirtualMachine             // standalone VMs by name
	scaleSets map[string]*armcompute.VirtualMachineScaleSet     // uniform scale sets by name
	ssVMs     map[string][]*armcompute.VirtualMachineScaleSetVM // scale-set VMs by scale set
	nics      map[string]armnetwork.Interface                   // by NIC name, or "<scale set>/<instance>/<NIC name>"
	lbs       []*armnetwork.LoadBalancer
	publicIPs map[string]string // address by public IP resource name
	calls     map[string]int    // requests by SDK API name ("VirtualMachinesClient.NewListPager")
	unwanted  []string          // requests to another host, subscription or resource group

	compute computefake.ServerFactory
	network networkfake.ServerFactory
}

func newFakeResourceGroup() *fakeResourceGroup {
	rg := &fakeResourceGroup{
		vms: map[string]*armcompute.VirtualMachine{}, scaleSets: map[string]*armcompute.VirtualMachineScaleSet{},
		ssVMs: map[string][]*armcompute.VirtualMachineScaleSetVM{}, nics: map[string]armnetwork.Interface{},
		publicIPs: map[string]string{}, calls: map[string]int{},
	}
	rg.compute.VirtualMachinesServer.NewListPager = func(group string, _ *armcompute.VirtualMachinesClientListOptions) (resp azfake.PagerResponder[armcompute.VirtualMachinesClientListResponse]) {
		if !rg.known(group, &resp) {
			return resp
		}
		rg.mu.Lock()
		defer rg.mu.Unlock()
		names := slices.Sorted(maps.Keys(rg.vms))
		// Two VMs a page, so the controller path reads every page.
		for start := 0; start == 0 || start < len(names); start += 2 {
			page := []*armcompute.VirtualMachine{}
			for _, n := range names[start:min(start+2, len(names))] {
				page = append(page, rg.vms[n])
			}
			resp.AddPage(http.StatusOK, armcompute.VirtualMachinesClientListResponse{
				VirtualMachineListResult: armcompute.VirtualMachineListResult{Value: page}}, nil)
		}
		return resp
	}
	rg.compute.VirtualMachineScaleSetsServer.NewListPager = func(group string, _ *armcompute.VirtualMachineScaleSetsClientListOptions) (resp azfake.PagerResponder[armcompute.VirtualMachineScaleSetsClientListResponse]) {
		if !rg.known(group, &resp) {
			return resp
		}
		rg.mu.Lock()
		defer rg.mu.Unlock()
		sets := []*armcompute.VirtualMachineScaleSet{}
		for _, n := range slices.Sorted(maps.Keys(rg.scaleSets)) {
			sets = append(sets, rg.scaleSets[n])
		}
		resp.AddPage(http.StatusOK, armcompute.VirtualMachineScaleSetsClientListResponse{
			VirtualMachineScaleSetListResult: armcompute.VirtualMachineScaleSetListResult{Value: sets}}, nil)
		return resp
	}
	rg.compute.VirtualMachineScaleSetVMsServer.NewListPager = func(group, scaleSet string, _ *armcompute.VirtualMachineScaleSetVMsClientListOptions) (resp azfake.PagerResponder[armcompute.VirtualMachineScaleSetVMsClientListResponse]) {
		if !rg.known(group, &resp) {
			return resp
		}
		rg.mu.Lock()
		defer rg.mu.Unlock()
		resp.AddPage(http.StatusOK, armcompute.VirtualMachineScaleSetVMsClientListResponse{
			VirtualMachineScaleSetVMListResult: armcompute.VirtualMachineScaleSetVMListResult{Value: slices.Clone(rg.ssVMs[scaleSet])}}, nil)
		return resp
	}
	rg.network.InterfacesServer.Get = func(_ context.Context, group, name string, _ *armnetwork.InterfacesClientGetOptions) (resp azfake.Responder[armnetwork.InterfacesClientGetResponse], errResp azfake.ErrorResponder) {
		if n, ok := rg.nic(group, name); ok {
			resp.SetResponse(http.StatusOK, armnetwork.InterfacesClientGetResponse{Interface: n}, nil)
		} else {
			errResp.SetResponseError(http.StatusNotFound, "NotFound")
		}
		return
	}
	rg.network.InterfacesServer.GetVirtualMachineScaleSetNetworkInterface = func(_ context.Context, group, scaleSet, instance, name string, _ *armnetwork.InterfacesClientGetVirtualMachineScaleSetNetworkInterfaceOptions) (resp azfake.Responder[armnetwork.InterfacesClientGetVirtualMachineScaleSetNetworkInterfaceResponse], errResp azfake.ErrorResponder) {
		if n, ok := rg.nic(group, scaleSet+"/"+instance+"/"+name); ok {
			resp.SetResponse(http.StatusOK, armnetwork.InterfacesClientGetVirtualMachineScaleSetNetworkInterfaceResponse{Interface: n}, nil)
		} else {
			errResp.SetResponseError(http.StatusNotFound, "NotFound")
		}
		return
	}
	rg.network.InterfacesServer.NewListPager = func(group string, _ *armnetwork.InterfacesClientListOptions) (resp azfake.PagerResponder[armnetwork.InterfacesClientListResponse]) {
		if !rg.known(group, &resp) {
			return resp
		}
		resp.AddPage(http.StatusOK, armnetwork.InterfacesClientListResponse{
			InterfaceListResult: armnetwork.InterfaceListResult{Value: rg.nicsWhere(func(key string) bool { return !strings.Contains(key, "/") })}}, nil)
		return resp
	}
	rg.network.InterfacesServer.NewListVirtualMachineScaleSetNetworkInterfacesPager = func(group, scaleSet string, _ *armnetwork.InterfacesClientListVirtualMachineScaleSetNetworkInterfacesOptions) (resp azfake.PagerResponder[armnetwork.InterfacesClientListVirtualMachineScaleSetNetworkInterfacesResponse]) {
		if !rg.known(group, &resp) {
			return resp
		}
		resp.AddPage(http.StatusOK, armnetwork.InterfacesClientListVirtualMachineScaleSetNetworkInterfacesResponse{
			InterfaceListResult: armnetwork.InterfaceListResult{Value: rg.nicsWhere(func(key string) bool { return strings.HasPrefix(key, scaleSet+"/") })}}, nil)
		return resp
	}
	rg.network.LoadBalancersServer.NewListPager = func(group string, _ *armnetwork.LoadBalancersClientListOptions) (resp azfake.PagerResponder[armnetwork.LoadBalancersClientListResponse]) {
		if !rg.known(group, &resp) {
			return resp
		}
		rg.mu.Lock()
		defer rg.mu.Unlock()
		resp.AddPage(http.StatusOK, armnetwork.LoadBalancersClientListResponse{
			LoadBalancerListResult: armnetwork.LoadBalancerListResult{Value: slices.Clone(rg.lbs)}}, nil)
		return resp
	}
	rg.network.PublicIPAddressesServer.Get = func(_ context.Context, group, name string, _ *armnetwork.PublicIPAddressesClientGetOptions) (resp azfake.Responder[armnetwork.PublicIPAddressesClientGetResponse], errResp azfake.ErrorResponder) {
		rg.mu.Lock()
		addr, ok := rg.publicIPs[name]
		rg.mu.Unlock()
		if !ok || !strings.EqualFold(group, azRG) {
			errResp.SetResponseError(http.StatusNotFound, "ResourceNotFound")
			return
		}
		resp.SetResponse(http.StatusOK, armnetwork.PublicIPAddressesClientGetResponse{PublicIPAddress: armnetwork.PublicIPAddress{
			Name: to.Ptr(name), Properties: &armnetwork.PublicIPAddressPropertiesFormat{IPAddress: to.Ptr(addr)}}}, nil)
		return
	}
	return rg
}

// known answers a list in another resource group with ARM's 404.
func (rg *fakeResourceGroup) known(group string, resp interface{ AddResponseError(int, string) }) bool {
	if strings.EqualFold(group, azRG) {
		return true
	}
	resp.AddResponseError(http.StatusNotFound, "ResourceGroupNotFound")
	return false
}

func (rg *fakeResourceGroup) nic(group, key string) (armnetwork.Interface, bool) {
	rg.mu.Lock()
	defer rg.mu.Unlock()
	n, ok := rg.nics[key]
	return n, ok && strings.EqualFold(group, azRG)
}

// nicsWhere lists the NICs whose keys match, as ARM's NIC listings answer: each with its ID and
// properties.virtualMachine.id (the VM is the NIC ID's parent for scale-set NICs; a standalone NIC
// of the fakes names no VM, and is found by its own ID).
func (rg *fakeResourceGroup) nicsWhere(match func(key string) bool) []*armnetwork.Interface {
	rg.mu.Lock()
	defer rg.mu.Unlock()
	var list []*armnetwork.Interface
	for _, key := range slices.Sorted(maps.Keys(rg.nics)) {
		if !match(key) {
			continue
		}
		n := rg.nics[key]
		if vm, _, ok := strings.Cut(ptr.Deref(n.ID, ""), "/networkInterfaces/"); ok && strings.Contains(key, "/") {
			props := *n.Properties
			props.VirtualMachine = &armnetwork.SubResource{ID: to.Ptr(vm)}
			n.Properties = &props
		}
		list = append(list, &n)
	}
	return list
}

func azTags(uid, role string) map[string]*string {
	return map[string]*string{azure.DefaultUIDTagKey: to.Ptr(uid), azure.DefaultRoleTagKey: to.Ptr(role)}
}

func azNIC(id, ip string) armnetwork.Interface {
	return armnetwork.Interface{ID: to.Ptr(id), Properties: &armnetwork.InterfacePropertiesFormat{
		IPConfigurations: []*armnetwork.InterfaceIPConfiguration{{Properties: &armnetwork.InterfaceIPConfigurationPropertiesFormat{
			Primary: to.Ptr(true), PrivateIPAddress: to.Ptr(ip)}}},
	}}
}

func azNICRef(id string) *armcompute.NetworkProfile {
	return &armcompute.NetworkProfile{NetworkInterfaces: []*armcompute.NetworkInterfaceReference{{
		ID: to.Ptr(id), Properties: &armcompute.NetworkInterfaceReferenceProperties{Primary: to.Ptr(true)}}}}
}

// addVM adds a standalone VM (tagged with uid and role) and its NIC with the private IP ip.
func (rg *fakeResourceGroup) addVM(name, uid, role, zone, ip string) {
	rg.mu.Lock()
	defer rg.mu.Unlock()
	nicID := azResourceID("Microsoft.Network", "networkInterfaces/"+name+"-nic")
	rg.vms[name] = &armcompute.VirtualMachine{
		ID: to.Ptr(azResourceID("Microsoft.Compute", "virtualMachines/"+name)), Name: to.Ptr(name),
		Tags: azTags(uid, role), Zones: []*string{to.Ptr(zone)},
		Properties: &armcompute.VirtualMachineProperties{NetworkProfile: azNICRef(nicID),
			OSProfile: &armcompute.OSProfile{ComputerName: to.Ptr(name)}},
	}
	rg.nics[name+"-nic"] = azNIC(nicID, ip)
}

// removeVM deletes a standalone VM and its NIC.
func (rg *fakeResourceGroup) removeVM(name string) {
	rg.mu.Lock()
	defer rg.mu.Unlock()
	delete(rg.vms, name)
	delete(rg.nics, name+"-nic")
}

// addScaleSet adds an empty uniform scale set whose tags (cluster UID and role) its VMs inherit.
func (rg *fakeResourceGroup) addScaleSet(name, role string) {
	rg.mu.Lock()
	defer rg.mu.Unlock()
	rg.scaleSets[name] = &armcompute.VirtualMachineScaleSet{
		ID: to.Ptr(azResourceID("Microsoft.Compute", "virtualMachineScaleSets/"+name)), Name: to.Ptr(name), Tags: azTags(azUID, role),
		Properties: &armcompute.VirtualMachineScaleSetProperties{OrchestrationMode: to.Ptr(armcompute.OrchestrationModeUniform)},
	}
}

// addScaleSetVM scales a scale set out by one instance with its computer name, zone and NIC IP.
func (rg *fakeResourceGroup) addScaleSetVM(scaleSet, instance, computerName, zone, ip string) {
	rg.mu.Lock()
	defer rg.mu.Unlock()
	id := azResourceID("Microsoft.Compute", "virtualMachineScaleSets/"+scaleSet+"/virtualMachines/"+instance)
	rg.ssVMs[scaleSet] = append(rg.ssVMs[scaleSet], &armcompute.VirtualMachineScaleSetVM{
		ID: to.Ptr(id), Name: to.Ptr(scaleSet + "_" + instance), InstanceID: to.Ptr(instance), Zones: []*string{to.Ptr(zone)},
		Properties: &armcompute.VirtualMachineScaleSetVMProperties{NetworkProfile: azNICRef(id + "/networkInterfaces/" + scaleSet + "-nic"),
			OSProfile: &armcompute.OSProfile{ComputerName: to.Ptr(computerName)}},
	})
	rg.nics[scaleSet+"/"+instance+"/"+scaleSet+"-nic"] = azNIC(id+"/networkInterfaces/"+scaleSet+"-nic", ip)
}

// addPublicLoadBalancer adds a load balancer tagged with uid whose frontend is the public IP
// resource ipName with address addr.
func (rg *fakeResourceGroup) addPublicLoadBalancer(name, uid, ipName, addr string) {
	rg.mu.Lock()
	defer rg.mu.Unlock()
	rg.publicIPs[ipName] = addr
	rg.lbs = append(rg.lbs, &armnetwork.LoadBalancer{
		Name: to.Ptr(name), Tags: map[string]*string{azure.DefaultUIDTagKey: to.Ptr(uid)},
		Properties: &armnetwork.LoadBalancerPropertiesFormat{FrontendIPConfigurations: []*armnetwork.FrontendIPConfiguration{{
			Properties: &armnetwork.FrontendIPConfigurationPropertiesFormat{PublicIPAddress: &armnetwork.PublicIPAddress{
				ID: to.Ptr(azResourceID("Microsoft.Network", "publicIPAddresses/"+ipName))}}}}},
	})
}

func (rg *fakeResourceGroup) callCount(api string) int {
	rg.mu.Lock()
	defer rg.mu.Unlock()
	return rg.calls[api]
}

// totalCalls is the number of requests the fakes received.
func (rg *fakeResourceGroup) totalCalls() int {
	rg.mu.Lock()
	defer rg.mu.Unlock()
	n := 0
	for _, c := range rg.calls {
		n += c
	}
	return n
}

func (rg *fakeResourceGroup) unwantedRequests() []string {
	rg.mu.Lock()
	defer rg.mu.Unlock()
	return slices.Clone(rg.unwanted)
}

// transport hands each request to the fake server of the SDK module whose client sent it (the
// SDK names the client in the request context), counting requests and noting any sent elsewhere
// than the configured cloud, subscription and resource group.
func (rg *fakeResourceGroup) transport() policy.Transporter {
	compute := computefake.NewServerFactoryTransport(&rg.compute)
	network := networkfake.NewServerFactoryTransport(&rg.network)
	return transportFunc(func(req *http.Request) (*http.Response, error) {
		api, _ := req.Context().Value(azruntime.CtxAPINameKey{}).(string)
		rg.mu.Lock()
		rg.calls[api]++
		if req.URL.Host != azARMHost || !strings.HasPrefix(req.URL.Path, "/subscriptions/"+azSub+"/resourceGroups/"+azRG+"/") {
			rg.unwanted = append(rg.unwanted, req.URL.String())
		}
		rg.mu.Unlock()
		// The fakes answer at once; keep a cancelled caller from racing their dispatch goroutine.
		req = req.WithContext(context.WithoutCancel(req.Context()))
		switch client, _, _ := strings.Cut(api, "."); client {
		case "InterfacesClient", "LoadBalancersClient", "PublicIPAddressesClient":
			return network.Do(req)
		default:
			return compute.Do(req)
		}
	})
}

type transportFunc func(*http.Request) (*http.Response, error)

func (f transportFunc) Do(req *http.Request) (*http.Response, error) { return f(req) }

// useAzure gives both reconcilers one new AzureClouds over rg, as the manager does at start-up:
// calling it again is a restart of the provider as far as Azure is concerned (no claims, no cache).
func (h *harness) useAzure(rg *fakeResourceGroup) *AzureClouds {
	clouds := &AzureClouds{
		Credential: &azfake.TokenCredential{},
		ClientOptions: &arm.ClientOptions{ClientOptions: policy.ClientOptions{
			Transport: rg.transport(),
			Retry:     policy.RetryOptions{MaxRetries: -1}, // a failing fake fails at once
		}},
		Clock: h.clock,
	}
	h.clusterR.Azure, h.machineR.Azure = clouds, clouds
	return clouds
}

// azCustomCloud is the custom cloud whose ARM endpoint only the fakes serve.
func azCustomCloud() *infrav1.AzureCloud {
	return &infrav1.AzureCloud{Name: infrav1.AzureCustomCloud, ResourceManagerEndpoint: "https://" + azARMHost,
		ResourceManagerAudience: "https://" + azARMHost, ActiveDirectoryAuthorityHost: "https://login.goofy.test"}
}

// newAzureIdentity creates a GoofyAzureClusterIdentity (cluster-scoped, named after the test's
// namespace) for the custom cloud, allowing the given namespaces.
func newAzureIdentity(t testing.TB, name string, allowed *infrav1.AllowedNamespaces) *infrav1.GoofyAzureClusterIdentity {
	t.Helper()
	id := &infrav1.GoofyAzureClusterIdentity{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: infrav1.GoofyAzureClusterIdentitySpec{AllowedNamespaces: allowed, Cloud: azCustomCloud()}}
	if err := k8sClient.Create(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8sClient.Delete(context.Background(), id) })
	return id
}

// newAzureFixture is newFixture with the GoofyCluster switched to the Azure backend in a custom
// cloud whose ARM endpoint only the fakes serve, through an identity that allows its namespace.
func newAzureFixture(t testing.TB, name string) *fixture {
	t.Helper()
	ns := newNamespace(t)
	id := newAzureIdentity(t, ns, &infrav1.AllowedNamespaces{NamespaceList: []string{ns}})
	return newAzureFixtureWith(t, ns, name, &infrav1.AzureClusterBackend{
		SubscriptionID: azSub, ResourceGroup: azRG, ClusterUID: azUID,
		IdentityRef: &infrav1.GoofyAzureClusterIdentityReference{Name: id.Name},
	})
}

// newAzureFixtureWith is newFixture in ns with the GoofyCluster on the given Azure backend.
func newAzureFixtureWith(t testing.TB, ns, name string, backend *infrav1.AzureClusterBackend) *fixture {
	t.Helper()
	f := newFixture(t, ns, name, nil)
	get(t, f.gc)
	f.gc.Spec.Backend = infrav1.GoofyClusterBackend{Azure: backend}
	if err := k8sClient.Update(context.Background(), f.gc); err != nil {
		t.Fatal(err)
	}
	return f
}

// newAzureMachine is newMachine with the GoofyMachine on the Azure backend, as an Azure
// GoofyMachineTemplate would clone it.
func newAzureMachine(t testing.TB, f *fixture, name string, o machineOpts) *infrav1.GoofyMachine {
	t.Helper()
	_, gm := newMachine(t, f, name, o)
	gm.Spec.Backend = infrav1.GoofyMachineBackend{Azure: &infrav1.AzureMachineBackend{}}
	if err := k8sClient.Update(context.Background(), gm); err != nil {
		t.Fatal(err)
	}
	return gm
}

// expectBound checks a machine's Azure identity: provider ID, hostname and private IP, zone, Ready.
func expectBound(t testing.TB, gm *infrav1.GoofyMachine, providerID, hostname, ip, zone string) {
	t.Helper()
	g := NewWithT(t)
	get(t, gm)
	g.Expect(gm.Spec.ProviderID).To(Equal(providerID), gm.Name)
	g.Expect(gm.Status.Addresses).To(Equal([]clusterv1.MachineAddress{
		{Type: clusterv1.MachineHostName, Address: hostname},
		{Type: clusterv1.MachineInternalIP, Address: ip},
	}), gm.Name)
	g.Expect(gm.Status.FailureDomain).To(Equal(zone), gm.Name)
	g.Expect(gm.Status.Initialization.Provisioned).To(Equal(ptr.To(true)), gm.Name)
	g.Expect(gm.Status.Conditions).To(haveCondition(infrav1.ReadyCondition, metav1.ConditionTrue, infrav1.ReadyReason), gm.Name)
}

// expectWaiting reconciles a machine that has no free instance: it asks to be requeued, records
// why, and has no identity.
func (h *harness) expectWaiting(t testing.TB, gm *infrav1.GoofyMachine, wantMessage string) {
	t.Helper()
	g := NewWithT(t)
	g.Expect(h.reconcileMachine(t, gm)).To(Equal(ctrl.Result{RequeueAfter: azureNoInstanceRetry}), gm.Name)
	get(t, gm)
	g.Expect(gm.Spec.ProviderID).To(BeEmpty(), gm.Name)
	g.Expect(gm.Status.Addresses).To(BeEmpty(), gm.Name)
	g.Expect(gm.Status.Initialization.Provisioned).To(BeNil(), gm.Name)
	g.Expect(gm.Status.Conditions).To(haveCondition(infrav1.VMProvisionedCondition, metav1.ConditionFalse, infrav1.NoFreeInstanceReason), gm.Name)
	g.Expect(gm.Status.Conditions).To(haveCondition(infrav1.ReadyCondition, metav1.ConditionFalse, infrav1.NoFreeInstanceReason), gm.Name)
	g.Expect(condition(gm, infrav1.VMProvisionedCondition).Message).To(ContainSubstring(wantMessage), gm.Name)
}

// expectDistinctProviderIDs checks that no two GoofyMachines of the namespace share an instance,
// whatever the letter case, and returns how many are bound.
func expectDistinctProviderIDs(t testing.TB, ns string) int {
	t.Helper()
	list := &infrav1.GoofyMachineList{}
	if err := k8sClient.List(context.Background(), list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	owner := map[string]string{}
	for _, gm := range list.Items {
		if gm.Spec.ProviderID == "" {
			continue
		}
		id := strings.ToLower(gm.Spec.ProviderID)
		if other, dup := owner[id]; dup {
			t.Fatalf("machines %s and %s are both bound to %s", other, gm.Name, gm.Spec.ProviderID)
		}
		owner[id] = gm.Name
	}
	return len(owner)
}

func nodeReady(t testing.TB, h *harness, f *fixture, name string) corev1.ConditionStatus {
	t.Helper()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := storeGet(h, f, node); err != nil {
		t.Fatalf("node %s: %v", name, err)
	}
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status
		}
	}
	return corev1.ConditionUnknown
}

// TestAzureMachinesBindToInstances runs an Azure-backed cluster through the reconcilers: the
// GoofyCluster reports the load balancer and the zones; machines bind to instances of their role
// (and zone), never two to one instance, and wait while none is free; a vanished instance makes
// its node NotReady; and after a restart (new AzureClouds, no in-memory claims) the instances
// recorded in other machines' spec.providerID stay taken.
func TestAzureMachinesBindToInstances(t *testing.T) {
	requireEnv(t)
	g := NewWithT(t)
	ctx := context.Background()

	rg := newFakeResourceGroup()
	rg.addScaleSet("cp", "control-plane")
	rg.addScaleSetVM("cp", "0", "cp-ss000000", "1", "10.0.1.4")
	rg.addVM("cp-vm-1", azUID, "control-plane", "2", "10.0.2.4")
	rg.addVM("wrk-vm-0", azUID, "worker", "3", "10.0.3.4")
	rg.addVM("stranger-0", "another-cluster", "worker", "3", "10.0.3.9") // free, but not ours
	rg.addScaleSet("workers", "worker")                                  // scaled to zero for now
	rg.addPublicLoadBalancer("goofy-lb", azUID, "goofy-lb-ip", "20.30.40.50")
	rg.addPublicLoadBalancer("other-lb", "another-cluster", "other-lb-ip", "20.30.40.99")
	cpSS0 := azProviderID("virtualMachineScaleSets/cp/virtualMachines/0")
	cpVM1 := azProviderID("virtualMachines/cp-vm-1")
	wrkVM0 := azProviderID("virtualMachines/wrk-vm-0")

	h := newHarness(t)
	h.useAzure(rg)
	f := newAzureFixture(t, "az")

	// The GoofyCluster: the mux still serves the (simulated) control plane; the Azure load
	// balancer's endpoint and the instances' zones are reported.
	h.provisionCluster(t, f)
	l, ok := h.mux.Listener(mux.ClusterKey(f.ns, "az"))
	g.Expect(ok).To(BeTrue())
	g.Expect(f.gc.Spec.ControlPlaneEndpoint).To(Equal(clusterv1.APIEndpoint{Host: l.Host(), Port: int32(l.Port())}))
	g.Expect(f.gc.Status.LoadBalancerEndpoint).To(Equal(&clusterv1.APIEndpoint{Host: "20.30.40.50", Port: 6443}))
	g.Expect(f.gc.Status.FailureDomains).To(Equal([]clusterv1.FailureDomain{
		{Name: "1", ControlPlane: ptr.To(true)},
		{Name: "2", ControlPlane: ptr.To(true)},
		{Name: "3", ControlPlane: ptr.To(false)}, // workers only
	}))
	g.Expect(f.gc.Status.Conditions).To(ContainElement(And(HaveField("Type", infrav1.ReadyCondition), HaveField("Status", metav1.ConditionTrue))))

	// Control plane: cp-0 asks for zone 2 and gets the instance there, although the zone-1
	// instance comes first by name; cp-1 takes the other one; cp-2 finds none left.
	cp0 := newAzureMachine(t, f, "az-cp-0", machineOpts{controlPlane: true, failureDomain: "2"})
	h.reconcileUntilReady(t, cp0)
	expectBound(t, cp0, cpVM1, "cp-vm-1", "10.0.2.4", "2")
	cp1 := newAzureMachine(t, f, "az-cp-1", machineOpts{controlPlane: true})
	h.reconcileUntilReady(t, cp1)
	expectBound(t, cp1, cpSS0, "cp-ss000000", "10.0.1.4", "1")
	cp2 := newAzureMachine(t, f, "az-cp-2", machineOpts{controlPlane: true})
	h.reconcileMachine(t, cp2) // Paused condition
	h.reconcileMachine(t, cp2) // finalizer
	h.expectWaiting(t, cp2, "no free control-plane instance")
	h.expectWaiting(t, cp2, "no free control-plane instance")

	// Workers, once the control plane is up: one instance of ours for two machines (the other
	// cluster's VM is not a candidate).
	get(t, f.cluster)
	f.cluster.Status.Initialization.ControlPlaneInitialized = ptr.To(true)
	g.Expect(k8sClient.Status().Update(ctx, f.cluster)).To(Succeed())
	md0 := newAzureMachine(t, f, "az-md-0", machineOpts{})
	h.reconcileUntilReady(t, md0)
	expectBound(t, md0, wrkVM0, "wrk-vm-0", "10.0.3.4", "3")
	md1 := newAzureMachine(t, f, "az-md-1", machineOpts{})
	h.reconcileMachine(t, md1)
	h.reconcileMachine(t, md1)
	h.expectWaiting(t, md1, "no free worker instance")
	// A machine bound to a live instance is rechecked later.
	g.Expect(h.reconcileMachine(t, md0)).To(Equal(ctrl.Result{RequeueAfter: azureRecheckInterval}))
	g.Expect(expectDistinctProviderIDs(t, f.ns)).To(Equal(3))

	// The simulated nodes look like Azure nodes: same provider ID and private IP.
	cs := workloadClient(t, l)
	expectKubeadmNode(t, cs, "az-cp-0", cpVM1, "10.0.2.4", true)
	expectKubeadmNode(t, cs, "az-cp-1", cpSS0, "10.0.1.4", true)
	expectKubeadmNode(t, cs, "az-md-0", wrkVM0, "10.0.3.4", false)
	expectControlPlanePods(t, cs, "az-cp-1", "10.0.1.4")
	for _, waiting := range []string{"az-cp-2", "az-md-1"} {
		_, err := cs.CoreV1().Nodes().Get(ctx, waiting, metav1.GetOptions{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "node %s: %v", waiting, err)
	}
	// One client set per cluster, and within the cache's lifetime one listing for all of the above.
	g.Expect(rg.callCount("VirtualMachinesClient.NewListPager")).To(Equal(2), "two pages, one listing")
	g.Expect(rg.unwantedRequests()).To(BeEmpty())

	// cp-vm-1 is deleted in Azure. Until the cached list ages out nothing changes; then its
	// machine keeps its identity, reports the instance gone, and its node turns NotReady so a
	// MachineHealthCheck can replace it. The instance does not become free for cp-2 either.
	rg.removeVM("cp-vm-1")
	h.reconcileMachine(t, cp0)
	g.Expect(nodeReady(t, h, f, "az-cp-0")).To(Equal(corev1.ConditionTrue))
	h.clock.Step(azureInstancesTTL)
	g.Expect(h.reconcileMachine(t, cp0)).To(Equal(ctrl.Result{RequeueAfter: azureRecheckInterval}))
	get(t, cp0)
	g.Expect(cp0.Spec.ProviderID).To(Equal(cpVM1))
	g.Expect(cp0.Status.Addresses).To(ContainElement(clusterv1.MachineAddress{Type: clusterv1.MachineInternalIP, Address: "10.0.2.4"}))
	g.Expect(cp0.Status.Conditions).To(haveCondition(infrav1.ReadyCondition, metav1.ConditionFalse, infrav1.InstanceGoneReason))
	g.Expect(condition(cp0, infrav1.ReadyCondition).Message).To(ContainSubstring(cpVM1))
	g.Expect(nodeReady(t, h, f, "az-cp-0")).To(Equal(corev1.ConditionFalse))
	h.reconcileMachine(t, cp1)
	expectBound(t, cp1, cpSS0, "cp-ss000000", "10.0.1.4", "1")
	g.Expect(nodeReady(t, h, f, "az-cp-1")).To(Equal(corev1.ConditionTrue))
	h.expectWaiting(t, cp2, "no free control-plane instance")

	// A new control-plane VM appears: the waiting machine takes it.
	rg.addVM("cp-vm-2", azUID, "control-plane", "1", "10.0.1.5")
	h.clock.Step(azureInstancesTTL)
	h.reconcileUntilReady(t, cp2)
	expectBound(t, cp2, azProviderID("virtualMachines/cp-vm-2"), "cp-vm-2", "10.0.1.5", "1")
	expectKubeadmNode(t, cs, "az-cp-2", cp2.Spec.ProviderID, "10.0.1.5", true)

	// Restart: a new AzureClouds has no claims in memory. The worker instance is recorded only in
	// md-0's spec.providerID, and that is enough to keep md-1 off it. Bound machines keep their
	// identities, and the vanished instance is still reported gone.
	h.useAzure(rg)
	h.expectWaiting(t, md1, "no free worker instance")
	h.reconcileMachine(t, md0)
	expectBound(t, md0, wrkVM0, "wrk-vm-0", "10.0.3.4", "3")
	h.reconcileMachine(t, cp0)
	get(t, cp0)
	g.Expect(cp0.Status.Conditions).To(haveCondition(infrav1.ReadyCondition, metav1.ConditionFalse, infrav1.InstanceGoneReason))
	g.Expect(nodeReady(t, h, f, "az-cp-0")).To(Equal(corev1.ConditionFalse))

	// The worker scale set scales out by one: md-1 binds to that instance, not to md-0's.
	rg.addScaleSetVM("workers", "7", "workers000007", "2", "10.0.4.7")
	h.clock.Step(azureInstancesTTL)
	h.reconcileUntilReady(t, md1)
	expectBound(t, md1, azProviderID("virtualMachineScaleSets/workers/virtualMachines/7"), "workers000007", "10.0.4.7", "2")
	expectKubeadmNode(t, cs, "az-md-1", md1.Spec.ProviderID, "10.0.4.7", false)

	// The zones follow the instances: zone 2 now holds only a worker.
	h.reconcileCluster(t, f.gc)
	get(t, f.gc)
	g.Expect(f.gc.Status.FailureDomains).To(Equal([]clusterv1.FailureDomain{
		{Name: "1", ControlPlane: ptr.To(true)},
		{Name: "2", ControlPlane: ptr.To(false)},
		{Name: "3", ControlPlane: ptr.To(false)},
	}))
	g.Expect(expectDistinctProviderIDs(t, f.ns)).To(Equal(5))
	g.Expect(rg.unwantedRequests()).To(BeEmpty())
}

// TestAzureConcurrentMachinesShareNoInstance: two waiting workers reconciled at the same time for
// one new instance; exactly one binds, the other keeps waiting (the claim is taken in memory
// before either machine has written its spec.providerID).
func TestAzureConcurrentMachinesShareNoInstance(t *testing.T) {
	requireEnv(t)
	g := NewWithT(t)
	ctx := context.Background()

	rg := newFakeResourceGroup()
	rg.addVM("cp-vm-0", azUID, "control-plane", "1", "10.0.1.4")
	rg.addPublicLoadBalancer("goofy-lb", azUID, "goofy-lb-ip", "20.30.40.50")
	h := newHarness(t)
	h.useAzure(rg)
	f := newAzureFixture(t, "azc")
	h.provisionCluster(t, f)
	get(t, f.cluster)
	f.cluster.Status.Initialization.ControlPlaneInitialized = ptr.To(true)
	g.Expect(k8sClient.Status().Update(ctx, f.cluster)).To(Succeed())

	var workers []*infrav1.GoofyMachine
	for i := range 2 {
		gm := newAzureMachine(t, f, fmt.Sprintf("azc-md-%d", i), machineOpts{})
		h.reconcileMachine(t, gm)
		h.reconcileMachine(t, gm)
		h.expectWaiting(t, gm, "no free worker instance")
		workers = append(workers, gm)
	}

	rg.addVM("wrk-vm-0", azUID, "worker", "2", "10.0.2.4")
	h.clock.Step(azureInstancesTTL)
	// Refresh the shared cache first, so that both reconciles below race for the claim, not the listing.
	h.reconcileCluster(t, f.gc)

	errs := make(chan error, len(workers))
	for _, gm := range workers {
		go func() {
			_, err := h.machineR.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(gm)})
			errs <- err
		}()
	}
	for range workers {
		g.Expect(<-errs).NotTo(HaveOccurred())
	}
	var bound, waiting []string
	for _, gm := range workers {
		get(t, gm)
		if gm.Spec.ProviderID != "" {
			bound = append(bound, gm.Name)
			g.Expect(gm.Spec.ProviderID).To(Equal(azProviderID("virtualMachines/wrk-vm-0")))
		} else {
			waiting = append(waiting, gm.Name)
			g.Expect(gm.Status.Conditions).To(haveCondition(infrav1.VMProvisionedCondition, metav1.ConditionFalse, infrav1.NoFreeInstanceReason))
		}
	}
	g.Expect(bound).To(HaveLen(1))
	g.Expect(waiting).To(HaveLen(1))
	g.Expect(expectDistinctProviderIDs(t, f.ns)).To(Equal(1))
}
