package authz

import (
	"slices"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	rbacvalidation "k8s.io/component-helpers/auth/rbac/validation"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/workload"
)

// The Node authorizer, simplified. Upstream's (plugin/pkg/auth/authorizer/node) allows a kubelet
// (user system:node:<name> in group system:nodes) the rules of the system:node ClusterRole, and
// narrows some of them through a graph of the pods bound to the node and what they reference.
// What Goofy does instead:
//
//   - the static rules (upstream's NodeRules as of v1.36, with the rules of features on by
//     default) allow what they allow, for every object of the kind: a node may read and update
//     any Node and any pod's status, and list pods without the spec.nodeName field selector
//     upstream requires (neither the object checks of the Node authorizer nor those of the
//     NodeRestriction admission plugin are made);
//   - a lease in kube-node-lease is allowed only when it is named after the node (as upstream);
//   - secrets, configmaps, persistentvolumeclaims, persistentvolumes and serviceaccounts (get, and
//     create of a token) are allowed one object at a time when a pod bound to the node leads to
//     it (nodegraph.go); the status of claims, resourceclaims and volumeattachments, which
//     upstream also follows through its graph, never are. RBAC decides what this refuses.

// nodeName returns the node whose kubelet u is.
func nodeName(u user.Info) (string, bool) {
	name, ok := strings.CutPrefix(u.GetName(), "system:node:")
	if !ok || name == "" || !slices.Contains(u.GetGroups(), user.NodesGroup) {
		return "", false
	}
	return name, true
}

// graphResources are the resources upstream's Node authorizer decides through its graph.
var graphResources = map[string]bool{
	"secrets": true, "configmaps": true, "persistentvolumeclaims": true, "persistentvolumes": true,
	"resourceclaims": true, "volumeattachments": true, "serviceaccounts": true,
}

// authorizeNode decides a node's request, and says why when it refuses one of the kinds upstream
// would have decided through its graph.
func authorizeNode(c *store.Cluster, node string, attrs authorizer.Attributes) (bool, string) {
	if attrs.IsResourceRequest() {
		switch group, resource := attrs.GetAPIGroup(), attrs.GetResource(); {
		case graphResources[resource] && (group == "" || group == "resource.k8s.io" || group == "storage.k8s.io"):
			return graphAllows(c, node, attrs) // nodegraph.go
		case group == "coordination.k8s.io" && resource == "leases":
			// The name is not known on create; upstream's NodeRestriction admission checks it then.
			switch verb := attrs.GetVerb(); {
			case verb != "get" && verb != "create" && verb != "update" && verb != "patch" && verb != "delete":
				return false, "can only get, create, update, patch, or delete a node lease"
			case attrs.GetNamespace() != "kube-node-lease":
				return false, `can only access leases in the "kube-node-lease" system namespace`
			case verb != "create" && attrs.GetName() != node:
				return false, "can only access node lease with the same name as the requesting node"
			}
		}
	}
	ok, _ := rbacvalidation.Covers(nodeRules, []rbacv1.PolicyRule{requestRule(attrs)})
	return ok, ""
}

// nodeRules are the system:node ClusterRole's rules.
var nodeRules = workload.NodeRules()
