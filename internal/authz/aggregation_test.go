package authz_test

import (
	"testing"

	. "github.com/onsi/gomega"
)

// The aggregated ClusterRoles are stored as the clusterrole-aggregation controller leaves them
// after every ClusterRole write: a new aggregate-to-view role (reading nodes, which none of them does) shows in view, edit and admin; a
// user's aggregated role follows its parts' creation and deletion.
func TestAggregationWithKubectl(t *testing.T) {
	g := NewWithT(t)
	c := newCluster(t)
	admin := c.kubectl("kubernetes-admin", "system:masters")
	resources := func(role string) string {
		return admin.ok("get", "clusterrole", role, "-o", "jsonpath={.rules[*].resources}")
	}
	g.Expect(resources("view")).NotTo(ContainSubstring("nodes"))

	admin.ok("create", "clusterrole", "nodes-view", "--verb=get,list", "--resource=nodes")
	admin.ok("label", "clusterrole", "nodes-view", "rbac.authorization.k8s.io/aggregate-to-view=true")
	for _, role := range []string{"view", "edit", "admin"} {
		g.Expect(resources(role)).To(ContainSubstring("nodes"), role)
	}

	admin.ok("create", "clusterrole", "team-a", "--aggregation-rule=team=a")
	g.Expect(resources("team-a")).To(BeEmpty())
	admin.ok("create", "clusterrole", "team-a-pods", "--verb=get", "--resource=pods")
	admin.ok("label", "clusterrole", "team-a-pods", "team=a")
	g.Expect(resources("team-a")).To(Equal(`["pods"]`))
	admin.ok("delete", "clusterrole", "team-a-pods")
	g.Expect(resources("team-a")).To(BeEmpty())
}
