package authz_test

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RBAC's escalation prevention: a namespace admin may grant what it holds, not more, unless it may
// bind (or escalate) the role; a patch is judged by its result.
func TestEscalationWithKubectl(t *testing.T) {
	g := NewWithT(t)
	c := newCluster(t)
	g.Expect(c.admin.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}})).To(Succeed())
	admin := c.kubectl("kubernetes-admin", "system:masters")
	admin.ok("create", "rolebinding", "frank-admin", "--clusterrole=admin", "--user=frank", "-n", "team")
	frank := c.kubectl("frank")

	frank.ok("create", "rolebinding", "gina-view", "--clusterrole=view", "--user=gina", "-n", "team")
	frank.ok("create", "role", "pods", "--verb=get", "--resource=pods", "-n", "team")

	errOut := frank.fails("create", "role", "quota", "--verb=create,delete", "--resource=resourcequotas", "-n", "team")
	g.Expect(errOut).To(ContainSubstring(`roles.rbac.authorization.k8s.io "quota" is forbidden: user "frank" (groups=["system:authenticated"]) is attempting to grant RBAC permissions not currently held:` + "\n" +
		`{APIGroups:[""], Resources:["resourcequotas"], Verbs:["create" "delete"]}`))
	errOut = frank.fails("create", "rolebinding", "frank-root", "--clusterrole=cluster-admin", "--user=frank", "-n", "team")
	g.Expect(errOut).To(ContainSubstring(`rolebindings.rbac.authorization.k8s.io "frank-root" is forbidden: user "frank" (groups=["system:authenticated"]) is attempting to grant RBAC permissions not currently held:`))
	errOut = frank.fails("create", "rolebinding", "frank-missing", "--clusterrole=no-such-role", "--user=frank", "-n", "team")
	g.Expect(errOut).To(ContainSubstring(`clusterrole.rbac.authorization.k8s.io "no-such-role" not found`))
	errOut = frank.fails("patch", "role", "pods", "-n", "team", "--type=json",
		"-p", `[{"op":"add","path":"/rules/-","value":{"apiGroups":[""],"resources":["resourcequotas"],"verbs":["create"]}}]`)
	g.Expect(errOut).To(ContainSubstring(`roles.rbac.authorization.k8s.io "pods" is forbidden: user "frank"`))
	frank.ok("patch", "role", "pods", "-n", "team", "--type=json",
		"-p", `[{"op":"add","path":"/rules/-","value":{"apiGroups":[""],"resources":["pods"],"verbs":["list"]}}]`)

	// The bind verb on cluster-admin lets frank bind it in his namespace without holding it.
	admin.ok("create", "clusterrole", "bind-cluster-admin", "--verb=bind", "--resource=clusterroles", "--resource-name=cluster-admin")
	admin.ok("create", "rolebinding", "frank-binds", "--clusterrole=bind-cluster-admin", "--user=frank", "-n", "team")
	frank.ok("create", "rolebinding", "frank-root", "--clusterrole=cluster-admin", "--user=frank", "-n", "team")
	frank.ok("create", "role", "quota", "--verb=create,delete", "--resource=resourcequotas", "-n", "team")
}
