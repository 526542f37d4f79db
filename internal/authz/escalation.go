package authz

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	rbacvalidation "k8s.io/component-helpers/auth/rbac/validation"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// RBAC's escalation prevention, as kube-apiserver's RBAC storage does it on every create and
// update of a Role, ClusterRole or binding: a user may write a role only with rules it holds
// itself (or the escalate verb on it), and a binding only to a role whose rules it holds (or the
// bind verb on it). system:masters may do anything.

// fullAuthority is what setting an aggregationRule requires, since it can gather any rule.
var fullAuthority = []rbacv1.PolicyRule{
	{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}},
	{Verbs: []string{"*"}, NonResourceURLs: []string{"*"}},
}

// CheckGrant returns nil when u may store obj (a Role, ClusterRole, RoleBinding or
// ClusterRoleBinding; namespace is the request's) in cluster c, else the error upstream's RBAC
// storage answers: Forbidden, or NotFound for a binding to a missing role. Other objects pass.
func CheckGrant(ctx context.Context, c *store.Cluster, u user.Info, namespace string, obj runtime.Object) error {
	return checkGrant(ctx, c, u, namespace, obj, nil)
}

// CheckGrantUpdate is CheckGrant for a write of obj replacing old, the stored object (nil: obj
// is created), as upstream's RBAC storage judges an update inside its GuaranteedUpdate: a change
// of garbage-collection fields only (owner references, finalizers) is not judged, and removing
// a ClusterRole's aggregationRule needs full authority as setting one does. The store runs it
// on the object it is about to store (store.UpdateOptions.ValidateObject).
func CheckGrantUpdate(ctx context.Context, c *store.Cluster, u user.Info, namespace string, obj, old runtime.Object) error {
	if old != nil && onlyGCFieldsChanged(obj, old) {
		return nil
	}
	return checkGrant(ctx, c, u, namespace, obj, old)
}

// onlyGCFieldsChanged is upstream's rbacregistry.IsOnlyMutatingGCFields: obj differs from old
// in owner references, finalizers or managed fields only.
func onlyGCFieldsChanged(obj, old runtime.Object) bool {
	copied, ok := obj.DeepCopyObject().(metav1.Object)
	if !ok {
		return false
	}
	oldMeta, ok := old.(metav1.Object)
	if !ok {
		return false
	}
	copied.SetOwnerReferences(oldMeta.GetOwnerReferences())
	copied.SetFinalizers(oldMeta.GetFinalizers())
	copied.SetSelfLink(oldMeta.GetSelfLink())
	copied.SetManagedFields(oldMeta.GetManagedFields())
	return equality.Semantic.DeepEqual(copied, old)
}

func checkGrant(ctx context.Context, c *store.Cluster, u user.Info, namespace string, obj, old runtime.Object) error {
	if Privileged(u) {
		return nil
	}
	a := For(c)
	switch o := obj.(type) {
	case *rbacv1.Role:
		if a.may(ctx, u, "escalate", "roles", namespace, o.Name) {
			return nil
		}
		return a.confirmHeld(u, namespace, o.Rules, rbacv1.Resource("roles"), o.Name)
	case *rbacv1.ClusterRole:
		if a.may(ctx, u, "escalate", "clusterroles", "", o.Name) {
			return nil
		}
		if err := a.confirmHeld(u, "", o.Rules, rbacv1.Resource("clusterroles"), o.Name); err != nil {
			return err
		}
		oldRole, _ := old.(*rbacv1.ClusterRole)
		aggregates := o.AggregationRule != nil || oldRole != nil && oldRole.AggregationRule != nil
		if aggregates && a.confirmHeld(u, "", fullAuthority, rbacv1.Resource("clusterroles"), o.Name) != nil {
			return apierrors.NewForbidden(rbacv1.Resource("clusterroles"), o.Name, errors.New("must have cluster-admin privileges to use the aggregationRule"))
		}
		return nil
	case *rbacv1.RoleBinding:
		return a.confirmBind(ctx, u, namespace, o.RoleRef, rbacv1.Resource("rolebindings"), o.Name)
	case *rbacv1.ClusterRoleBinding:
		return a.confirmBind(ctx, u, "", o.RoleRef, rbacv1.Resource("clusterrolebindings"), o.Name)
	}
	return nil
}

// may asks the authorizer whether u has verb on the named role.
func (a *Authorizer) may(ctx context.Context, u user.Info, verb, resource, namespace, name string) bool {
	d, _, _ := a.Authorize(ctx, authorizer.AttributesRecord{
		User: u, Verb: verb, APIGroup: rbacv1.GroupName, Resource: resource, Namespace: namespace, Name: name, ResourceRequest: true,
	})
	return d == authorizer.DecisionAllow
}

// confirmBind allows a binding when u may bind its role, or holds the role's rules.
func (a *Authorizer) confirmBind(ctx context.Context, u user.Info, namespace string, ref rbacv1.RoleRef, gr schema.GroupResource, name string) error {
	resource := "clusterroles"
	if ref.Kind == "Role" {
		resource = "roles"
	}
	d, _, _ := a.Authorize(ctx, authorizer.AttributesRecord{
		User: u, Verb: "bind", APIGroup: ref.APIGroup, Resource: resource, Namespace: namespace, Name: ref.Name, ResourceRequest: true,
	})
	if d == authorizer.DecisionAllow {
		return nil
	}
	idx := a.current()
	var rules []rbacv1.PolicyRule
	var ok bool
	switch {
	case ref.Kind == "ClusterRole":
		rules, ok = idx.clusterRoles[ref.Name]
	case ref.Kind == "Role" && namespace != "":
		rules, ok = idx.roles[namespace][ref.Name]
	}
	if !ok {
		return apierrors.NewNotFound(rbacv1.Resource(strings.TrimSuffix(resource, "s")), ref.Name)
	}
	return a.confirmHeld(u, namespace, rules, gr, name)
}

// confirmHeld returns upstream's Forbidden when u's rules in namespace do not cover rules.
func (a *Authorizer) confirmHeld(u user.Info, namespace string, rules []rbacv1.PolicyRule, gr schema.GroupResource, name string) error {
	var held []rbacv1.PolicyRule
	errs := a.current().visit(u, namespace, func(rs []rbacv1.PolicyRule) bool {
		held = append(held, rs...)
		return false
	})
	covered, missing := rbacvalidation.Covers(held, rules)
	if covered {
		return nil
	}
	var lines []string
	for _, r := range compact(missing) {
		lines = append(lines, compactString(r))
	}
	slices.Sort(lines)
	lines = slices.Compact(lines)
	msg := fmt.Sprintf("user %q (groups=%q) is attempting to grant RBAC permissions not currently held:\n%s", u.GetName(), u.GetGroups(), strings.Join(lines, "\n"))
	if len(errs) > 0 {
		msg += fmt.Sprintf("; resolution errors: %v", errs)
	}
	return apierrors.NewForbidden(gr, name, errors.New(msg))
}

// compact merges the verbs of missing rules that differ in nothing else (one group, one
// resource, no names), as upstream's CompactRules does for its message.
func compact(rules []rbacv1.PolicyRule) []rbacv1.PolicyRule {
	type key struct{ group, resource string }
	var out []rbacv1.PolicyRule
	at := map[key]int{}
	for _, r := range rules {
		if len(r.APIGroups) != 1 || len(r.Resources) != 1 || len(r.ResourceNames) > 0 || len(r.NonResourceURLs) > 0 {
			out = append(out, r)
			continue
		}
		k := key{r.APIGroups[0], r.Resources[0]}
		if i, ok := at[k]; ok {
			for _, v := range r.Verbs {
				if !slices.Contains(out[i].Verbs, v) {
					out[i].Verbs = append(out[i].Verbs, v)
				}
			}
			continue
		}
		at[k] = len(out)
		r.Verbs = slices.Clone(r.Verbs)
		out = append(out, r)
	}
	return out
}

// compactString is upstream's rbacv1helpers.CompactString: the rule's non-empty fields.
func compactString(r rbacv1.PolicyRule) string {
	var parts []string
	add := func(name string, v []string) {
		if len(v) > 0 {
			parts = append(parts, fmt.Sprintf("%s:%q", name, v))
		}
	}
	add("APIGroups", r.APIGroups)
	add("Resources", r.Resources)
	add("NonResourceURLs", r.NonResourceURLs)
	add("ResourceNames", r.ResourceNames)
	add("Verbs", r.Verbs)
	return "{" + strings.Join(parts, ", ") + "}"
}
