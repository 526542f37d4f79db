package controllers

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	azfake "github.com/Azure/azure-sdk-for-go/sdk/azcore/fake"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"

	infrav1 "github.com/goofy-capi/cluster-api-provider-goofy/api/v1alpha1"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/azure"
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

// TestAzureDefaultCredentialNamespaces: without spec.backend.azure.identityRef, the manager's own
// credential (and cloud) serves only the namespaces the operator lists in
// --azure-default-credential-namespaces (AzureClouds.DefaultCredentialNamespaces), as CAPZ
// requires an identityRef. Elsewhere the GoofyCluster gets AzureIdentityRequired, is not
// provisioned nor requeued, and not one request (nor token) leaves the manager; an identityRef
// works as before, in listed namespaces and others alike, and the list widens no identity. A
// manager restarted without the namespace refuses its bound machines too.
func TestAzureDefaultCredentialNamespaces(t *testing.T) {
	requireEnv(t)
	g := NewWithT(t)
	ctx := context.Background()
	// The manager's own cloud, from its environment: the fakes' endpoint.
	t.Setenv("AZURE_ENVIRONMENT", "")
	t.Setenv("GOOFY_AZURE_RESOURCE_MANAGER_ENDPOINT", "https://"+azARMHost)

	rg := newFakeResourceGroup()
	rg.addVM("cp-vm-0", azUID, "control-plane", "1", "10.0.1.4")
	rg.addPublicLoadBalancer("goofy-lb", azUID, "goofy-lb-ip", "20.30.40.50")
	h := newHarness(t)
	allowedNS, otherNS := newNamespace(t), newNamespace(t)
	start := func(namespaces ...string) (*AzureClouds, *countingCredential) {
		clouds := h.useAzure(rg) // a manager (re)started with the flag
		cred := &countingCredential{}
		clouds.Credential, clouds.DefaultCredentialNamespaces = cred, namespaces
		return clouds, cred
	}
	_, cred := start("somebody-else", " "+allowedNS) // the flag's list, a stray space included
	ownCloud := func() *infrav1.AzureClusterBackend {
		return &infrav1.AzureClusterBackend{SubscriptionID: azSub, ResourceGroup: azRG, ClusterUID: azUID}
	}
	withIdentity := func(name string) *infrav1.AzureClusterBackend {
		b := ownCloud()
		b.IdentityRef = &infrav1.GoofyAzureClusterIdentityReference{Name: name}
		return b
	}
	expectRequired := func(gc *infrav1.GoofyCluster, res ctrl.Result, provisionedBefore bool) {
		t.Helper()
		get(t, gc)
		for _, c := range []string{infrav1.ReadyCondition, infrav1.LoadBalancerReadyCondition} {
			g.Expect(gc.Status.Conditions).To(haveCondition(c, metav1.ConditionFalse, infrav1.AzureIdentityRequiredReason), gc.Name)
		}
		g.Expect(gc.Status.Conditions).To(ContainElement(HaveField("Message", And(
			ContainSubstring("spec.backend.azure.identityRef"), ContainSubstring("--azure-default-credential-namespaces"),
			ContainSubstring(gc.Namespace)))), gc.Name)
		if !provisionedBefore { // CAPI's initialization.provisioned never goes back
			g.Expect(gc.Status.Initialization.Provisioned).To(BeNil(), gc.Name)
			g.Expect(gc.Status.LoadBalancerEndpoint).To(BeNil(), gc.Name)
		}
		// Waits for a change of the GoofyCluster (an identityRef) or a restart with the namespace.
		g.Expect(res).To(Equal(ctrl.Result{}), gc.Name)
	}

	// (1) A namespace the operator did not list: refused before anything is sent, as often as
	// it is reconciled.
	refused := newAzureFixtureWith(t, otherNS, "az-own", ownCloud())
	h.reconcileCluster(t, refused.gc) // stores the finalizer
	for range 3 {
		expectRequired(refused.gc, h.reconcileCluster(t, refused.gc), false)
	}
	g.Expect(rg.totalCalls()).To(BeZero())
	g.Expect(cred.n.Load()).To(BeZero())

	// (3) An identityRef in that namespace works as before: the identity's cloud is reached.
	id := newAzureIdentity(t, otherNS, &infrav1.AllowedNamespaces{NamespaceList: []string{otherNS}})
	byIdentity := newAzureFixtureWith(t, otherNS, "az-identity", withIdentity(id.Name))
	h.provisionCluster(t, byIdentity)
	g.Expect(byIdentity.gc.Status.LoadBalancerEndpoint).To(Equal(&clusterv1.APIEndpoint{Host: "20.30.40.50", Port: 6443}))
	g.Expect(rg.unwantedRequests()).To(BeEmpty())
	// The list widens no identity: one leaving the listed namespace out still refuses it.
	others := newAzureIdentity(t, allowedNS+"-others", &infrav1.AllowedNamespaces{NamespaceList: []string{otherNS}})
	notWidened := newAzureFixtureWith(t, allowedNS, "az-not-widened", withIdentity(others.Name))
	h.reconcileCluster(t, notWidened.gc)
	h.reconcileCluster(t, notWidened.gc)
	get(t, notWidened.gc)
	g.Expect(notWidened.gc.Status.Conditions).To(haveCondition(infrav1.ReadyCondition, metav1.ConditionFalse, infrav1.AzureIdentityNotAllowedReason))
	// Nor does it open custom clouds to the listed namespace.
	custom := ownCloud()
	custom.Cloud = azCustomCloud()
	customFx := newAzureFixtureWith(t, allowedNS, "az-custom", custom)
	h.reconcileCluster(t, customFx.gc)
	h.reconcileCluster(t, customFx.gc)
	get(t, customFx.gc)
	g.Expect(customFx.gc.Status.Conditions).To(haveCondition(infrav1.ReadyCondition, metav1.ConditionFalse, infrav1.AzureCustomCloudNotAllowedReason))

	// The refused GoofyCluster, given an identityRef, proceeds.
	get(t, refused.gc)
	refused.gc.Spec.Backend.Azure.IdentityRef = &infrav1.GoofyAzureClusterIdentityReference{Name: id.Name}
	g.Expect(k8sClient.Update(ctx, refused.gc)).To(Succeed())
	h.provisionCluster(t, refused)
	g.Expect(refused.gc.Status.Conditions).To(haveCondition(infrav1.ReadyCondition, metav1.ConditionTrue, infrav1.ReadyReason))

	// (2) A listed namespace proceeds without identityRef, on the manager's own cloud.
	calls, tokens := rg.totalCalls(), cred.n.Load()
	f := newAzureFixtureWith(t, allowedNS, "az-own", ownCloud())
	h.provisionCluster(t, f)
	g.Expect(f.gc.Status.LoadBalancerEndpoint).To(Equal(&clusterv1.APIEndpoint{Host: "20.30.40.50", Port: 6443}))
	g.Expect(f.gc.Status.Conditions).To(haveCondition(infrav1.ReadyCondition, metav1.ConditionTrue, infrav1.ReadyReason))
	g.Expect(rg.totalCalls()).To(BeNumerically(">", calls))
	g.Expect(cred.n.Load()).To(BeNumerically(">", tokens))
	g.Expect(rg.unwantedRequests()).To(BeEmpty())
	setClusterStatus(t, f, false)
	gm := newAzureMachine(t, f, "az-own-cp-0", machineOpts{controlPlane: true})
	h.reconcileUntilReady(t, gm)
	g.Expect(gm.Spec.ProviderID).To(Equal(azProviderID("virtualMachines/cp-vm-0")))

	// The manager restarts without the namespace: its GoofyCluster and bound machine stop
	// sending at once.
	_, cred = start()
	calls = rg.totalCalls()
	h.clock.Step(azureInstancesTTL + 1)
	res := h.reconcileMachine(t, gm)
	get(t, gm)
	g.Expect(gm.Status.Conditions).To(haveCondition(infrav1.VMProvisionedCondition, metav1.ConditionFalse, infrav1.AzureIdentityRequiredReason))
	g.Expect(res.RequeueAfter).To(BeNumerically(">=", azureNoInstanceRetry), "no requeue storm")
	expectRequired(f.gc, h.reconcileCluster(t, f.gc), true)
	g.Expect(rg.totalCalls()).To(Equal(calls))
	g.Expect(cred.n.Load()).To(BeZero())
}

// TestAzureCloudOfDefaultCredential: the rule itself, without an API server. Without identityRef
// the manager's cloud is resolved only for a listed namespace (entries trimmed; none by
// default), and a Custom cloud stays refused even there.
func TestAzureCloudOfDefaultCredential(t *testing.T) {
	gc := func(ns string, cloud *infrav1.AzureCloud) *infrav1.GoofyCluster {
		return &infrav1.GoofyCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "c"},
			Spec: infrav1.GoofyClusterSpec{Backend: infrav1.GoofyClusterBackend{Azure: &infrav1.AzureClusterBackend{
				SubscriptionID: azSub, ResourceGroup: azRG, ClusterUID: azUID, Cloud: cloud}}}}
	}
	china := &infrav1.AzureCloud{Name: infrav1.AzureChinaCloud}
	for _, tc := range []struct {
		name       string
		gc         *infrav1.GoofyCluster
		namespaces []string
		reason     string // empty: allowed
		want       azure.CloudSpec
	}{
		{"default list allows nobody", gc("team-a", nil), nil, infrav1.AzureIdentityRequiredReason, azure.CloudSpec{}},
		{"empty entry allows nobody", gc("team-a", nil), []string{""}, infrav1.AzureIdentityRequiredReason, azure.CloudSpec{}},
		{"namespace not listed", gc("team-a", nil), []string{"team-b", "team-a-x"}, infrav1.AzureIdentityRequiredReason, azure.CloudSpec{}},
		{"public cloud not listed", gc("team-a", china), []string{"team-b"}, infrav1.AzureIdentityRequiredReason, azure.CloudSpec{}},
		{"listed", gc("team-a", nil), []string{"team-b", "team-a"}, "", azure.CloudSpec{}},
		{"listed with spaces", gc("team-a", nil), []string{" team-a "}, "", azure.CloudSpec{}},
		{"listed, public cloud", gc("team-a", china), []string{"team-a"}, "", azure.CloudSpec{Name: string(infrav1.AzureChinaCloud)}},
		{"listed, custom cloud", gc("team-a", azCustomCloud()), []string{"team-a"}, infrav1.AzureCustomCloudNotAllowedReason, azure.CloudSpec{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			// No identityRef: nothing is read from the API server (a nil reader would panic).
			spec, err := azureCloudOf(context.Background(), nil, tc.gc, tc.namespaces)
			if tc.reason == "" {
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(spec).To(Equal(tc.want))
				return
			}
			var denied errAzureNotAllowed
			g.Expect(errors.As(err, &denied)).To(BeTrue(), "%v", err)
			g.Expect(denied.reason).To(Equal(tc.reason))
			g.Expect(spec).To(Equal(azure.CloudSpec{}))
		})
	}
}
