package authz_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// A user without a binding is refused with kube-apiserver's message; a RoleBinding lets it list
// in that namespace only, from the next request on, and deleting it takes the right away again.
func TestRBACDecidesWithKubectl(t *testing.T) {
	g := NewWithT(t)
	c := newCluster(t)
	ctx := context.Background()
	g.Expect(c.admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "other"}})).To(Succeed())
	for _, ns := range []string{"default", "other"} {
		g.Expect(c.admin.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: ns}})).To(Succeed())
	}
	alice := c.kubectl("alice", "developers")

	errOut := alice.fails("get", "configmaps", "-n", "default")
	g.Expect(errOut).To(ContainSubstring(`Error from server (Forbidden): configmaps is forbidden: User "alice" cannot list resource "configmaps" in API group "" in the namespace "default"`))
	errOut = alice.fails("get", "nodes")
	g.Expect(errOut).To(ContainSubstring(`nodes is forbidden: User "alice" cannot list resource "nodes" in API group "" at the cluster scope`))

	// Bound to view in default (through the group), by an admin over HTTP: the next request may list.
	admin := c.kubectl("kubernetes-admin", "system:masters")
	admin.ok("create", "rolebinding", "devs-view", "--clusterrole=view", "--group=developers", "-n", "default")
	g.Expect(alice.ok("get", "configmaps", "-n", "default", "-o", "name")).To(ContainSubstring("configmap/x"))
	errOut = alice.fails("get", "configmaps", "-n", "other")
	g.Expect(errOut).To(ContainSubstring(`User "alice" cannot list resource "configmaps" in API group "" in the namespace "other"`))
	errOut = alice.fails("delete", "configmap", "x", "-n", "default")
	g.Expect(errOut).To(ContainSubstring(`configmaps "x" is forbidden: User "alice" cannot delete resource "configmaps" in API group "" in the namespace "default"`))

	// An in-process write (no HTTP request to tell the authorizer) takes effect through the watch.
	g.Expect(c.admin.Delete(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "devs-view", Namespace: "default"}})).To(Succeed())
	g.Eventually(func() error {
		_, err := c.clientset("alice", "developers").CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
		return err
	}, 5*time.Second, 20*time.Millisecond).Should(Satisfy(apierrors.IsForbidden))
}

// Every RBAC write over HTTP is seen by the writer's very next request, for each kind.
func TestRBACChangeTakesEffectOnNextRequest(t *testing.T) {
	g := NewWithT(t)
	c := newCluster(t)
	ctx := context.Background()
	admin := c.clientset("kubernetes-admin", "system:masters")
	bob := c.clientset("bob")
	list := func() error {
		_, err := bob.CoreV1().Secrets("default").List(ctx, metav1.ListOptions{})
		return err
	}
	g.Expect(list()).To(Satisfy(apierrors.IsForbidden))
	for i := 0; i < 5; i++ {
		role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "secrets", Namespace: "default"},
			Rules: []rbacv1.PolicyRule{{Verbs: []string{"list"}, APIGroups: []string{""}, Resources: []string{"secrets"}}}}
		_, err := admin.RbacV1().Roles("default").Create(ctx, role, metav1.CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(list()).To(Satisfy(apierrors.IsForbidden), "a Role alone grants nothing")
		rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "bob", Namespace: "default"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "secrets"},
			Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "bob"}}}
		_, err = admin.RbacV1().RoleBindings("default").Create(ctx, rb, metav1.CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(list()).To(Succeed())
		g.Expect(admin.RbacV1().Roles("default").Delete(ctx, "secrets", metav1.DeleteOptions{})).To(Succeed())
		err = list()
		g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "got %v", err)
		g.Expect(err.Error()).To(HaveSuffix(`: RBAC: role.rbac.authorization.k8s.io "secrets" not found`))
		g.Expect(admin.RbacV1().RoleBindings("default").Delete(ctx, "bob", metav1.DeleteOptions{})).To(Succeed())
	}

	// A ClusterRoleBinding to a ClusterRole, and an aggregated ClusterRole that picks up a new role.
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "bob-view"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "bob"}}}
	_, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = bob.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred(), "view lets list pods in all namespaces")
	g.Expect(list()).To(Satisfy(apierrors.IsForbidden), "view does not read secrets")
	extra := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "secrets-viewer", Labels: map[string]string{"rbac.authorization.k8s.io/aggregate-to-view": "true"}},
		Rules: []rbacv1.PolicyRule{{Verbs: []string{"list"}, APIGroups: []string{""}, Resources: []string{"secrets"}}}}
	_, err = admin.RbacV1().ClusterRoles().Create(ctx, extra, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(list()).To(Succeed(), "view aggregates the new role")
}

// The kubeadm identities other than system:masters are authorized by the default policy.
func TestKubeadmIdentities(t *testing.T) {
	g := NewWithT(t)
	c := newCluster(t)
	ctx := context.Background()

	// kubeadm's admin.conf group, through its ClusterRoleBinding to cluster-admin.
	_, err := c.clientset("kubernetes-admin", "kubeadm:cluster-admins").CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())

	kcm := c.clientset("system:kube-controller-manager")
	_, err = kcm.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred(), "controller-manager lists everything")
	_, err = kcm.CoreV1().Pods("default").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}}, metav1.CreateOptions{})
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "got %v", err)

	sched := c.clientset("system:kube-scheduler")
	_, err = sched.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = sched.CoreV1().Secrets("default").List(ctx, metav1.ListOptions{})
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "got %v", err)

	proxy := c.clientset("system:kube-proxy")
	_, err = proxy.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())

	// A node: its rules, its own lease only, kubeadm-config through kubeadm's Role, not other
	// secrets or configmaps.
	node := c.clientset("system:node:worker-0", "system:nodes")
	_, err = node.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = node.CoordinationV1().Leases("kube-node-lease").Get(ctx, "worker-0", metav1.GetOptions{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "got %v", err)
	_, err = node.CoordinationV1().Leases("kube-node-lease").Get(ctx, "worker-1", metav1.GetOptions{})
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "got %v", err)
	g.Expect(err.Error()).To(HaveSuffix(": can only access node lease with the same name as the requesting node"))
	_, err = node.CoordinationV1().Leases("default").List(ctx, metav1.ListOptions{})
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "got %v", err)
	_, err = node.CoreV1().ConfigMaps("kube-system").Get(ctx, "kubeadm-config", metav1.GetOptions{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "allowed, absent here: %v", err)
	_, err = node.CoreV1().Secrets("kube-system").Get(ctx, "bootstrap-token-abcdef", metav1.GetOptions{})
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "got %v", err)
	g.Expect(err.Error()).To(ContainSubstring("no relationship found between node 'worker-0' and this object"))

	// Every authenticated user may discover the API and check its own access.
	_, err = c.clientset("nobody").Discovery().ServerGroups()
	g.Expect(err).NotTo(HaveOccurred())
}

// A node reads what the pods bound to it reference, one object at a time, and nothing else of
// those kinds (the part of upstream's Node authorizer graph Goofy follows).
func TestNodeReadsWhatItsPodsReference(t *testing.T) {
	g := NewWithT(t)
	c := newCluster(t)
	ctx := context.Background()
	for _, obj := range []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "mounted", Namespace: "default"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "pull", Namespace: "default"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: "default"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "env", Namespace: "default"}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "runner", Namespace: "default"}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default"}, Spec: corev1.PodSpec{
			NodeName:           "worker-0",
			ServiceAccountName: "runner",
			ImagePullSecrets:   []corev1.LocalObjectReference{{Name: "pull"}},
			Volumes:            []corev1.Volume{{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "mounted"}}}},
			Containers: []corev1.Container{{Name: "c", Image: "busybox", EnvFrom: []corev1.EnvFromSource{
				{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "env"}}}}}},
		}},
	} {
		g.Expect(c.admin.Create(ctx, obj)).To(Succeed())
	}
	worker0 := c.clientset("system:node:worker-0", "system:nodes")
	worker1 := c.clientset("system:node:worker-1", "system:nodes")
	for _, name := range []string{"mounted", "pull"} {
		_, err := worker0.CoreV1().Secrets("default").Get(ctx, name, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred(), name)
		_, err = worker1.CoreV1().Secrets("default").Get(ctx, name, metav1.GetOptions{})
		g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%s: %v", name, err)
		g.Expect(err.Error()).To(HaveSuffix(": no relationship found between node 'worker-1' and this object"))
	}
	_, err := worker0.CoreV1().Secrets("default").Get(ctx, "other", metav1.GetOptions{})
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "got %v", err)
	_, err = worker0.CoreV1().Secrets("default").List(ctx, metav1.ListOptions{})
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "got %v", err)
	g.Expect(err.Error()).To(HaveSuffix(": No Object name found"))
	_, err = worker0.CoreV1().Secrets("default").List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=mounted"})
	g.Expect(err).NotTo(HaveOccurred(), "a kubelet's single-object list")
	_, err = worker0.CoreV1().ConfigMaps("default").Get(ctx, "env", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = worker0.CoreV1().ServiceAccounts("default").Get(ctx, "runner", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = worker1.CoreV1().ServiceAccounts("default").Get(ctx, "runner", metav1.GetOptions{})
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "got %v", err)
}
