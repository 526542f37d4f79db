package simulate

import (
	"context"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/authz"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

var clusterRolesGR = rbacv1.SchemeGroupVersion.WithResource("clusterroles").GroupResource()

// clusterRoleAggregation is kube-controller-manager's clusterrole-aggregation controller: after any
// ClusterRole changes, every ClusterRole with an aggregationRule stores the rules of the roles its
// selectors match (authz.AggregateClusterRoles). It runs in every cluster, workloads or not, so
// that Goofy's own in-process writes aggregate as HTTP writes do (the API server also aggregates
// before it answers a ClusterRole write, so that the writer reads the result at once).
type clusterRoleAggregation struct {
	c   *cluster
	idx int
}

func newClusterRoleAggregation(c *cluster, idx int) *clusterRoleAggregation {
	return &clusterRoleAggregation{c: c, idx: idx}
}

func (a *clusterRoleAggregation) uncached() {}

func (a *clusterRoleAggregation) resources() []schema.GroupResource {
	return []schema.GroupResource{clusterRolesGR}
}

// observe queues one key for the whole cluster: aggregation reads every ClusterRole anyway, and a
// burst of changes (kubeadm's bootstrap, an add-on's roles) is aggregated once.
func (a *clusterRoleAggregation) observe(store.Change) {
	a.c.enqueue(a.idx, "")
}

func (a *clusterRoleAggregation) sync(ctx context.Context, _ string) error {
	return authz.AggregateClusterRoles(ctx, a.c.store)
}
