package authz_test

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Impersonation headers are checked against the impersonator's rights, and the request then runs
// as the target: `kubectl --as=nobody delete cm x` is nobody's request, even from an admin.
func TestImpersonationWithKubectl(t *testing.T) {
	g := NewWithT(t)
	c := newCluster(t)
	ctx := context.Background()
	g.Expect(c.admin.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "default"}})).To(Succeed())

	// An admin impersonating nobody acts as nobody, who may not delete.
	admin := c.kubectl("kubernetes-admin", "system:masters")
	errOut := admin.fails("--as=nobody", "delete", "configmap", "x")
	g.Expect(errOut).To(ContainSubstring(`configmaps "x" is forbidden: User "nobody" cannot delete resource "configmaps" in API group "" in the namespace "default"`))
	g.Expect(c.admin.Get(ctx, client.ObjectKey{Namespace: "default", Name: "x"}, &corev1.ConfigMap{})).To(Succeed())

	// A service account, impersonated: its ServiceAccount subjects apply (CoreDNS lists pods
	// through system:coredns), and nothing else.
	g.Expect(admin.ok("auth", "can-i", "list", "pods", "--all-namespaces", "--as=system:serviceaccount:kube-system:coredns")).To(Equal("yes\n"))
	code, out, _ := admin.run("auth", "can-i", "list", "pods", "--all-namespaces", "--as=system:serviceaccount:default:coredns")
	g.Expect(code).To(Equal(1))
	g.Expect(out).To(Equal("no\n"))

	// A user without the impersonate verb may not impersonate at all. (kubectl reads discovery
	// first: a refused discovery request is reported as "unknown" by kubectl's discovery client,
	// so alice fills its discovery cache as herself.)
	alice := c.kubectl("alice")
	alice.fails("get", "configmaps")
	errOut = alice.fails("--as=nobody", "get", "configmaps")
	g.Expect(errOut).To(ContainSubstring(`users "nobody" is forbidden: User "alice" cannot impersonate resource "users" in API group "" at the cluster scope`))

	// Allowed to impersonate users and groups: the request runs with the target's rights, and its
	// groups are those asked for (plus system:authenticated).
	g.Expect(c.admin.Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "impersonator"},
		Rules: []rbacv1.PolicyRule{{Verbs: []string{"impersonate"}, APIGroups: []string{""}, Resources: []string{"users", "groups"}}}})).To(Succeed())
	g.Expect(c.admin.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "alice-impersonates"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "impersonator"},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "alice"}}})).To(Succeed())
	admin.ok("create", "rolebinding", "ops-edit", "--clusterrole=edit", "--group=ops", "-n", "default")
	errOut = alice.fails("--as=nobody", "delete", "configmap", "x")
	g.Expect(errOut).To(ContainSubstring(`User "nobody" cannot delete resource "configmaps"`))
	alice.ok("--as=nobody", "--as-group=ops", "delete", "configmap", "x")

	// Impersonating system:masters makes the request privileged, as upstream.
	alice.ok("--as=root", "--as-group=system:masters", "get", "secrets", "-A")
	// The impersonate verb on users does not cover uids.
	errOut = alice.fails("--as=nobody", "--as-uid=1234", "get", "configmaps")
	g.Expect(errOut).To(ContainSubstring(`uids.authentication.k8s.io "1234" is forbidden: User "alice" cannot impersonate resource "uids" in API group "authentication.k8s.io" at the cluster scope`))
}
