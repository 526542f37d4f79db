package controllers

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/goofy-capi/cluster-api-provider-goofy/api/v1alpha1"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/azure"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/azure/metadata"
)

// Azure backend: machines bind to VM instances discovered in Azure (by the cluster's UID tag and
// each instance's role tag) while the control plane stays simulated by the mux.

const (
	// azureInstancesTTL bounds how stale the instance list may be; ARM throttles eager readers.
	azureInstancesTTL = 15 * time.Second
	// azureRecheckInterval is how often a bound machine checks that its instance still exists.
	azureRecheckInterval = time.Minute
	// azureNoInstanceRetry is how often a machine waiting for a free instance looks again.
	azureNoInstanceRetry = 30 * time.Second
)

// AzureClouds keeps one azure.Cloud per GoofyCluster (clients are reused across reconciles), a
// short-lived cache of each cluster's instances, and the instance each machine has claimed.
type AzureClouds struct {
	// Credential for ARM; nil means azidentity's default chain (AZURE_* variables, workload
	// identity, managed identity).
	Credential azcore.TokenCredential
	// DefaultCredentialNamespaces are the namespaces whose GoofyClusters may use Credential on
	// the manager's own cloud without spec.backend.azure.identityRef (the manager's
	// --azure-default-credential-namespaces). Empty, none may: every other GoofyCluster needs a
	// GoofyAzureClusterIdentity that allows its namespace, as CAPZ requires an identityRef.
	DefaultCredentialNamespaces []string
	// ClientOptions for the ARM clients (tests inject fake transports here).
	ClientOptions *arm.ClientOptions
	// Clock ages the cached instance lists; nil means the real clock. Both reconcilers share the
	// cache, so it keeps one clock of its own rather than each caller's.
	Clock clock.PassiveClock

	mu     sync.Mutex
	clouds map[string]*azureCluster
}

type azureCluster struct {
	config    infrav1.AzureClusterBackend
	cloudSpec azure.CloudSpec // the cloud config resolves to (azureCloudOf)
	cloud     *azure.Cloud
	listedAt  time.Time
	instances []metadata.InstanceMetadata
	claims    map[string]string          // lower-cased provider ID -> GoofyMachine UID (or poolClaimant)
	scaleSets map[string]*listedScaleSet // by scaleSetKey
}

// listedScaleSet is a scale set as last read, or why it could not be found (not found, ambiguous).
type listedScaleSet struct {
	at  time.Time
	set *azure.ScaleSet
	err error
}

// errAzureNotAllowed: the GoofyCluster may not use the identity or the cloud it names. Nothing
// is sent to Azure for it, not even a token request.
type errAzureNotAllowed struct{ reason, message string }

func (e errAzureNotAllowed) Error() string { return e.message }

// azureCloudOf is the cloud a GoofyCluster's Azure backend may reach with the manager's
// credential. Clouds belong to the operator, as in CAPZ: a Custom cloud (whose ARM endpoint and
// authority host receive the credential) comes only from a GoofyAzureClusterIdentity that allows
// the GoofyCluster's namespace, or from the manager's environment (the zero spec); a GoofyCluster
// itself may only pick one of Azure's public clouds. So does the credential: without an
// identityRef, only the GoofyClusters of defaultNamespaces (the operator's list) may use it.
func azureCloudOf(ctx context.Context, c client.Reader, gc *infrav1.GoofyCluster, defaultNamespaces []string) (azure.CloudSpec, error) {
	cfg := gc.Spec.Backend.Azure
	if ref := cfg.IdentityRef; ref != nil {
		id := &infrav1.GoofyAzureClusterIdentity{}
		if err := c.Get(ctx, client.ObjectKey{Name: ref.Name}, id); err != nil {
			if apierrors.IsNotFound(err) {
				return azure.CloudSpec{}, errAzureNotAllowed{infrav1.AzureIdentityNotFoundReason,
					fmt.Sprintf("GoofyAzureClusterIdentity %q (spec.backend.azure.identityRef) does not exist", ref.Name)}
			}
			return azure.CloudSpec{}, err
		}
		allowed, err := namespaceAllowed(ctx, c, id.Spec.AllowedNamespaces, gc.Namespace)
		if err != nil {
			return azure.CloudSpec{}, err
		}
		if !allowed {
			return azure.CloudSpec{}, errAzureNotAllowed{infrav1.AzureIdentityNotAllowedReason,
				fmt.Sprintf("GoofyAzureClusterIdentity %q does not allow namespace %q (its spec.allowedNamespaces)", ref.Name, gc.Namespace)}
		}
		return cloudSpecOf(id.Spec.Cloud, true), nil
	}
	if cfg.Cloud != nil && cfg.Cloud.Name == infrav1.AzureCustomCloud {
		return azure.CloudSpec{}, errAzureNotAllowed{infrav1.AzureCustomCloudNotAllowedReason,
			"a Custom cloud receives the manager's Azure credential, so only the operator sets one: in a GoofyAzureClusterIdentity " +
				"that allows this namespace (reference it in spec.backend.azure.identityRef, without cloud) or in the manager's environment"}
	}
	if !slices.ContainsFunc(defaultNamespaces, func(ns string) bool { return strings.TrimSpace(ns) == gc.Namespace }) {
		return azure.CloudSpec{}, errAzureNotAllowed{infrav1.AzureIdentityRequiredReason,
			fmt.Sprintf("namespace %q may not use the manager's own Azure credential: set spec.backend.azure.identityRef to a "+
				"GoofyAzureClusterIdentity that allows the namespace, or ask the operator to add it to the manager's "+
				"--azure-default-credential-namespaces", gc.Namespace)}
	}
	return cloudSpecOf(cfg.Cloud, false), nil
}

// cloudSpecOf converts an API cloud; endpoints are kept only when custom clouds are allowed.
func cloudSpecOf(c *infrav1.AzureCloud, custom bool) azure.CloudSpec {
	switch {
	case c == nil:
		return azure.CloudSpec{}
	case !custom:
		return azure.CloudSpec{Name: string(c.Name)}
	}
	return azure.CloudSpec{Name: string(c.Name), ResourceManagerEndpoint: c.ResourceManagerEndpoint,
		ResourceManagerAudience: c.ResourceManagerAudience, ActiveDirectoryAuthorityHost: c.ActiveDirectoryAuthorityHost}
}

// namespaceAllowed applies allowedNamespaces as CAPZ does: nil allows none, an empty object
// every namespace, else the namespaces listed or matching the selector (an empty selector none).
func namespaceAllowed(ctx context.Context, c client.Reader, allowed *infrav1.AllowedNamespaces, namespace string) (bool, error) {
	switch {
	case allowed == nil:
		return false, nil
	case len(allowed.NamespaceList) == 0 && allowed.Selector == nil:
		return true, nil
	case slices.Contains(allowed.NamespaceList, namespace):
		return true, nil
	case allowed.Selector == nil:
		return false, nil
	}
	selector, err := metav1.LabelSelectorAsSelector(allowed.Selector)
	if err != nil || selector.Empty() {
		// An invalid selector allows nothing, as an empty one does.
		return false, nil
	}
	ns := &corev1.Namespace{}
	if err := c.Get(ctx, client.ObjectKey{Name: namespace}, ns); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	return selector.Matches(labels.Set(ns.Labels)), nil
}

// cluster returns the cached state of a GoofyCluster's Azure backend, creating its Cloud when the
// configuration is new or changed. The cloud is resolved (and the identity checked) on every
// call, before anything is sent: a namespace removed from an identity stops at once.
func (a *AzureClouds) cluster(ctx context.Context, r client.Reader, key string, gc *infrav1.GoofyCluster) (*azureCluster, error) {
	spec, err := azureCloudOf(ctx, r, gc, a.DefaultCredentialNamespaces)
	if err != nil {
		return nil, err
	}
	cfg := gc.Spec.Backend.Azure
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.clouds == nil {
		a.clouds = map[string]*azureCluster{}
	}
	if c, ok := a.clouds[key]; ok && c.cloudSpec == spec && equalAzureConfig(c.config, *cfg) {
		return c, nil
	}
	cloud, err := azure.NewWithConfig(ctx, azure.Config{
		SubscriptionID: cfg.SubscriptionID, ResourceGroup: cfg.ResourceGroup, ClusterUID: cfg.ClusterUID,
		Cloud: spec, Credential: a.Credential, ClientOptions: a.ClientOptions,
	})
	if err != nil {
		return nil, err
	}
	c := &azureCluster{config: *cfg.DeepCopy(), cloudSpec: spec, cloud: cloud, claims: map[string]string{}, scaleSets: map[string]*listedScaleSet{}}
	a.clouds[key] = c
	return c, nil
}

func equalAzureConfig(a, b infrav1.AzureClusterBackend) bool {
	if (a.Cloud == nil) != (b.Cloud == nil) || a.Cloud != nil && *a.Cloud != *b.Cloud {
		return false
	}
	if (a.IdentityRef == nil) != (b.IdentityRef == nil) || a.IdentityRef != nil && *a.IdentityRef != *b.IdentityRef {
		return false
	}
	return a.SubscriptionID == b.SubscriptionID && a.ResourceGroup == b.ResourceGroup && a.ClusterUID == b.ClusterUID
}

// forget drops a cluster's clients and claims (the GoofyCluster is gone).
func (a *AzureClouds) forget(key string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.clouds, key)
}

func (a *AzureClouds) now() time.Time {
	if a.Clock == nil {
		return time.Now()
	}
	return a.Clock.Now()
}

// list returns the cluster's instances, from cache when fresh.
func (a *AzureClouds) list(ctx context.Context, c *azureCluster) ([]metadata.InstanceMetadata, error) {
	now := a.now()
	a.mu.Lock()
	if !c.listedAt.IsZero() && now.Sub(c.listedAt) < azureInstancesTTL {
		defer a.mu.Unlock()
		return c.instances, nil
	}
	a.mu.Unlock()
	instances, err := c.cloud.List(ctx)
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	c.instances, c.listedAt = instances, now
	a.mu.Unlock()
	return instances, nil
}

// claim binds machine to a free instance of the wanted role (and zone, when set). Instances bound
// by other machines (recorded in their spec.providerID, or claimed in this process) are skipped.
func (a *AzureClouds) claim(c *azureCluster, machine string, role metadata.Role, zone string, instances []metadata.InstanceMetadata, boundElsewhere map[string]bool) (metadata.InstanceMetadata, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	sorted := append([]metadata.InstanceMetadata(nil), instances...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	for _, in := range sorted {
		id := strings.ToLower(in.ProviderID)
		if owner, ok := c.claims[id]; ok && owner == machine {
			return in, true
		}
	}
	for _, in := range sorted {
		id := strings.ToLower(in.ProviderID)
		if in.Role != role || zone != "" && in.Zone != zone || boundElsewhere[id] {
			continue
		}
		if _, taken := c.claims[id]; taken {
			continue
		}
		c.claims[id] = machine
		return in, true
	}
	return metadata.InstanceMetadata{}, false
}

// release drops the instance claims of machine (without creating or resolving anything).
func (a *AzureClouds) release(key, machine string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	c := a.clouds[key]
	if c == nil {
		return
	}
	for id, owner := range c.claims {
		if owner == machine {
			delete(c.claims, id)
		}
	}
}

// scaleSetSelector converts a pool's API selector.
func scaleSetSelector(sel infrav1.AzureScaleSetSelector) azure.ScaleSetSelector {
	return azure.ScaleSetSelector{Name: sel.Name, Tags: sel.Tags}
}

// scaleSetKey identifies a selector in the cache.
func scaleSetKey(sel azure.ScaleSetSelector) string {
	if sel.Name != "" {
		return "name:" + sel.Name
	}
	return sel.String()
}

// scaleSet returns the scale set sel selects, and its VMs, from cache when fresh
// (azureInstancesTTL): a pool and each of its instances ask, and ARM throttles eager readers.
// That the set is not found (or ambiguous) is cached as well; other errors are not.
func (a *AzureClouds) scaleSet(ctx context.Context, c *azureCluster, sel azure.ScaleSetSelector) (*azure.ScaleSet, error) {
	key, now := scaleSetKey(sel), a.now()
	a.mu.Lock()
	if l := c.scaleSets[key]; l != nil && now.Sub(l.at) < azureInstancesTTL {
		defer a.mu.Unlock()
		return l.set, l.err
	}
	a.mu.Unlock()
	set, err := c.cloud.ScaleSet(ctx, sel)
	if err != nil && !errors.Is(err, azure.ErrScaleSetNotFound) && !errors.Is(err, azure.ErrScaleSetAmbiguous) {
		return nil, err
	}
	a.mu.Lock()
	c.scaleSets[key] = &listedScaleSet{at: now, set: set, err: err}
	a.mu.Unlock()
	return set, err
}

// poolClaimant holds the instance claims of a machine pool: its scale set's VMs are its own, and
// no other machine of the cluster may bind to one (machines check claims and the provider IDs
// recorded on other GoofyMachines; this covers the time before the pool made an instance).
func poolClaimant(pool *infrav1.GoofyMachinePool) string {
	return "GoofyMachinePool/" + string(pool.UID)
}

// holdAll makes providerIDs exactly the claims of claimant, leaving other claimants' alone.
func (a *AzureClouds) holdAll(c *azureCluster, claimant string, providerIDs []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	maps.DeleteFunc(c.claims, func(_, owner string) bool { return owner == claimant })
	for _, id := range providerIDs {
		id = strings.ToLower(id)
		if _, taken := c.claims[id]; !taken {
			c.claims[id] = claimant
		}
	}
}
