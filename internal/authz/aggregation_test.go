package authz_test

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/authz"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/workload"
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

// BenchmarkAggregateClusterRoles is one run of the clusterrole-aggregation controller over the
// default RBAC policy, already aggregated (what every ClusterRole change in every cluster costs).
func BenchmarkAggregateClusterRoles(b *testing.B) {
	m := store.NewManager()
	c, err := m.AddCluster("bench", store.ClusterOptions{KubernetesVersion: "v1.36.3"})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = m.DeleteCluster("bench") }()
	for _, obj := range workload.DefaultRBAC() {
		if err := c.Client().Create(context.Background(), obj); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := authz.AggregateClusterRoles(context.Background(), c); err != nil {
			b.Fatal(err)
		}
	}
}
