// Package authz authorizes requests to a workload cluster the way a kubeadm control plane does
// (kube-apiserver with --authorization-mode=Node,RBAC): members of system:masters are allowed
// everything without a look at RBAC; nodes are authorized by a simplified Node authorizer
// (node.go); everyone, nodes included, by the Roles, ClusterRoles, RoleBindings and
// ClusterRoleBindings stored in that cluster.
//
// The cluster's RBAC objects are read into an index (index.go) on the first request that needs
// them and kept while watches on the four kinds report no change; any change, or a write of an
// RBAC object over HTTP (Changed), makes the next request read them again.
package authz

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	rbacv1 "k8s.io/api/rbac/v1"
	metainternalversionscheme "k8s.io/apimachinery/pkg/apis/meta/internalversion/scheme"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/filters"
	"k8s.io/apiserver/pkg/endpoints/filters/impersonation"
	"k8s.io/apiserver/pkg/endpoints/request"
	rbacvalidation "k8s.io/component-helpers/auth/rbac/validation"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// Privileged reports whether u is in system:masters, the group kube-apiserver allows everything
// before any authorizer runs.
func Privileged(u user.Info) bool {
	return slices.Contains(u.GetGroups(), user.SystemPrivilegedGroup)
}

// Authorizer is one workload cluster's authorizer: k8s.io/apiserver's authorizer.Authorizer and
// authorizer.RuleResolver.
type Authorizer struct {
	c *store.Cluster
	// gen counts the RBAC changes seen; an index built at another generation is stale.
	gen atomic.Uint64
	idx atomic.Pointer[index]

	mu      sync.Mutex // serializes rebuilds and the start of watches
	watches *watchSet  // nil: not watching (the index is rebuilt for every request)
}

var (
	_ authorizer.Authorizer   = (*Authorizer)(nil)
	_ authorizer.RuleResolver = (*Authorizer)(nil)
)

// registry holds the authorizers of the clusters that had a request needing one. An entry goes
// when its watches end (the cluster was deleted, or a watch fell behind), so a deleted cluster's
// store is not kept.
var registry sync.Map // *store.Cluster → *Authorizer

// For returns the authorizer of c.
func For(c *store.Cluster) *Authorizer {
	if a, ok := registry.Load(c); ok {
		return a.(*Authorizer)
	}
	a, _ := registry.LoadOrStore(c, &Authorizer{c: c})
	return a.(*Authorizer)
}

// Changed tells c's authorizer that an RBAC object was written, before the write is answered:
// the writer's next request sees the change even before the watch reports it.
func Changed(c *store.Cluster) {
	if a, ok := registry.Load(c); ok {
		a.(*Authorizer).gen.Add(1)
	}
}

// Authorize decides a request: Allow for system:masters, then the Node authorizer, then RBAC.
// A denial is NoOpinion with upstream's reasons (missing roles, the node's).
func (a *Authorizer) Authorize(ctx context.Context, attrs authorizer.Attributes) (authorizer.Decision, string, error) {
	u := attrs.GetUser()
	if u == nil {
		return authorizer.DecisionNoOpinion, "", nil
	}
	if Privileged(u) {
		return authorizer.DecisionAllow, "", nil
	}
	var reasons []string
	if node, ok := nodeName(u); ok {
		allowed, reason := authorizeNode(a.c, node, attrs)
		if allowed {
			return authorizer.DecisionAllow, "", nil
		}
		if reason != "" {
			reasons = append(reasons, reason)
		}
	}
	want := []rbacv1.PolicyRule{requestRule(attrs)}
	allowed := false
	errs := a.current().visit(u, attrs.GetNamespace(), func(rules []rbacv1.PolicyRule) bool {
		allowed, _ = rbacvalidation.Covers(rules, want)
		return allowed
	})
	if allowed {
		return authorizer.DecisionAllow, "", nil
	}
	if len(errs) > 0 {
		reasons = append(reasons, fmt.Sprintf("RBAC: %v", utilerrors.NewAggregate(errs)))
	}
	return authorizer.DecisionNoOpinion, strings.Join(reasons, ", "), nil
}

// RulesFor lists what u may do in namespace, as SelfSubjectRulesReview reports it: the rules of
// every RBAC binding that applies, and the evaluation errors of bindings that refer to missing
// roles. For a node the list is incomplete, as upstream's Node authorizer does not enumerate its
// rules; system:masters gets what its bindings grant (cluster-admin's, by default), as upstream,
// whose privileged-group authorizer lists nothing either.
func (a *Authorizer) RulesFor(ctx context.Context, u user.Info, namespace string) ([]authorizer.ResourceRuleInfo, []authorizer.NonResourceRuleInfo, bool, error) {
	var all []rbacv1.PolicyRule
	errs := a.current().visit(u, namespace, func(rules []rbacv1.PolicyRule) bool {
		all = append(all, rules...)
		return false
	})
	incomplete := false
	if _, ok := nodeName(u); ok {
		incomplete = true
		errs = append([]error{errors.New("node authorizer does not support user rule resolution")}, errs...)
	}
	var res []authorizer.ResourceRuleInfo
	var nonRes []authorizer.NonResourceRuleInfo
	for _, r := range all {
		if len(r.Resources) > 0 {
			res = append(res, &authorizer.DefaultResourceRuleInfo{Verbs: r.Verbs, APIGroups: r.APIGroups, Resources: r.Resources, ResourceNames: r.ResourceNames})
		}
		if len(r.NonResourceURLs) > 0 {
			nonRes = append(nonRes, &authorizer.DefaultNonResourceRuleInfo{Verbs: r.Verbs, NonResourceURLs: r.NonResourceURLs})
		}
	}
	return res, nonRes, incomplete, utilerrors.NewAggregate(errs)
}

// requestRule is the request as the one rule it needs (one verb, group, resource, name), the
// shape rbacvalidation.Covers compares against a subject's rules. A request without a name needs
// a rule without resourceNames, as upstream's RBAC authorizer requires.
func requestRule(attrs authorizer.Attributes) rbacv1.PolicyRule {
	if !attrs.IsResourceRequest() {
		return rbacv1.PolicyRule{Verbs: []string{attrs.GetVerb()}, NonResourceURLs: []string{attrs.GetPath()}}
	}
	resource := attrs.GetResource()
	if sub := attrs.GetSubresource(); sub != "" {
		resource += "/" + sub
	}
	r := rbacv1.PolicyRule{Verbs: []string{attrs.GetVerb()}, APIGroups: []string{attrs.GetAPIGroup()}, Resources: []string{resource}}
	if name := attrs.GetName(); name != "" {
		r.ResourceNames = []string{name}
	}
	return r
}

// clusterAuthorizer finds the cluster's authorizer per call, so that a filter chain built once
// for a listener never holds an authorizer its registry has let go.
type clusterAuthorizer struct{ c *store.Cluster }

func (ca clusterAuthorizer) Authorize(ctx context.Context, attrs authorizer.Attributes) (authorizer.Decision, string, error) {
	return Authorize(ctx, ca.c, attrs)
}

// Authorize decides a request to cluster c; system:masters is allowed without a lookup.
func Authorize(ctx context.Context, c *store.Cluster, attrs authorizer.Attributes) (authorizer.Decision, string, error) {
	if u := attrs.GetUser(); u != nil && Privileged(u) {
		return authorizer.DecisionAllow, "", nil
	}
	return For(c).Authorize(ctx, attrs)
}

// errorCodecs encode the Status of a refused request, as the API handler encodes its errors.
var errorCodecs = metainternalversionscheme.Codecs

// WithAuthorization puts kube-apiserver's impersonation and authorization filters
// (k8s.io/apiserver's, in its DefaultBuildHandlerChain order) in front of next, for the cluster
// c. The request must carry its authenticated user and RequestInfo. A request of system:masters
// without impersonation headers goes straight to next.
func WithAuthorization(next http.Handler, c *store.Cluster) http.Handler {
	a := clusterAuthorizer{c: c}
	authorized := filters.WithAuthorization(next, a, errorCodecs)
	privileged := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, ok := request.UserFrom(r.Context()); ok && Privileged(u) {
			next.ServeHTTP(w, r)
			return
		}
		authorized.ServeHTTP(w, r)
	})
	impersonated := impersonation.WithImpersonation(privileged, a, errorCodecs)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, ok := request.UserFrom(r.Context()); ok && Privileged(u) && !impersonates(r.Header) {
			next.ServeHTTP(w, r)
			return
		}
		impersonated.ServeHTTP(w, r)
	})
}

// impersonates reports whether a request asks to act as someone else (any Impersonate-* header).
func impersonates(h http.Header) bool {
	for k := range h {
		if len(k) > len("Impersonate-") && strings.EqualFold(k[:len("Impersonate-")], "Impersonate-") {
			return true
		}
	}
	return false
}
