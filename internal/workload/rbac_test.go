package workload_test

import (
	"testing"

	. "github.com/onsi/gomega"
	rbacv1 "k8s.io/api/rbac/v1"
	rbacvalidation "k8s.io/component-helpers/auth/rbac/validation"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/workload"
)

// admin, edit and view are stored as the aggregation controller leaves them: view within edit
// within admin, admin with the power to write roles and bindings; each call returns fresh copies.
func TestDefaultRBACAggregates(t *testing.T) {
	g := NewWithT(t)
	roles := map[string]*rbacv1.ClusterRole{}
	for _, o := range workload.DefaultRBAC() {
		if cr, ok := o.(*rbacv1.ClusterRole); ok {
			roles[cr.Name] = cr
		}
	}
	for _, pair := range [][2]string{{"admin", "edit"}, {"edit", "view"}, {"view", "system:aggregate-to-view"}, {"admin", "system:aggregate-to-admin"}} {
		covers, missing := rbacvalidation.Covers(roles[pair[0]].Rules, roles[pair[1]].Rules)
		g.Expect(covers).To(BeTrue(), "%s lacks %s's %v", pair[0], pair[1], missing)
	}
	covers, _ := rbacvalidation.Covers(roles["view"].Rules, roles["edit"].Rules)
	g.Expect(covers).To(BeFalse())
	covers, _ = rbacvalidation.Covers(roles["admin"].Rules, []rbacv1.PolicyRule{{Verbs: []string{"create"}, APIGroups: []string{rbacv1.GroupName}, Resources: []string{"rolebindings"}}})
	g.Expect(covers).To(BeTrue())

	roles["admin"].Rules = nil
	for _, o := range workload.DefaultRBAC() {
		if cr, ok := o.(*rbacv1.ClusterRole); ok && cr.Name == "admin" {
			g.Expect(cr.Rules).NotTo(BeEmpty(), "a caller's change leaked into the next call")
		}
	}
}

// EqualRules is the API's semantic equality of rule lists: order and every field count, a nil
// and an empty list (or field) are alike.
func TestEqualRules(t *testing.T) {
	g := NewWithT(t)
	get := rbacv1.PolicyRule{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"pods"}}
	list := rbacv1.PolicyRule{Verbs: []string{"list"}, APIGroups: []string{""}, Resources: []string{"pods"}}
	g.Expect(workload.EqualRules(nil, []rbacv1.PolicyRule{})).To(BeTrue())
	g.Expect(workload.EqualRules([]rbacv1.PolicyRule{get, list}, []rbacv1.PolicyRule{get, list})).To(BeTrue())
	g.Expect(workload.EqualRules([]rbacv1.PolicyRule{get, list}, []rbacv1.PolicyRule{list, get})).To(BeFalse())
	g.Expect(workload.EqualRules([]rbacv1.PolicyRule{get}, []rbacv1.PolicyRule{get, list})).To(BeFalse())
	named := get
	named.ResourceNames = []string{"a"}
	g.Expect(workload.EqualRules([]rbacv1.PolicyRule{get}, []rbacv1.PolicyRule{named})).To(BeFalse())
	emptyNames := get
	emptyNames.ResourceNames = []string{}
	g.Expect(workload.EqualRules([]rbacv1.PolicyRule{get}, []rbacv1.PolicyRule{emptyNames})).To(BeTrue())
	g.Expect(workload.EqualRules([]rbacv1.PolicyRule{get}, []rbacv1.PolicyRule{{Verbs: []string{"get"}, NonResourceURLs: []string{"/healthz"}}})).To(BeFalse())
}

// BenchmarkAggregationCheck is what the clusterrole-aggregation controller does for each
// aggregated ClusterRole of the default policy on every run: aggregate its parts' rules and
// compare them with the stored ones (equal: nothing to write).
func BenchmarkAggregationCheck(b *testing.B) {
	roles := map[string]*rbacv1.ClusterRole{}
	for _, o := range workload.DefaultRBAC() {
		if cr, ok := o.(*rbacv1.ClusterRole); ok {
			roles[cr.Name] = cr
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		for _, cr := range roles {
			if cr.AggregationRule != nil && !workload.EqualRules(workload.AggregatedRules(cr, roles), cr.Rules) {
				b.Fatalf("%s is not aggregated", cr.Name)
			}
		}
	}
}
