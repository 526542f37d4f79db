package controllers

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	azfake "github.com/Azure/azure-sdk-for-go/sdk/azcore/fake"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/goofy-capi/cluster-api-provider-goofy/api/v1alpha1"
)

// countingCredential counts the tokens the manager asks for: a token request is a request to
// the cloud's authority host.
type countingCredential struct {
	azfake.TokenCredential
	n atomic.Int64
}

func (c *countingCredential) GetToken(ctx context.Context, opts policy.TokenRequestOptions) (azcore.AccessToken, error) {
	c.n.Add(1)
	return c.TokenCredential.GetToken(ctx, opts)
}

// TestAzureIdentityGatesClouds: a custom cloud (the ARM endpoint and authority host that receive
// the manager's credential) comes only from a GoofyAzureClusterIdentity that allows the
// GoofyCluster's namespace. A GoofyCluster naming a custom cloud itself, a missing identity or
// one whose allowedNamespaces leave its namespace out gets a condition saying so, and not one
// request (nor token) leaves the manager; allowed by list or by selector, it works; an identity
// that stops allowing the namespace stops its machines' requests at once.
func TestAzureIdentityGatesClouds(t *testing.T) {
	requireEnv(t)
	g := NewWithT(t)
	ctx := context.Background()

	rg := newFakeResourceGroup()
	rg.addVM("cp-vm-0", azUID, "control-plane", "1", "10.0.1.4")
	rg.addPublicLoadBalancer("goofy-lb", azUID, "goofy-lb-ip", "20.30.40.50")
	h := newHarness(t)
	clouds := h.useAzure(rg)
	cred := &countingCredential{}
	clouds.Credential = cred
	noRequests := func(why string) {
		t.Helper()
		g.Expect(rg.totalCalls()).To(BeZero(), why)
		g.Expect(cred.n.Load()).To(BeZero(), why)
	}
	denied := func(f *fixture, reason, message string) {
		t.Helper()
		h.reconcileCluster(t, f.gc) // stores the finalizer
		h.reconcileCluster(t, f.gc)
		get(t, f.gc)
		g.Expect(f.gc.Status.Conditions).To(haveCondition(infrav1.ReadyCondition, metav1.ConditionFalse, reason), f.gc.Name)
		g.Expect(f.gc.Status.Conditions).To(ContainElement(HaveField("Message", ContainSubstring(message))), f.gc.Name)
		g.Expect(f.gc.Status.Initialization.Provisioned).To(BeNil(), f.gc.Name)
		noRequests(reason)
	}
	backend := func(identity string) *infrav1.AzureClusterBackend {
		return &infrav1.AzureClusterBackend{SubscriptionID: azSub, ResourceGroup: azRG, ClusterUID: azUID,
			IdentityRef: &infrav1.GoofyAzureClusterIdentityReference{Name: identity}}
	}
	ns := newNamespace(t)

	// The tenant names its own endpoint and authority host.
	custom := &infrav1.AzureClusterBackend{SubscriptionID: azSub, ResourceGroup: azRG, ClusterUID: azUID, Cloud: azCustomCloud()}
	denied(newAzureFixtureWith(t, ns, "az-custom", custom), infrav1.AzureCustomCloudNotAllowedReason, "only the operator sets one")

	// An identity that does not exist, and one for other namespaces only.
	denied(newAzureFixtureWith(t, ns, "az-missing", backend(ns+"-missing")), infrav1.AzureIdentityNotFoundReason, "does not exist")
	others := newAzureIdentity(t, ns+"-others", &infrav1.AllowedNamespaces{NamespaceList: []string{"somebody-else"}})
	denied(newAzureFixtureWith(t, ns, "az-others", backend(others.Name)), infrav1.AzureIdentityNotAllowedReason, "does not allow namespace")
	// Omitted allowedNamespaces allow no namespace; an empty selector matches none.
	none := newAzureIdentity(t, ns+"-none", nil)
	denied(newAzureFixtureWith(t, ns, "az-none", backend(none.Name)), infrav1.AzureIdentityNotAllowedReason, "does not allow namespace")
	emptySelector := newAzureIdentity(t, ns+"-empty-selector", &infrav1.AllowedNamespaces{Selector: &metav1.LabelSelector{}})
	denied(newAzureFixtureWith(t, ns, "az-empty-sel", backend(emptySelector.Name)), infrav1.AzureIdentityNotAllowedReason, "does not allow namespace")

	// Allowed by a selector on the namespace's labels: the cluster reaches the identity's cloud.
	nsObj := &corev1.Namespace{}
	nsObj.Name = ns
	get(t, nsObj)
	nsObj.Labels["goofy.test/azure"] = "yes"
	g.Expect(k8sClient.Update(ctx, nsObj)).To(Succeed())
	bySelector := newAzureIdentity(t, ns+"-selector", &infrav1.AllowedNamespaces{
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"goofy.test/azure": "yes"}}})
	f := newAzureFixtureWith(t, ns, "az-ok", backend(bySelector.Name))
	h.provisionCluster(t, f)
	g.Expect(f.gc.Status.LoadBalancerEndpoint).NotTo(BeNil())
	g.Expect(f.gc.Status.LoadBalancerEndpoint.Host).To(Equal("20.30.40.50"))
	g.Expect(rg.totalCalls()).To(BeNumerically(">", 0))
	g.Expect(rg.unwantedRequests()).To(BeEmpty())
	setClusterStatus(t, f, false)
	gm := newAzureMachine(t, f, "az-ok-cp-0", machineOpts{controlPlane: true})
	h.reconcileUntilReady(t, gm)
	g.Expect(gm.Spec.ProviderID).To(Equal(azProviderID("virtualMachines/cp-vm-0")))

	// The operator takes the namespace off the identity: the next reconcile sends nothing.
	get(t, bySelector)
	bySelector.Spec.AllowedNamespaces = &infrav1.AllowedNamespaces{NamespaceList: []string{"somebody-else"}}
	g.Expect(k8sClient.Update(ctx, bySelector)).To(Succeed())
	before, tokens := rg.totalCalls(), cred.n.Load()
	h.clock.Step(azureInstancesTTL + 1) // the cached instance list is stale: a permitted reconcile would list again
	h.reconcileMachine(t, gm)
	get(t, gm)
	g.Expect(gm.Status.Conditions).To(haveCondition(infrav1.VMProvisionedCondition, metav1.ConditionFalse, infrav1.AzureIdentityNotAllowedReason))
	h.reconcileCluster(t, f.gc)
	get(t, f.gc)
	g.Expect(f.gc.Status.Conditions).To(haveCondition(infrav1.ReadyCondition, metav1.ConditionFalse, infrav1.AzureIdentityNotAllowedReason))
	g.Expect(rg.totalCalls()).To(Equal(before))
	g.Expect(cred.n.Load()).To(Equal(tokens))
}
