package workload

import (
	"slices"
	"sync"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The RBAC of a kubeadm cluster: the default policy kube-apiserver's RBAC post-start hook creates
// (written after k8s.io/kubernetes v1.36's plugin/pkg/auth/authorizer/rbac/bootstrappolicy, the
// roles and bindings a client can notice; the per-controller system:controller:* roles that
// kube-controller-manager's service accounts use are left out, no controller-manager runs), and
// the roles and bindings `kubeadm init` adds.

const (
	aggregateToAdmin = "rbac.authorization.k8s.io/aggregate-to-admin"
	aggregateToEdit  = "rbac.authorization.k8s.io/aggregate-to-edit"
	aggregateToView  = "rbac.authorization.k8s.io/aggregate-to-view"

	// bootstrapTokenGroup is the group of kubeadm's default bootstrap token.
	bootstrapTokenGroup = "system:bootstrappers:kubeadm:default-node-token"
)

var (
	readVerbs      = []string{"get", "list", "watch"}
	writeVerbs     = []string{"create", "update", "patch", "delete", "deletecollection"}
	readWriteVerbs = append(slices.Clone(readVerbs), writeVerbs...)
	readUpdate     = []string{"get", "list", "watch", "update", "patch"}
)

// rules builds a rule: verbs on resources of the API groups.
func rules(verbs []string, groups []string, resources ...string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{Verbs: verbs, APIGroups: groups, Resources: resources}
}

// named narrows a rule to objects of these names.
func named(r rbacv1.PolicyRule, names ...string) rbacv1.PolicyRule {
	r.ResourceNames = names
	return r
}

func urls(verbs []string, paths ...string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{Verbs: verbs, NonResourceURLs: paths}
}

func v(verbs ...string) []string  { return verbs }
func g(groups ...string) []string { return groups }

var core = g("")

func eventsRule() rbacv1.PolicyRule {
	return rules(v("create", "update", "patch"), g("", "events.k8s.io"), "events")
}

// NodeRules are the rules of the system:node ClusterRole, what upstream's Node authorizer allows
// a kubelet before its graph narrows it (features on by default in v1.36 included).
func NodeRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		rules(v("create"), g("authentication.k8s.io"), "tokenreviews"),
		rules(v("create"), g("authorization.k8s.io"), "subjectaccessreviews", "localsubjectaccessreviews"),
		rules(readVerbs, core, "services"),
		rules(v("create", "get", "list", "watch"), core, "nodes"),
		rules(v("update", "patch"), core, "nodes/status"),
		rules(v("update", "patch"), core, "nodes"),
		eventsRule(),
		rules(readVerbs, core, "pods"),
		rules(v("create", "delete"), core, "pods"),
		rules(v("update", "patch"), core, "pods/status"),
		rules(v("create"), core, "pods/eviction"),
		rules(readVerbs, core, "secrets", "configmaps"),
		rules(v("get"), core, "persistentvolumeclaims", "persistentvolumes"),
		rules(v("get"), core, "endpoints"),
		rules(v("create", "get", "list", "watch"), g("certificates.k8s.io"), "certificatesigningrequests"),
		rules(v("get", "create", "update", "patch", "delete"), g("coordination.k8s.io"), "leases"),
		rules(v("get"), g("storage.k8s.io"), "volumeattachments"),
		rules(v("create"), core, "serviceaccounts/token"),
		rules(v("get", "update", "patch"), core, "persistentvolumeclaims/status"),
		rules(v("get", "watch", "list"), g("storage.k8s.io"), "csidrivers"),
		rules(v("get", "create", "update", "patch", "delete"), g("storage.k8s.io"), "csinodes"),
		rules(readVerbs, g("node.k8s.io"), "runtimeclasses"),
		rules(v("get"), g("resource.k8s.io"), "resourceclaims"),
		rules(v("deletecollection"), g("resource.k8s.io"), "resourceslices"),
		rules(v("get"), core, "serviceaccounts"),
	}
}

func viewRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		rules(readVerbs, core, "pods", "replicationcontrollers", "replicationcontrollers/scale", "serviceaccounts",
			"services", "services/status", "endpoints", "persistentvolumeclaims", "persistentvolumeclaims/status", "configmaps"),
		rules(readVerbs, core, "limitranges", "resourcequotas", "bindings", "pods/status", "resourcequotas/status",
			"namespaces/status", "replicationcontrollers/status", "pods/log"),
		rules(readVerbs, core, "namespaces"),
		rules(readVerbs, g("", "events.k8s.io"), "events"),
		rules(readVerbs, g("discovery.k8s.io"), "endpointslices"),
		rules(readVerbs, g("apps"), "controllerrevisions", "statefulsets", "statefulsets/status", "statefulsets/scale",
			"daemonsets", "daemonsets/status", "deployments", "deployments/status", "deployments/scale",
			"replicasets", "replicasets/status", "replicasets/scale"),
		rules(readVerbs, g("autoscaling"), "horizontalpodautoscalers", "horizontalpodautoscalers/status"),
		rules(readVerbs, g("batch"), "jobs", "cronjobs", "cronjobs/status", "jobs/status"),
		rules(readVerbs, g("extensions"), "daemonsets", "daemonsets/status", "deployments", "deployments/scale", "deployments/status",
			"ingresses", "ingresses/status", "replicasets", "replicasets/scale", "replicasets/status", "replicationcontrollers/scale",
			"networkpolicies"),
		rules(readVerbs, g("policy"), "poddisruptionbudgets", "poddisruptionbudgets/status"),
		rules(readVerbs, g("networking.k8s.io"), "networkpolicies", "ingresses", "ingresses/status"),
		rules(readVerbs, g("resource.k8s.io"), "resourceclaims", "resourceclaims/status", "resourceclaimtemplates"),
	}
}

func editRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		rules(readVerbs, core, "pods/attach", "pods/proxy", "pods/exec", "pods/portforward", "secrets", "services/proxy"),
		rules(v("impersonate"), core, "serviceaccounts"),
		rules(writeVerbs, core, "pods", "pods/attach", "pods/proxy", "pods/exec", "pods/portforward"),
		rules(v("create"), core, "pods/eviction"),
		rules(writeVerbs, core, "replicationcontrollers", "replicationcontrollers/scale", "serviceaccounts",
			"services", "services/proxy", "persistentvolumeclaims", "configmaps", "secrets"),
		rules(v("create"), core, "serviceaccounts/token"),
		rules(writeVerbs, g("", "events.k8s.io"), "events"),
		rules(writeVerbs, g("apps"), "statefulsets", "statefulsets/scale", "daemonsets", "deployments", "deployments/scale",
			"deployments/rollback", "replicasets", "replicasets/scale"),
		rules(writeVerbs, g("autoscaling"), "horizontalpodautoscalers"),
		rules(writeVerbs, g("batch"), "jobs", "cronjobs"),
		rules(writeVerbs, g("extensions"), "daemonsets", "deployments", "deployments/scale", "deployments/rollback", "ingresses",
			"replicasets", "replicasets/scale", "replicationcontrollers/scale", "networkpolicies"),
		rules(writeVerbs, g("policy"), "poddisruptionbudgets"),
		rules(writeVerbs, g("networking.k8s.io"), "networkpolicies", "ingresses"),
		rules(readWriteVerbs, g("coordination.k8s.io"), "leases"),
		rules(writeVerbs, g("resource.k8s.io"), "resourceclaims", "resourceclaimtemplates"),
	}
}

func clusterRole(name string, labels map[string]string, rs ...rbacv1.PolicyRule) *rbacv1.ClusterRole {
	return &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Rules: rs}
}

func aggregated(name string, labels map[string]string, selectLabel string) *rbacv1.ClusterRole {
	cr := clusterRole(name, labels)
	cr.AggregationRule = &rbacv1.AggregationRule{ClusterRoleSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{selectLabel: "true"}}}}
	return cr
}

func label(key string) map[string]string { return map[string]string{key: "true"} }

// defaultClusterRoles are kube-apiserver's default ClusterRoles.
func defaultClusterRoles() []*rbacv1.ClusterRole {
	monitoring := []string{"/metrics", "/metrics/slis", "/livez", "/readyz", "/healthz", "/livez/*", "/readyz/*", "/healthz/*", "/flagz", "/statusz"}
	review := []rbacv1.PolicyRule{
		rules(v("create"), g("authentication.k8s.io"), "tokenreviews"),
		rules(v("create"), g("authorization.k8s.io"), "subjectaccessreviews"),
	}
	return []*rbacv1.ClusterRole{
		clusterRole("cluster-admin", nil, rules(v("*"), g("*"), "*"), urls(v("*"), "*")),
		clusterRole("system:discovery", nil, urls(v("get"), "/livez", "/readyz", "/healthz", "/version", "/version/",
			"/openapi", "/openapi/*", "/api", "/api/*", "/apis", "/apis/*")),
		clusterRole("system:monitoring", nil, urls(v("get"), monitoring...), rules(v("get"), core, "nodes/metrics")),
		clusterRole("system:basic-user", nil,
			rules(v("create"), g("authorization.k8s.io"), "selfsubjectaccessreviews", "selfsubjectrulesreviews"),
			rules(v("create"), g("authentication.k8s.io"), "selfsubjectreviews")),
		clusterRole("system:public-info-viewer", nil, urls(v("get"), "/livez", "/readyz", "/healthz", "/version", "/version/")),
		aggregated("admin", nil, aggregateToAdmin),
		aggregated("edit", label(aggregateToAdmin), aggregateToEdit),
		aggregated("view", label(aggregateToEdit), aggregateToView),
		clusterRole("system:aggregate-to-admin", label(aggregateToAdmin),
			rules(v("create"), g("authorization.k8s.io"), "localsubjectaccessreviews"),
			rules(readWriteVerbs, g("rbac.authorization.k8s.io"), "roles", "rolebindings")),
		clusterRole("system:aggregate-to-edit", label(aggregateToEdit), editRules()...),
		clusterRole("system:aggregate-to-view", label(aggregateToView), viewRules()...),
		clusterRole("system:heapster", nil,
			rules(readVerbs, core, "events", "pods", "nodes", "namespaces"),
			rules(readVerbs, g("extensions"), "deployments")),
		clusterRole("system:node", nil, NodeRules()...),
		clusterRole("system:node-problem-detector", nil,
			rules(v("get"), core, "nodes"), rules(v("patch"), core, "nodes/status"), eventsRule()),
		clusterRole("system:node-bootstrapper", nil,
			rules(v("create", "get", "list", "watch"), g("certificates.k8s.io"), "certificatesigningrequests")),
		clusterRole("system:auth-delegator", nil, review...),
		clusterRole("system:kube-aggregator", nil, rules(readVerbs, core, "services", "endpoints")),
		clusterRole("system:kube-controller-manager", nil,
			eventsRule(),
			rules(v("create"), g("coordination.k8s.io"), "leases"),
			named(rules(v("get", "update"), g("coordination.k8s.io"), "leases"), "kube-controller-manager"),
			rules(v("create"), core, "secrets", "serviceaccounts"),
			rules(v("delete"), core, "secrets"),
			rules(v("get"), core, "namespaces", "secrets", "serviceaccounts", "configmaps"),
			rules(v("update"), core, "secrets", "serviceaccounts"),
			review[0], review[1],
			rules(v("list", "watch"), g("*"), "*"),
			rules(v("create"), core, "serviceaccounts/token")),
		clusterRole("system:kube-dns", nil, rules(v("list", "watch"), core, "endpoints", "services")),
		clusterRole("system:persistent-volume-provisioner", nil,
			rules(v("get", "list", "watch", "create", "delete"), core, "persistentvolumes"),
			rules(v("get", "list", "watch", "update"), core, "persistentvolumeclaims"),
			rules(readVerbs, g("storage.k8s.io"), "storageclasses"),
			rules(v("watch"), core, "events"),
			eventsRule()),
		clusterRole("system:certificates.k8s.io:certificatesigningrequests:nodeclient", nil,
			rules(v("create"), g("certificates.k8s.io"), "certificatesigningrequests/nodeclient")),
		clusterRole("system:certificates.k8s.io:certificatesigningrequests:selfnodeclient", nil,
			rules(v("create"), g("certificates.k8s.io"), "certificatesigningrequests/selfnodeclient")),
		clusterRole("system:volume-scheduler", nil,
			rules(readUpdate, core, "persistentvolumes"),
			rules(readVerbs, g("storage.k8s.io"), "storageclasses"),
			rules(readUpdate, core, "persistentvolumeclaims")),
		clusterRole("system:certificates.k8s.io:legacy-unknown-approver", nil,
			named(rules(v("approve"), g("certificates.k8s.io"), "signers"), "kubernetes.io/legacy-unknown")),
		clusterRole("system:certificates.k8s.io:kubelet-serving-approver", nil,
			named(rules(v("approve"), g("certificates.k8s.io"), "signers"), "kubernetes.io/kubelet-serving")),
		clusterRole("system:certificates.k8s.io:kube-apiserver-client-approver", nil,
			named(rules(v("approve"), g("certificates.k8s.io"), "signers"), "kubernetes.io/kube-apiserver-client")),
		clusterRole("system:certificates.k8s.io:kube-apiserver-client-kubelet-approver", nil,
			named(rules(v("approve"), g("certificates.k8s.io"), "signers"), "kubernetes.io/kube-apiserver-client-kubelet")),
		clusterRole("system:service-account-issuer-discovery", nil, urls(v("get"),
			"/.well-known/openid-configuration", "/.well-known/openid-configuration/", "/openid/v1/jwks", "/openid/v1/jwks/")),
		clusterRole("system:kubelet-api-admin", nil,
			rules(readVerbs, core, "nodes"),
			rules(v("proxy"), core, "nodes"),
			rules(v("*"), core, "nodes/proxy", "nodes/metrics", "nodes/stats", "nodes/log"),
			rules(v("*"), core, "nodes/pods", "nodes/healthz", "nodes/configz")),
		clusterRole("system:node-proxier", nil,
			rules(v("list", "watch"), core, "services", "endpoints"),
			rules(readVerbs, core, "nodes"),
			eventsRule(),
			rules(v("list", "watch"), g("networking.k8s.io"), "servicecidrs"),
			rules(v("list", "watch"), g("discovery.k8s.io"), "endpointslices")),
		clusterRole("system:kube-scheduler", nil,
			eventsRule(),
			rules(v("create"), g("coordination.k8s.io"), "leases"),
			named(rules(v("get", "update", "list", "watch"), g("coordination.k8s.io"), "leases"), "kube-scheduler"),
			rules(readWriteVerbs, g("coordination.k8s.io"), "leasecandidates"),
			rules(readVerbs, core, "nodes"),
			rules(v("get", "list", "watch", "delete"), core, "pods"),
			rules(v("create"), core, "pods/binding", "bindings"),
			rules(v("patch", "update"), core, "pods/status"),
			rules(readVerbs, core, "services", "replicationcontrollers"),
			rules(readVerbs, g("apps", "extensions"), "replicasets"),
			rules(readVerbs, g("apps"), "statefulsets"),
			rules(readVerbs, g("policy"), "poddisruptionbudgets"),
			rules(readVerbs, core, "persistentvolumeclaims", "persistentvolumes"),
			review[0], review[1],
			rules(readVerbs, g("storage.k8s.io"), "csinodes"),
			rules(readVerbs, g("storage.k8s.io"), "volumeattachments"),
			rules(readVerbs, core, "namespaces"),
			rules(readVerbs, g("storage.k8s.io"), "csidrivers"),
			rules(readVerbs, g("storage.k8s.io"), "csistoragecapacities"),
			rules(readVerbs, g("resource.k8s.io"), "deviceclasses"),
			rules(readUpdate, g("resource.k8s.io"), "resourceclaims"),
			rules(readUpdate, g("resource.k8s.io"), "resourceclaims/status"),
			rules(v("update"), core, "pods/finalizers"),
			rules(readVerbs, g("resource.k8s.io"), "resourceslices"),
			rules(v("create", "delete"), g("resource.k8s.io"), "resourceclaims"),         // DRAExtendedResource, beta in v1.36
			rules(v("update", "patch"), g("resource.k8s.io"), "resourceclaims/binding")), // DRAResourceClaimGranularStatusAuthorization
	}
}

func subjects(kind string, names ...string) []rbacv1.Subject {
	out := make([]rbacv1.Subject, 0, len(names))
	for _, n := range names {
		s := rbacv1.Subject{Kind: kind, Name: n, APIGroup: rbacv1.GroupName}
		out = append(out, s)
	}
	return out
}

func serviceAccount(namespace, name string) rbacv1.Subject {
	return rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: namespace, Name: name}
}

func clusterBinding(name, role string, subs ...rbacv1.Subject) *rbacv1.ClusterRoleBinding {
	return &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   subs,
	}
}

func roleBinding(namespace, name, role string, subs ...rbacv1.Subject) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role},
		Subjects:   subs,
	}
}

func role(namespace, name string, rs ...rbacv1.PolicyRule) *rbacv1.Role {
	return &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}, Rules: rs}
}

// DefaultRBAC is the RBAC of a fresh kubeadm cluster: kube-apiserver's default policy (labelled
// and annotated as it labels its own) and what kubeadm adds. Aggregated ClusterRoles carry the
// rules the clusterrole-aggregation controller fills in. The objects are the caller's: copies of
// a policy built once (the machine reconciler ensures them on every reconcile of a control-plane
// machine).
func DefaultRBAC() []client.Object {
	policy := defaultRBAC()
	out := make([]client.Object, len(policy))
	for i, o := range policy {
		out[i] = o.DeepCopyObject().(client.Object)
	}
	return out
}

var defaultRBAC = sync.OnceValue(buildDefaultRBAC)

func buildDefaultRBAC() []client.Object {
	const sys, public = metav1.NamespaceSystem, metav1.NamespacePublic
	group := func(names ...string) []rbacv1.Subject { return subjects(rbacv1.GroupKind, names...) }
	users := func(names ...string) []rbacv1.Subject { return subjects(rbacv1.UserKind, names...) }

	roles := defaultClusterRoles()
	AggregateClusterRoles(roles)
	bindings := []*rbacv1.ClusterRoleBinding{
		clusterBinding("cluster-admin", "cluster-admin", group("system:masters")...),
		clusterBinding("system:monitoring", "system:monitoring", group("system:monitoring")...),
		clusterBinding("system:discovery", "system:discovery", group("system:authenticated")...),
		clusterBinding("system:basic-user", "system:basic-user", group("system:authenticated")...),
		clusterBinding("system:public-info-viewer", "system:public-info-viewer", group("system:authenticated", "system:unauthenticated")...),
		clusterBinding("system:node-proxier", "system:node-proxier", users("system:kube-proxy")...),
		clusterBinding("system:kube-controller-manager", "system:kube-controller-manager", users("system:kube-controller-manager")...),
		clusterBinding("system:kube-dns", "system:kube-dns", serviceAccount(sys, "kube-dns")),
		clusterBinding("system:kube-scheduler", "system:kube-scheduler", users("system:kube-scheduler")...),
		clusterBinding("system:volume-scheduler", "system:volume-scheduler", users("system:kube-scheduler")...),
		clusterBinding("system:node", "system:node"),
		clusterBinding("system:service-account-issuer-discovery", "system:service-account-issuer-discovery", group("system:serviceaccounts")...),
	}
	var objs []client.Object
	for _, r := range roles {
		markDefault(&r.ObjectMeta)
		objs = append(objs, r)
	}
	for _, b := range bindings {
		markDefault(&b.ObjectMeta)
		objs = append(objs, b)
	}
	leaderLocking := []rbacv1.PolicyRule{
		rules(v("get", "watch", "list", "create", "update"), g("coordination.k8s.io"), "leases"),
		rules(v("get", "watch", "list", "create", "update"), g("coordination.k8s.io"), "leasecandidates"),
	}
	namespaced := []client.Object{
		role(sys, "extension-apiserver-authentication-reader",
			named(rules(readVerbs, core, "configmaps"), "extension-apiserver-authentication")),
		role(sys, "system:controller:bootstrap-signer", rules(readVerbs, core, "secrets")),
		role(sys, "system:controller:cloud-provider", rules(v("create", "get", "list", "watch"), core, "configmaps")),
		role(sys, "system:controller:token-cleaner", rules(v("get", "list", "watch", "delete"), core, "secrets"), eventsRule()),
		role(sys, "system::leader-locking-kube-controller-manager", leaderLocking...),
		role(sys, "system::leader-locking-kube-scheduler", leaderLocking...),
		roleBinding(sys, "system::extension-apiserver-authentication-reader", "extension-apiserver-authentication-reader",
			users("system:kube-controller-manager", "system:kube-scheduler")...),
		roleBinding(sys, "system::leader-locking-kube-controller-manager", "system::leader-locking-kube-controller-manager",
			append(users("system:kube-controller-manager"), serviceAccount(sys, "kube-controller-manager"), serviceAccount(sys, "leader-election-controller"))...),
		roleBinding(sys, "system::leader-locking-kube-scheduler", "system::leader-locking-kube-scheduler",
			append(users("system:kube-scheduler"), serviceAccount(sys, "kube-scheduler"))...),
		roleBinding(sys, "system:controller:bootstrap-signer", "system:controller:bootstrap-signer", serviceAccount(sys, "bootstrap-signer")),
		roleBinding(sys, "system:controller:cloud-provider", "system:controller:cloud-provider", serviceAccount(sys, "cloud-provider")),
		roleBinding(sys, "system:controller:token-cleaner", "system:controller:token-cleaner", serviceAccount(sys, "token-cleaner")),
		role(public, "system:controller:bootstrap-signer",
			rules(readVerbs, core, "configmaps"), named(rules(v("update"), core, "configmaps"), "cluster-info"), eventsRule()),
		roleBinding(public, "system:controller:bootstrap-signer", "system:controller:bootstrap-signer", serviceAccount(sys, "bootstrap-signer")),
	}
	for _, o := range namespaced {
		markDefault(o.(metav1.ObjectMetaAccessor).GetObjectMeta().(*metav1.ObjectMeta))
	}
	objs = append(objs, namespaced...)
	return append(objs, kubeadmRBAC()...)
}

// kubeadmRBAC is what `kubeadm init` binds: the cluster admins, the API server's kubelet client,
// node bootstrap and certificate approval, the nodes' reads of kubeadm-config and kubelet-config,
// the anonymous read of cluster-info, CoreDNS and kube-proxy.
func kubeadmRBAC() []client.Object {
	const sys, public = metav1.NamespaceSystem, metav1.NamespacePublic
	group := func(names ...string) []rbacv1.Subject { return subjects(rbacv1.GroupKind, names...) }
	configMap := func(name string) rbacv1.PolicyRule { return named(rules(v("get"), core, "configmaps"), name) }
	return []client.Object{
		clusterBinding("kubeadm:cluster-admins", "cluster-admin", group("kubeadm:cluster-admins")...),
		clusterBinding("kubeadm:apiserver-kubelet-client", "system:kubelet-api-admin", subjects(rbacv1.UserKind, "kube-apiserver-kubelet-client")...),
		clusterBinding("kubeadm:kubelet-bootstrap", "system:node-bootstrapper", group(bootstrapTokenGroup)...),
		clusterBinding("kubeadm:node-autoapprove-bootstrap", "system:certificates.k8s.io:certificatesigningrequests:nodeclient", group(bootstrapTokenGroup)...),
		clusterBinding("kubeadm:node-autoapprove-certificate-rotation", "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient", group("system:nodes")...),
		clusterRole("kubeadm:get-nodes", nil, rules(v("get"), core, "nodes")),
		clusterBinding("kubeadm:get-nodes", "kubeadm:get-nodes", group(bootstrapTokenGroup)...),
		role(sys, "kubeadm:nodes-kubeadm-config", configMap("kubeadm-config")),
		roleBinding(sys, "kubeadm:nodes-kubeadm-config", "kubeadm:nodes-kubeadm-config", group(bootstrapTokenGroup, "system:nodes")...),
		role(sys, "kubeadm:kubelet-config", configMap("kubelet-config")),
		roleBinding(sys, "kubeadm:kubelet-config", "kubeadm:kubelet-config", group(bootstrapTokenGroup, "system:nodes")...),
		role(public, "kubeadm:bootstrap-signer-clusterinfo", configMap("cluster-info")),
		roleBinding(public, "kubeadm:bootstrap-signer-clusterinfo", "kubeadm:bootstrap-signer-clusterinfo", subjects(rbacv1.UserKind, "system:anonymous")...),
		clusterRole("system:coredns", nil,
			rules(v("list", "watch"), core, "endpoints", "services", "pods", "namespaces"),
			rules(v("list", "watch"), g("discovery.k8s.io"), "endpointslices")),
		clusterBinding("system:coredns", "system:coredns", serviceAccount(sys, "coredns")),
		clusterBinding("kubeadm:node-proxier", "system:node-proxier", serviceAccount(sys, "kube-proxy")),
		role(sys, "kube-proxy", configMap("kube-proxy")),
		roleBinding(sys, "kube-proxy", "kube-proxy", group(bootstrapTokenGroup)...),
	}
}

// markDefault labels and annotates an object of the default policy as kube-apiserver does: it is
// reconciled (missing rules and subjects added) on every start unless the annotation says false.
func markDefault(m *metav1.ObjectMeta) {
	if m.Labels == nil {
		m.Labels = map[string]string{}
	}
	m.Labels["kubernetes.io/bootstrapping"] = "rbac-defaults"
	m.Annotations = map[string]string{rbacv1.AutoUpdateAnnotationKey: "true"}
}

// AggregateClusterRoles fills in the rules of the aggregated ClusterRoles among roles, in place,
// from the others, as the clusterrole-aggregation controller does.
func AggregateClusterRoles(roles []*rbacv1.ClusterRole) {
	all := map[string]*rbacv1.ClusterRole{}
	for _, r := range roles {
		all[r.Name] = r
	}
	filled := map[string][]rbacv1.PolicyRule{}
	for _, r := range roles {
		if r.AggregationRule != nil {
			filled[r.Name] = AggregatedRules(r, all)
		}
	}
	for name, rs := range filled {
		all[name].Rules = rs
	}
}

// AggregatedRules are the rules the clusterrole-aggregation controller writes into an aggregated
// ClusterRole: those of every other ClusterRole one of its selectors matches (in name order), each
// rule once. A matched role that aggregates in turn gives its own aggregate (the controller
// reaches that state through successive updates); a cycle gives nothing more.
func AggregatedRules(cr *rbacv1.ClusterRole, all map[string]*rbacv1.ClusterRole) []rbacv1.PolicyRule {
	return aggregate(cr, all, map[string]bool{})
}

func aggregate(cr *rbacv1.ClusterRole, all map[string]*rbacv1.ClusterRole, visiting map[string]bool) []rbacv1.PolicyRule {
	visiting[cr.Name] = true
	defer delete(visiting, cr.Name)
	var selectors []labels.Selector
	for i := range cr.AggregationRule.ClusterRoleSelectors {
		if s, err := metav1.LabelSelectorAsSelector(&cr.AggregationRule.ClusterRoleSelectors[i]); err == nil && !s.Empty() {
			selectors = append(selectors, s)
		}
	}
	names := make([]string, 0, len(all))
	for name := range all {
		names = append(names, name)
	}
	slices.Sort(names)
	var out []rbacv1.PolicyRule
	for _, name := range names {
		other := all[name]
		if visiting[name] || !slices.ContainsFunc(selectors, func(s labels.Selector) bool { return s.Matches(labels.Set(other.Labels)) }) {
			continue
		}
		add := other.Rules
		if other.AggregationRule != nil {
			add = aggregate(other, all, visiting)
		}
		for _, r := range add {
			if !slices.ContainsFunc(out, func(have rbacv1.PolicyRule) bool { return equalRule(have, r) }) {
				out = append(out, r)
			}
		}
	}
	return out
}

// EqualRules reports whether a and b are the same rules in the same order (a nil and an empty
// list alike, as the API's semantic equality has them): what the aggregation controller compares
// before it writes, without reflection.
func EqualRules(a, b []rbacv1.PolicyRule) bool { return slices.EqualFunc(a, b, equalRule) }

func equalRule(a, b rbacv1.PolicyRule) bool {
	return slices.Equal(a.Verbs, b.Verbs) && slices.Equal(a.APIGroups, b.APIGroups) && slices.Equal(a.Resources, b.Resources) &&
		slices.Equal(a.ResourceNames, b.ResourceNames) && slices.Equal(a.NonResourceURLs, b.NonResourceURLs)
}
