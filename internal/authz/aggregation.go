package authz

import (
	"context"
	"slices"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/workload"
)

// AggregateClusterRoles is kube-controller-manager's clusterrole-aggregation controller, run
// after a ClusterRole was written: every aggregated ClusterRole of c gets, stored, the rules of
// the ClusterRoles its selectors match (workload.AggregatedRules). Authorization does not wait
// for it (the index aggregates by itself); it makes `kubectl get clusterrole` show what the
// controller would have written. A role changed meanwhile (a conflict) is left to the write that
// changed it, which runs this again. Like the controller's, its reads and writes wait for no
// disk (store.WithoutSyncWait): a client that reads the roles afterwards waits for them.
func AggregateClusterRoles(ctx context.Context, c *store.Cluster) error {
	// The items are only read; the one written is copied first.
	obj, err := c.List(clusterRolesGVR, "", store.ListOptions{ShareItems: true, SkipSyncWait: true})
	if err != nil {
		return err
	}
	list, _ := obj.(*rbacv1.ClusterRoleList)
	if list == nil {
		return nil
	}
	all := map[string]*rbacv1.ClusterRole{}
	var names []string
	for i := range list.Items {
		cr := &list.Items[i]
		all[cr.Name] = cr
		if cr.AggregationRule != nil {
			names = append(names, cr.Name)
		}
	}
	slices.Sort(names)
	cl := c.Client(store.WithoutSyncWait())
	for _, name := range names {
		cr := all[name]
		rules := workload.AggregatedRules(cr, all)
		if workload.EqualRules(rules, cr.Rules) {
			continue
		}
		updated := cr.DeepCopy()
		updated.Rules = rules
		if err := cl.Update(ctx, updated); err != nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			return err
		}
		all[name] = updated
	}
	return nil
}
