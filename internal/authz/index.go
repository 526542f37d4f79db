package authz

import (
	"fmt"
	"sync"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/workload"
)

var (
	clusterRolesGVR        = rbacv1.SchemeGroupVersion.WithResource("clusterroles")
	clusterRoleBindingsGVR = rbacv1.SchemeGroupVersion.WithResource("clusterrolebindings")
	rolesGVR               = rbacv1.SchemeGroupVersion.WithResource("roles")
	roleBindingsGVR        = rbacv1.SchemeGroupVersion.WithResource("rolebindings")

	// rbacKinds are the kinds the index is built from, in the order it lists them.
	rbacKinds = []schema.GroupVersionResource{clusterRolesGVR, clusterRoleBindingsGVR, rolesGVR, roleBindingsGVR}
)

// index is a cluster's RBAC objects as one generation of them, read-only once built.
type index struct {
	gen uint64
	// clusterRoles are the ClusterRoles' rules, those of aggregated ClusterRoles filled in from
	// the ClusterRoles their selectors match, as the clusterrole-aggregation controller would.
	clusterRoles        map[string][]rbacv1.PolicyRule
	roles               map[string]map[string][]rbacv1.PolicyRule // namespace → name → rules
	clusterRoleBindings []*rbacv1.ClusterRoleBinding
	roleBindings        map[string][]*rbacv1.RoleBinding // by namespace
}

// current returns an index as fresh as the last RBAC change this authorizer was told of. While
// the watches run, that is the last one built; without them, every call reads the objects again.
func (a *Authorizer) current() *index {
	if idx := a.idx.Load(); idx != nil && idx.gen == a.gen.Load() {
		return idx
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	gen := a.gen.Load()
	if idx := a.idx.Load(); idx != nil && idx.gen == gen {
		return idx
	}
	idx, rvs := build(a.c)
	idx.gen = gen
	if current, _ := registry.Load(a.c); a.watches == nil && rvs != nil && current == a {
		// Only the registry's authorizer watches: one the registry let go (its watches ended
		// while a request held it) serves that request and is forgotten.
		a.watches = a.watch(rvs)
	}
	if a.watches == nil {
		// Nothing would report the next change: this index serves this request only, and the
		// registry lets this authorizer go (a cluster being deleted refuses new watches).
		registry.CompareAndDelete(a.c, a)
		return idx
	}
	a.idx.Store(idx)
	return idx
}

// build reads the cluster's RBAC objects. rvs are the resourceVersions of the four lists, nil
// when one could not be listed (the index then lacks it).
func build(c *store.Cluster) (*index, []string) {
	idx := &index{
		clusterRoles: map[string][]rbacv1.PolicyRule{},
		roles:        map[string]map[string][]rbacv1.PolicyRule{},
		roleBindings: map[string][]*rbacv1.RoleBinding{},
	}
	rvs := make([]string, 0, len(rbacKinds))
	list := func(gvr schema.GroupVersionResource) runtime.Object {
		obj, err := c.List(gvr, "", store.ListOptions{})
		if err != nil {
			rvs = nil
			return nil
		}
		if rvs != nil {
			if l, ok := obj.(metav1.ListInterface); ok {
				rvs = append(rvs, l.GetResourceVersion())
			}
		}
		return obj
	}
	var aggregated []*rbacv1.ClusterRole
	all := map[string]*rbacv1.ClusterRole{}
	if l, ok := list(clusterRolesGVR).(*rbacv1.ClusterRoleList); ok {
		for i := range l.Items {
			cr := &l.Items[i]
			all[cr.Name] = cr
			idx.clusterRoles[cr.Name] = cr.Rules
			if cr.AggregationRule != nil {
				aggregated = append(aggregated, cr)
			}
		}
	}
	for _, cr := range aggregated {
		idx.clusterRoles[cr.Name] = workload.AggregatedRules(cr, all)
	}
	if l, ok := list(clusterRoleBindingsGVR).(*rbacv1.ClusterRoleBindingList); ok {
		for i := range l.Items {
			idx.clusterRoleBindings = append(idx.clusterRoleBindings, &l.Items[i])
		}
	}
	if l, ok := list(rolesGVR).(*rbacv1.RoleList); ok {
		for i := range l.Items {
			r := &l.Items[i]
			if idx.roles[r.Namespace] == nil {
				idx.roles[r.Namespace] = map[string][]rbacv1.PolicyRule{}
			}
			idx.roles[r.Namespace][r.Name] = r.Rules
		}
	}
	if l, ok := list(roleBindingsGVR).(*rbacv1.RoleBindingList); ok {
		for i := range l.Items {
			rb := &l.Items[i]
			idx.roleBindings[rb.Namespace] = append(idx.roleBindings[rb.Namespace], rb)
		}
	}
	return idx, rvs
}

// visit calls f with the rules of each binding that applies to u in namespace (ClusterRoleBindings
// first, then the namespace's RoleBindings) until f returns true. It returns the bindings'
// references to missing roles, worded as upstream's RBAC authorizer words them.
func (idx *index) visit(u user.Info, namespace string, f func([]rbacv1.PolicyRule) bool) []error {
	var errs []error
	for _, b := range idx.clusterRoleBindings {
		if !appliesTo(u, b.Subjects, "") {
			continue
		}
		if b.RoleRef.Kind != "ClusterRole" {
			continue
		}
		rules, ok := idx.clusterRoles[b.RoleRef.Name]
		if !ok {
			errs = append(errs, apierrors.NewNotFound(rbacv1.Resource("clusterrole"), b.RoleRef.Name))
			continue
		}
		if f(rules) {
			return nil
		}
	}
	if namespace == "" {
		return errs
	}
	for _, b := range idx.roleBindings[namespace] {
		if !appliesTo(u, b.Subjects, namespace) {
			continue
		}
		var rules []rbacv1.PolicyRule
		var ok bool
		switch b.RoleRef.Kind {
		case "ClusterRole":
			if rules, ok = idx.clusterRoles[b.RoleRef.Name]; !ok {
				errs = append(errs, apierrors.NewNotFound(rbacv1.Resource("clusterrole"), b.RoleRef.Name))
				continue
			}
		case "Role":
			if rules, ok = idx.roles[namespace][b.RoleRef.Name]; !ok {
				errs = append(errs, apierrors.NewNotFound(rbacv1.Resource("role"), b.RoleRef.Name))
				continue
			}
		default:
			errs = append(errs, fmt.Errorf("unsupported role reference kind: %q", b.RoleRef.Kind))
			continue
		}
		if f(rules) {
			return nil
		}
	}
	return errs
}

// appliesTo reports whether one of a binding's subjects is u. A ServiceAccount subject without a
// namespace is in the binding's namespace.
func appliesTo(u user.Info, subjects []rbacv1.Subject, bindingNamespace string) bool {
	for _, s := range subjects {
		switch s.Kind {
		case rbacv1.UserKind:
			if u.GetName() == s.Name {
				return true
			}
		case rbacv1.GroupKind:
			for _, g := range u.GetGroups() {
				if g == s.Name {
					return true
				}
			}
		case rbacv1.ServiceAccountKind:
			ns := s.Namespace
			if ns == "" {
				ns = bindingNamespace
			}
			if ns != "" && serviceaccount.MatchesUsername(ns, s.Name, u.GetName()) {
				return true
			}
		}
	}
	return false
}

// watchSet is the watches on the four RBAC kinds that keep an index current.
type watchSet struct {
	stop chan struct{}
	once sync.Once
}

func (ws *watchSet) end() { ws.once.Do(func() { close(ws.stop) }) }

// watch starts a watch per RBAC kind from the resourceVersions its index was listed at; each event
// makes the index stale. When any of them ends (the cluster is deleted, or a watch fell behind
// the history), all end and the registry lets this authorizer go: the next request starts over.
// It returns nil when a watch cannot start. Callers hold a.mu.
func (a *Authorizer) watch(rvs []string) *watchSet {
	ws := &watchSet{stop: make(chan struct{})}
	var watchers []*store.Watcher
	for i, gvr := range rbacKinds {
		w, err := a.c.Watch(gvr, "", store.ListOptions{ResourceVersion: rvs[i]})
		if err != nil {
			for _, w := range watchers {
				w.Stop()
			}
			return nil
		}
		watchers = append(watchers, w)
	}
	for _, w := range watchers {
		go func() {
			defer w.Stop()
			for {
				if _, ok := w.Next(ws.stop); !ok {
					break
				}
				a.gen.Add(1)
			}
			ws.end()
			a.mu.Lock()
			if a.watches == ws {
				a.watches = nil
			}
			a.mu.Unlock()
			a.gen.Add(1)
			registry.CompareAndDelete(a.c, a)
		}()
	}
	return ws
}
