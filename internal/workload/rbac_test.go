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
