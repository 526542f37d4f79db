package controllers

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	azfake "github.com/Azure/azure-sdk-for-go/sdk/azcore/fake"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/goofy-capi/cluster-api-provider-goofy/api/v1alpha1"
)

// GoofyMachinePools on the Azure backend: the pool reconciler and the GoofyMachine reconciler
// over real ARM SDK clients talking to the SDK's fake servers (fakeResourceGroup), with a
// resource group the tests change as they go (scale sets scale, vanish and come back).

// scaleSetFakes adds what the pools read beyond fakeResourceGroup: a scale set by name (404 when
// absent), and a record of the $filter of every VM listing. failGet, when set, answers the next
// scale-set reads with that status.
type scaleSetFakes struct {
	rg *fakeResourceGroup

	mu      sync.Mutex
	filters []string
	failGet []int
}

func newScaleSetFakes(rg *fakeResourceGroup) *scaleSetFakes {
	f := &scaleSetFakes{rg: rg}
	rg.compute.VirtualMachineScaleSetsServer.Get = func(_ context.Context, group, name string, _ *armcompute.VirtualMachineScaleSetsClientGetOptions) (resp azfake.Responder[armcompute.VirtualMachineScaleSetsClientGetResponse], errResp azfake.ErrorResponder) {
		f.mu.Lock()
		if len(f.failGet) > 0 {
			status := f.failGet[0]
			f.failGet = f.failGet[1:]
			f.mu.Unlock()
			errResp.SetResponseError(status, http.StatusText(status))
			return
		}
		f.mu.Unlock()
		rg.mu.Lock()
		ss, ok := rg.scaleSets[name]
		rg.mu.Unlock()
		if !ok || !strings.EqualFold(group, azRG) {
			errResp.SetResponseError(http.StatusNotFound, "ResourceNotFound")
			return
		}
		resp.SetResponse(http.StatusOK, armcompute.VirtualMachineScaleSetsClientGetResponse{VirtualMachineScaleSet: *ss}, nil)
		return
	}
	list := rg.compute.VirtualMachinesServer.NewListPager
	rg.compute.VirtualMachinesServer.NewListPager = func(group string, o *armcompute.VirtualMachinesClientListOptions) azfake.PagerResponder[armcompute.VirtualMachinesClientListResponse] {
		f.mu.Lock()
		if o != nil && o.Filter != nil {
			f.filters = append(f.filters, *o.Filter)
		}
		f.mu.Unlock()
		return list(group, o) // every VM of the group, whatever the filter: the client checks each VM's scale set
	}
	return f
}

func (f *scaleSetFakes) vmFilters() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.filters)
}

func (f *scaleSetFakes) failNextGets(statuses ...int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failGet = append(f.failGet, statuses...)
}

// setCapacity sets a scale set's sku.capacity.
func (f *scaleSetFakes) setCapacity(name string, n int64) {
	f.rg.mu.Lock()
	defer f.rg.mu.Unlock()
	f.rg.scaleSets[name].SKU = &armcompute.SKU{Name: to.Ptr("Standard_D2s_v5"), Capacity: to.Ptr(n)}
}

// addFlexibleScaleSet adds a flexible scale set with the given tags and no capacity.
func (f *scaleSetFakes) addFlexibleScaleSet(name string, tags map[string]*string) {
	f.rg.mu.Lock()
	defer f.rg.mu.Unlock()
	f.rg.scaleSets[name] = &armcompute.VirtualMachineScaleSet{
		ID: to.Ptr(azResourceID("Microsoft.Compute", "virtualMachineScaleSets/"+name)), Name: to.Ptr(name), Tags: tags,
		Properties: &armcompute.VirtualMachineScaleSetProperties{OrchestrationMode: to.Ptr(armcompute.OrchestrationModeFlexible)},
	}
}

// addFlexibleVM adds a VM of a flexible scale set: an ordinary VM of the group, without the
// cluster's tags, whose virtualMachineScaleSet is the set.
func (f *scaleSetFakes) addFlexibleVM(scaleSet, name, zone, ip string) {
	f.rg.addVM(name, "", "", zone, ip)
	f.rg.mu.Lock()
	defer f.rg.mu.Unlock()
	vm := f.rg.vms[name]
	vm.Tags = nil
	vm.Properties.VirtualMachineScaleSet = &armcompute.SubResource{ID: to.Ptr(azResourceID("Microsoft.Compute", "virtualMachineScaleSets/"+scaleSet))}
}

// removeScaleSetVM scales a uniform scale set in by one instance.
func (f *scaleSetFakes) removeScaleSetVM(scaleSet, instance string) {
	f.rg.mu.Lock()
	defer f.rg.mu.Unlock()
	f.rg.ssVMs[scaleSet] = slices.DeleteFunc(f.rg.ssVMs[scaleSet], func(vm *armcompute.VirtualMachineScaleSetVM) bool { return *vm.InstanceID == instance })
}

// takeScaleSet deletes a uniform scale set (and its VMs) from the group and returns what it held,
// for putScaleSet.
func (f *scaleSetFakes) takeScaleSet(name string) (*armcompute.VirtualMachineScaleSet, []*armcompute.VirtualMachineScaleSetVM) {
	f.rg.mu.Lock()
	defer f.rg.mu.Unlock()
	ss, vms := f.rg.scaleSets[name], f.rg.ssVMs[name]
	delete(f.rg.scaleSets, name)
	delete(f.rg.ssVMs, name)
	return ss, vms
}

func (f *scaleSetFakes) putScaleSet(ss *armcompute.VirtualMachineScaleSet, vms []*armcompute.VirtualMachineScaleSetVM) {
	f.rg.mu.Lock()
	defer f.rg.mu.Unlock()
	f.rg.scaleSets[*ss.Name], f.rg.ssVMs[*ss.Name] = ss, vms
}

// azurePoolEnv is an Azure-backed cluster with a control-plane VM and its load balancer,
// provisioned, its control plane initialized (workers may join).
type azurePoolEnv struct {
	h      *harness
	f      *fixture
	fakes  *scaleSetFakes
	clouds *AzureClouds
}

func newAzurePoolEnv(t *testing.T, name string, setup func(*scaleSetFakes)) *azurePoolEnv {
	t.Helper()
	rg := newFakeResourceGroup()
	rg.addVM("cp-vm-0", azUID, "control-plane", "1", "10.0.1.4")
	rg.addPublicLoadBalancer("goofy-lb", azUID, "goofy-lb-ip", "20.30.40.50")
	fakes := newScaleSetFakes(rg)
	setup(fakes)
	h := newHarness(t)
	clouds := h.useAzure(rg)
	f := newAzureFixture(t, name)
	h.provisionCluster(t, f)
	get(t, f.cluster)
	f.cluster.Status.Initialization.ControlPlaneInitialized = ptr.To(true)
	if err := k8sClient.Status().Update(context.Background(), f.cluster); err != nil {
		t.Fatal(err)
	}
	return &azurePoolEnv{h: h, f: f, fakes: fakes, clouds: clouds}
}

// newAzurePool is newPool with spec.azure.scaleSet and the reconciler's Azure pool backend.
func (e *azurePoolEnv) newAzurePool(t *testing.T, name string, replicas int32, sel *infrav1.AzureScaleSetSelector) *poolFixture {
	t.Helper()
	p := newPool(t, e.f, name, replicas)
	if sel != nil {
		p.pool.Spec.Azure = &infrav1.AzureMachinePoolBackend{ScaleSet: *sel}
		if err := k8sClient.Update(context.Background(), p.pool); err != nil {
			t.Fatal(err)
		}
	}
	p.r.chooseBackend = func(*machinePoolScope) MachinePoolBackend {
		return newAzureMachinePoolBackend(k8sClient, k8sClient, e.clouds)
	}
	return p
}

// instanceFor is the pool's instance GoofyMachine with the provider ID.
func instanceFor(t *testing.T, p *poolFixture, providerID string) *infrav1.GoofyMachine {
	t.Helper()
	for _, gm := range ptrs(p.instances(t)) {
		if gm.Spec.ProviderID == providerID {
			return gm
		}
	}
	t.Fatalf("no instance of pool %s has provider ID %s", p.pool.Name, providerID)
	return nil
}

// expectPoolInstance checks that an instance bound to its VM (host name, private IP, zone) and
// that its simulated Node carries the VM's provider ID and IP and is Ready.
func (e *azurePoolEnv) expectPoolInstance(t *testing.T, gm *infrav1.GoofyMachine, providerID, hostname, ip, zone string) {
	t.Helper()
	g := NewWithT(t)
	e.h.reconcileUntilReady(t, gm)
	get(t, gm)
	g.Expect(gm.Spec.ProviderID).To(Equal(providerID))
	g.Expect(gm.Status.Addresses).To(Equal([]clusterv1.MachineAddress{
		{Type: clusterv1.MachineHostName, Address: hostname}, {Type: clusterv1.MachineInternalIP, Address: ip},
	}))
	g.Expect(gm.Status.FailureDomain).To(Equal(zone))
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: gm.Name}}
	g.Expect(storeGet(e.h, e.f, node)).To(Succeed())
	g.Expect(node.Spec.ProviderID).To(Equal(providerID))
	g.Expect(node.Status.Addresses).To(ContainElement(corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip}))
	g.Expect(nodeReady(t, e.h, e.f, gm.Name)).To(Equal(corev1.ConditionTrue))
}

// TestAzureMachinePoolFollowsAUniformScaleSetByName: a pool naming a uniform scale set gets one
// instance per VM with the VM's provider ID exactly as cloud-provider-azure writes it, whose
// machines bind to their VMs; a worker MachineDeployment machine cannot take the pool's VMs; the
// scale set's capacity changes (out, then in) are followed, never made: a mismatch with the
// MachinePool's replicas is reported, and a VM that leaves loses its instance through its Machine.
func TestAzureMachinePoolFollowsAUniformScaleSetByName(t *testing.T) {
	requireEnv(t)
	g := NewWithT(t)
	ctx := context.Background()
	e := newAzurePoolEnv(t, "azp", func(f *scaleSetFakes) {
		f.rg.addScaleSet("workers", "worker") // tagged for the cluster, as the docs ask of cluster VMs
		f.setCapacity("workers", 2)
		f.rg.addScaleSetVM("workers", "0", "workers000000", "1", "10.0.4.4")
		f.rg.addScaleSetVM("workers", "1", "workers000001", "2", "10.0.4.5")
	})
	vm0 := azProviderID("virtualMachineScaleSets/workers/virtualMachines/0")
	vm1 := azProviderID("virtualMachineScaleSets/workers/virtualMachines/1")
	vm2 := azProviderID("virtualMachineScaleSets/workers/virtualMachines/2")
	g.Expect(vm0).To(Equal("azure:///subscriptions/" + azSub + "/resourceGroups/goofy-rg/providers/Microsoft.Compute/virtualMachineScaleSets/workers/virtualMachines/0"))

	p := e.newAzurePool(t, "workers", 2, &infrav1.AzureScaleSetSelector{Name: "workers"})
	p.reconcile(t, 2) // the finalizer, then the instances
	g.Expect(providerIDs(p.instances(t))).To(Equal([]string{vm0, vm1}))
	for _, gm := range p.instances(t) {
		g.Expect(gm.Labels).To(HaveKeyWithValue(clusterv1.MachinePoolNameLabel, "workers"))
		g.Expect(gm.Labels).To(HaveKeyWithValue(clusterv1.ClusterNameLabel, e.f.cluster.Name))
		g.Expect(gm.OwnerReferences).To(ConsistOf(And(HaveField("Kind", "GoofyMachinePool"), HaveField("UID", p.pool.UID), HaveField("Controller", BeNil()))))
		g.Expect(gm.Spec.Backend.Azure).NotTo(BeNil())
		g.Expect(gm.Annotations).To(HaveKeyWithValue(infrav1.InstanceBootstrapDataAnnotation, "workers-bootstrap"))
	}
	g.Expect(p.pool.Spec.ProviderIDList).To(Equal([]string{vm0, vm1}))
	g.Expect(p.pool.Spec.ProviderID).To(Equal(azProviderID("virtualMachineScaleSets/workers")))
	g.Expect(p.pool.Status.Replicas).To(Equal(ptr.To[int32](2)))
	g.Expect(p.pool.Status.Initialization.Provisioned).To(Equal(ptr.To(true)))
	g.Expect(p.pool.Status.Conditions).To(haveCondition(infrav1.ReplicasMatchScaleSetCondition, metav1.ConditionTrue, infrav1.ReplicasMatchReason))
	g.Expect(p.pool.Status.Conditions).To(haveCondition(infrav1.InstancesReadyCondition, metav1.ConditionFalse, infrav1.InstancesNotReadyReason))

	// CAPI makes the Machines; each instance binds to its own VM and its Node is Ready.
	p.playCAPI(t, e.h)
	e.expectPoolInstance(t, instanceFor(t, p, vm0), vm0, "workers000000", "10.0.4.4", "1")
	e.expectPoolInstance(t, instanceFor(t, p, vm1), vm1, "workers000001", "10.0.4.5", "2")
	p.reconcile(t, 1)
	g.Expect(p.pool.Status.ReadyReplicas).To(Equal(ptr.To[int32](2)))
	g.Expect(p.pool.Status.Conditions).To(haveCondition(infrav1.ReadyCondition, metav1.ConditionTrue, infrav1.ReadyReason))

	// The scale set's VMs are tagged as the cluster's workers, but they are the pool's: a
	// MachineDeployment's worker finds no free instance.
	md := newAzureMachine(t, e.f, "azp-md-0", machineOpts{})
	e.h.reconcileMachine(t, md)
	e.h.reconcileMachine(t, md)
	e.h.expectWaiting(t, md, "no free worker instance")

	// Azure scales the set out to 3. The pool follows (after the cached read ages out), and
	// reports that the MachinePool still asks for 2.
	e.fakes.rg.addScaleSetVM("workers", "2", "workers000002", "3", "10.0.4.6")
	e.fakes.setCapacity("workers", 3)
	p.reconcile(t, 1)
	g.Expect(p.instances(t)).To(HaveLen(2), "the scale set was read less than azureInstancesTTL ago")
	e.h.clock.Step(azureInstancesTTL)
	res, err := p.r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(p.pool)})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res).To(Equal(ctrl.Result{RequeueAfter: azureRecheckInterval}), "Azure sends no events: the pool looks again")
	get(t, p.pool)
	g.Expect(providerIDs(p.instances(t))).To(Equal([]string{vm0, vm1, vm2}))
	g.Expect(p.pool.Spec.ProviderIDList).To(Equal([]string{vm0, vm1, vm2}))
	g.Expect(p.pool.Status.Replicas).To(Equal(ptr.To[int32](3)))
	g.Expect(p.pool.Status.Conditions).To(haveCondition(infrav1.ReplicasMatchScaleSetCondition, metav1.ConditionFalse, infrav1.ReplicasMismatchReason))
	g.Expect(poolCondition(p.pool, infrav1.ReplicasMatchScaleSetCondition).Message).To(ContainSubstring("asks for 2 replicas but scale set workers has capacity 3"))
	// The MachinePool agrees (e.g. its replicas are set to match): the mismatch is gone.
	p.setReplicas(t, 3)
	p.reconcile(t, 1)
	g.Expect(p.pool.Status.Conditions).To(haveCondition(infrav1.ReplicasMatchScaleSetCondition, metav1.ConditionTrue, infrav1.ReplicasMatchReason))
	p.playCAPI(t, e.h)
	e.expectPoolInstance(t, instanceFor(t, p, vm2), vm2, "workers000002", "10.0.4.6", "3")

	// Azure scales in: VM 0 leaves. Its instance goes through its Machine (CAPI drains first),
	// the others stay; meanwhile its node is NotReady.
	gone := instanceFor(t, p, vm0)
	e.fakes.removeScaleSetVM("workers", "0")
	e.fakes.setCapacity("workers", 2)
	e.h.clock.Step(azureInstancesTTL)
	p.reconcile(t, 1)
	g.Expect(p.instances(t)).To(HaveLen(3), "the instance waits for its Machine's deletion")
	var leaving []string
	for _, m := range p.machines(t) {
		if !m.DeletionTimestamp.IsZero() {
			leaving = append(leaving, m.Name)
		}
	}
	g.Expect(leaving).To(Equal([]string{gone.Name}))
	g.Expect(p.pool.Status.Conditions).To(haveCondition(infrav1.InstancesReadyCondition, metav1.ConditionFalse, infrav1.ScalingDownReason))
	e.h.reconcileMachine(t, gone)
	g.Expect(nodeReady(t, e.h, e.f, gone.Name)).To(Equal(corev1.ConditionFalse))
	p.playCAPI(t, e.h)
	p.reconcile(t, 1)
	g.Expect(providerIDs(p.instances(t))).To(Equal([]string{vm1, vm2}))
	g.Expect(p.pool.Spec.ProviderIDList).To(Equal([]string{vm1, vm2}))
	g.Expect(p.pool.Status.Replicas).To(Equal(ptr.To[int32](2)))
	g.Expect(p.pool.Status.Conditions).To(haveCondition(infrav1.ReplicasMatchScaleSetCondition, metav1.ConditionFalse, infrav1.ReplicasMismatchReason))
	g.Expect(expectDistinctProviderIDs(t, e.f.ns)).To(Equal(2))
	g.Expect(e.fakes.rg.unwantedRequests()).To(BeEmpty())
}

// TestAzureMachinePoolFollowsAFlexibleScaleSetByTags: a pool selecting a flexible scale set by
// its tags (names in any case) gets the set's VMs, in the plain VM form of provider ID, and none
// of the resource group's other VMs (another flexible set's, a standalone one).
func TestAzureMachinePoolFollowsAFlexibleScaleSetByTags(t *testing.T) {
	requireEnv(t)
	g := NewWithT(t)
	e := newAzurePoolEnv(t, "azf", func(f *scaleSetFakes) {
		f.addFlexibleScaleSet("blue", map[string]*string{"Goofy-Pool": to.Ptr("blue"), "team": to.Ptr("a")})
		f.addFlexibleScaleSet("green", map[string]*string{"goofy-pool": to.Ptr("green"), "team": to.Ptr("a")})
		f.addFlexibleVM("blue", "blue-vm-a", "1", "10.0.5.4")
		f.addFlexibleVM("blue", "blue-vm-b", "2", "10.0.5.5")
		f.addFlexibleVM("green", "green-vm-a", "1", "10.0.6.4")
	})
	a := azProviderID("virtualMachines/blue-vm-a")
	b := azProviderID("virtualMachines/blue-vm-b")
	g.Expect(a).To(Equal("azure:///subscriptions/" + azSub + "/resourceGroups/goofy-rg/providers/Microsoft.Compute/virtualMachines/blue-vm-a"))

	p := e.newAzurePool(t, "blue", 2, &infrav1.AzureScaleSetSelector{Tags: map[string]string{"goofy-pool": "blue", "team": "a"}})
	p.reconcile(t, 2)
	g.Expect(providerIDs(p.instances(t))).To(Equal([]string{a, b}))
	g.Expect(p.pool.Spec.ProviderIDList).To(Equal([]string{a, b}))
	g.Expect(p.pool.Status.Replicas).To(Equal(ptr.To[int32](2)))
	// Without a capacity (no VM profile), the set's VM count is what the replicas are compared with.
	g.Expect(p.pool.Status.Conditions).To(haveCondition(infrav1.ReplicasMatchScaleSetCondition, metav1.ConditionTrue, infrav1.ReplicasMatchReason))
	g.Expect(poolCondition(p.pool, infrav1.ReplicasMatchScaleSetCondition).Message).To(ContainSubstring("has VMs 2"))
	g.Expect(e.fakes.vmFilters()).To(ContainElement("'virtualMachineScaleSet/id' eq '" + azResourceID("Microsoft.Compute", "virtualMachineScaleSets/blue") + "'"))

	p.playCAPI(t, e.h)
	e.expectPoolInstance(t, instanceFor(t, p, a), a, "blue-vm-a", "10.0.5.4", "1")
	e.expectPoolInstance(t, instanceFor(t, p, b), b, "blue-vm-b", "10.0.5.5", "2")
	p.reconcile(t, 1)
	g.Expect(p.pool.Status.Conditions).To(haveCondition(infrav1.ReadyCondition, metav1.ConditionTrue, infrav1.ReadyReason))

	// Tags that two sets carry select neither: the pool says so and keeps its instances.
	get(t, p.pool)
	p.pool.Spec.Azure.ScaleSet.Tags = map[string]string{"team": "a"}
	g.Expect(k8sClient.Update(context.Background(), p.pool)).To(Succeed())
	p.reconcile(t, 1)
	g.Expect(p.pool.Status.Conditions).To(haveCondition(infrav1.ReadyCondition, metav1.ConditionFalse, infrav1.ScaleSetAmbiguousReason))
	g.Expect(poolCondition(p.pool, infrav1.InstancesReadyCondition).Message).To(ContainSubstring("blue, green"))
	g.Expect(providerIDs(p.instances(t))).To(Equal([]string{a, b}))
	g.Expect(p.pool.Spec.ProviderIDList).To(Equal([]string{a, b}))
	g.Expect(e.fakes.rg.unwantedRequests()).To(BeEmpty())
}

// TestAzureMachinePoolScaleSetVanishes: the scale set is deleted in Azure. The pool says so
// (ScaleSetNotFound), deletes nothing and keeps spec.providerIDList and its replicas; its
// instances keep their identities with NotReady nodes. ARM errors meanwhile are reported and
// retried, nothing lost either. The scale set comes back: everything is Ready again.
func TestAzureMachinePoolScaleSetVanishes(t *testing.T) {
	requireEnv(t)
	g := NewWithT(t)
	ctx := context.Background()
	e := newAzurePoolEnv(t, "azv", func(f *scaleSetFakes) {
		f.rg.addScaleSet("workers", "worker")
		f.setCapacity("workers", 2)
		f.rg.addScaleSetVM("workers", "3", "workers000003", "1", "10.0.4.4")
		f.rg.addScaleSetVM("workers", "4", "workers000004", "1", "10.0.4.5")
	})
	vm3 := azProviderID("virtualMachineScaleSets/workers/virtualMachines/3")
	vm4 := azProviderID("virtualMachineScaleSets/workers/virtualMachines/4")
	p := e.newAzurePool(t, "workers", 2, &infrav1.AzureScaleSetSelector{Name: "workers"})
	p.reconcile(t, 2)
	p.playCAPI(t, e.h)
	for _, gm := range ptrs(p.instances(t)) {
		e.h.reconcileUntilReady(t, gm)
	}
	p.reconcile(t, 1)
	g.Expect(p.pool.Status.Conditions).To(haveCondition(infrav1.ReadyCondition, metav1.ConditionTrue, infrav1.ReadyReason))
	before := names(ptrs(p.instances(t)))

	ss, vms := e.fakes.takeScaleSet("workers")
	e.h.clock.Step(azureInstancesTTL)
	res, err := p.r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(p.pool)})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res).To(Equal(ctrl.Result{RequeueAfter: azureNoInstanceRetry}), "looks again for the scale set")
	get(t, p.pool)
	g.Expect(p.pool.Status.Conditions).To(haveCondition(infrav1.InstancesReadyCondition, metav1.ConditionFalse, infrav1.ScaleSetNotFoundReason))
	g.Expect(p.pool.Status.Conditions).To(haveCondition(infrav1.ReadyCondition, metav1.ConditionFalse, infrav1.ScaleSetNotFoundReason))
	g.Expect(poolCondition(p.pool, infrav1.InstancesReadyCondition).Message).To(And(ContainSubstring(`scale set "workers"`), ContainSubstring("keeping the 2 instances last seen")))
	g.Expect(p.pool.Status.Conditions).To(haveCondition(infrav1.ReplicasMatchScaleSetCondition, metav1.ConditionUnknown, infrav1.ScaleSetNotFoundReason))
	g.Expect(p.pool.Spec.ProviderIDList).To(Equal([]string{vm3, vm4}))
	g.Expect(p.pool.Status.Replicas).To(Equal(ptr.To[int32](2)))
	g.Expect(names(ptrs(p.instances(t)))).To(Equal(before))
	for _, m := range p.machines(t) {
		g.Expect(m.DeletionTimestamp.IsZero()).To(BeTrue(), "Machine %s deleted", m.Name)
	}
	for _, gm := range ptrs(p.instances(t)) {
		e.h.reconcileMachine(t, gm)
		get(t, gm)
		g.Expect(gm.Status.Conditions).To(haveCondition(infrav1.ReadyCondition, metav1.ConditionFalse, infrav1.InstanceGoneReason))
		g.Expect(condition(gm, infrav1.ReadyCondition).Message).To(ContainSubstring("scale set"))
		g.Expect(gm.Status.Addresses).To(HaveLen(2), "the instance keeps its identity")
		g.Expect(nodeReady(t, e.h, e.f, gm.Name)).To(Equal(corev1.ConditionFalse))
	}

	// ARM fails (a 500 that outlived the SDK's retries; here the tests' clients do not retry): an
	// error to retry with backoff, and still nothing lost.
	e.fakes.putScaleSet(ss, vms)
	e.h.clock.Step(azureInstancesTTL)
	e.fakes.failNextGets(http.StatusInternalServerError)
	_, err = p.r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(p.pool)})
	g.Expect(err).To(HaveOccurred())
	get(t, p.pool)
	g.Expect(p.pool.Status.Conditions).To(haveCondition(infrav1.InstancesReadyCondition, metav1.ConditionFalse, infrav1.AzureErrorReason))
	g.Expect(p.pool.Spec.ProviderIDList).To(Equal([]string{vm3, vm4}))
	g.Expect(names(ptrs(p.instances(t)))).To(Equal(before))

	// The scale set is back: the same instances, Ready again.
	p.reconcile(t, 1)
	g.Expect(p.pool.Status.Conditions).To(haveCondition(infrav1.ReplicasMatchScaleSetCondition, metav1.ConditionTrue, infrav1.ReplicasMatchReason))
	for _, gm := range ptrs(p.instances(t)) {
		e.h.reconcileUntilReady(t, gm)
		g.Expect(nodeReady(t, e.h, e.f, gm.Name)).To(Equal(corev1.ConditionTrue))
	}
	p.reconcile(t, 1)
	g.Expect(names(ptrs(p.instances(t)))).To(Equal(before))
	g.Expect(p.pool.Spec.ProviderIDList).To(Equal([]string{vm3, vm4}))
	g.Expect(p.pool.Status.Conditions).To(haveCondition(infrav1.ReadyCondition, metav1.ConditionTrue, infrav1.ReadyReason))
}

// TestAzureMachinePoolWithoutScaleSet: on an Azure-backed cluster a pool without spec.azure, or a
// manager without the Azure pool backend, says so and creates nothing; the schema refuses a
// selector with both or neither of name and tags.
func TestAzureMachinePoolWithoutScaleSet(t *testing.T) {
	requireEnv(t)
	g := NewWithT(t)
	ctx := context.Background()
	e := newAzurePoolEnv(t, "azn", func(f *scaleSetFakes) {
		f.rg.addScaleSet("workers", "worker")
		f.rg.addScaleSetVM("workers", "0", "workers000000", "1", "10.0.4.4")
	})
	p := e.newAzurePool(t, "unselected", 1, nil)
	p.reconcile(t, 2)
	g.Expect(p.instances(t)).To(BeEmpty())
	g.Expect(p.pool.Status.Conditions).To(haveCondition(infrav1.ReadyCondition, metav1.ConditionFalse, infrav1.ScaleSetNotSelectedReason))

	p.r.chooseBackend = func(*machinePoolScope) MachinePoolBackend { return newAzureMachinePoolBackend(k8sClient, nil, nil) }
	get(t, p.pool)
	p.pool.Spec.Azure = &infrav1.AzureMachinePoolBackend{ScaleSet: infrav1.AzureScaleSetSelector{Name: "workers"}}
	g.Expect(k8sClient.Update(ctx, p.pool)).To(Succeed())
	p.reconcile(t, 1)
	g.Expect(p.instances(t)).To(BeEmpty())
	g.Expect(p.pool.Status.Conditions).To(haveCondition(infrav1.ReadyCondition, metav1.ConditionFalse, infrav1.BackendNotSupportedReason))

	for name, sel := range map[string]infrav1.AzureScaleSetSelector{
		"both":        {Name: "workers", Tags: map[string]string{"a": "b"}},
		"neither":     {},
		"bad name":    {Name: "-workers"},
		"long value":  {Tags: map[string]string{"a": strings.Repeat("v", 257)}},
		"no tag name": {Tags: map[string]string{"": "v"}},
	} {
		get(t, p.pool)
		p.pool.Spec.Azure = &infrav1.AzureMachinePoolBackend{ScaleSet: sel}
		g.Expect(k8sClient.Update(ctx, p.pool)).NotTo(Succeed(), name)
	}
}
