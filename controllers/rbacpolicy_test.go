package controllers

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	rbacv1client "k8s.io/client-go/kubernetes/typed/rbac/v1"
	"k8s.io/component-helpers/auth/rbac/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/workload"
)

// TestDefaultPolicyIsReconciledWhenAnAPIServerStarts: a workload cluster's state restored after a
// restart keeps what users changed in it, and the API server that starts again brings
// kube-apiserver's default RBAC policy up to date as kube-apiserver's bootstrap-roles hook does:
// a rule or subject removed from a default object comes back (a cluster whose state an older
// Goofy wrote gets what the new one's policy adds), extra rules and subjects stay, an object
// annotated autoupdate=false and kubeadm's objects are left as they are, a deleted default object
// is created again, and a binding whose roleRef was changed is recreated.
func TestDefaultPolicyIsReconciledWhenAnAPIServerStarts(t *testing.T) {
	requireEnv(t)
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	h := newDurableHarness(t, ns)
	f := newFixture(t, ns, "pol", nil)
	h.provisionCluster(t, f)
	_, cp := newMachine(t, f, "pol-cp-0", machineOpts{controlPlane: true})
	h.reconcileUntilReady(t, cp)
	wc := workloadClient(t, mustListener(t, h.harness, f)).RbacV1()

	extra := rbacv1.PolicyRule{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"secrets"}}
	must := func(_ any, err error) {
		t.Helper()
		g.Expect(err).NotTo(HaveOccurred())
	}
	// A default role that lost its rules and gained one.
	basic, err := wc.ClusterRoles().Get(ctx, "system:basic-user", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	basic.Rules = []rbacv1.PolicyRule{extra}
	must(wc.ClusterRoles().Update(ctx, basic, metav1.UpdateOptions{}))
	// A default role its owner opted out of reconciling.
	monitoring, err := wc.ClusterRoles().Get(ctx, "system:monitoring", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	monitoring.Annotations = map[string]string{rbacv1.AutoUpdateAnnotationKey: "false"}
	monitoring.Rules = nil
	must(wc.ClusterRoles().Update(ctx, monitoring, metav1.UpdateOptions{}))
	// A default binding that lost its subject and gained one.
	bob := rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "bob"}
	discovery := getCRB(t, wc, "system:discovery")
	discovery.Subjects = []rbacv1.Subject{bob}
	must(wc.ClusterRoleBindings().Update(ctx, discovery, metav1.UpdateOptions{}))
	// A namespaced default role that lost its rules, and a kubeadm role that did.
	for _, name := range []string{"system:controller:token-cleaner", "kubeadm:kubelet-config"} {
		r, err := wc.Roles("kube-system").Get(ctx, name, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		r.Rules = nil
		must(wc.Roles("kube-system").Update(ctx, r, metav1.UpdateOptions{}))
	}
	// A deleted default binding, and one recreated with another roleRef.
	g.Expect(wc.ClusterRoleBindings().Delete(ctx, "system:public-info-viewer", metav1.DeleteOptions{})).To(Succeed())
	g.Expect(wc.ClusterRoleBindings().Delete(ctx, "system:kube-dns", metav1.DeleteOptions{})).To(Succeed())
	swapped := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "system:kube-dns"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"},
		Subjects: []rbacv1.Subject{bob}}
	must(wc.ClusterRoleBindings().Create(ctx, swapped, metav1.CreateOptions{}))
	swappedUID := getCRB(t, wc, "system:kube-dns").UID

	// Restored as it was left; the reconcile of the machine starts the API server again.
	h.restart(t)
	h.reconcileMachine(t, cp)
	wc = workloadClient(t, mustListener(t, h.harness, f)).RbacV1()

	want := map[string]client.Object{}
	for _, obj := range workload.DefaultRBAC() {
		want[obj.GetNamespace()+"/"+obj.GetName()+"/"+kindOf(obj)] = obj
	}
	basic, err = wc.ClusterRoles().Get(ctx, "system:basic-user", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(basic.Rules).To(ContainElement(extra), "extra rules stay")
	covered, missing := validation.Covers(basic.Rules, want["/system:basic-user/ClusterRole"].(*rbacv1.ClusterRole).Rules)
	g.Expect(covered).To(BeTrue(), "missing rules come back (upstream adds them one resource per rule): %v", missing)
	monitoring, err = wc.ClusterRoles().Get(ctx, "system:monitoring", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(monitoring.Rules).To(BeEmpty(), "autoupdate=false is left alone")
	discovery = getCRB(t, wc, "system:discovery")
	g.Expect(discovery.Subjects).To(ContainElement(bob))
	g.Expect(discovery.Subjects).To(ContainElements(want["/system:discovery/ClusterRoleBinding"].(*rbacv1.ClusterRoleBinding).Subjects))
	cleaner, err := wc.Roles("kube-system").Get(ctx, "system:controller:token-cleaner", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	covered, missing = validation.Covers(cleaner.Rules, want["kube-system/system:controller:token-cleaner/Role"].(*rbacv1.Role).Rules)
	g.Expect(covered).To(BeTrue(), "missing: %v", missing)
	kubeletConfig, err := wc.Roles("kube-system").Get(ctx, "kubeadm:kubelet-config", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(kubeletConfig.Rules).To(BeEmpty(), "kubeadm's objects are kubeadm's: created once, not reconciled")
	g.Expect(getCRB(t, wc, "system:public-info-viewer").Subjects).To(HaveLen(2))
	kubeDNS := getCRB(t, wc, "system:kube-dns")
	g.Expect(kubeDNS.UID).NotTo(Equal(swappedUID))
	g.Expect(kubeDNS.RoleRef.Name).To(Equal("system:kube-dns"))
	g.Expect(kubeDNS.Subjects).To(Equal(want["/system:kube-dns/ClusterRoleBinding"].(*rbacv1.ClusterRoleBinding).Subjects))
}

func getCRB(t *testing.T, wc rbacv1client.RbacV1Interface, name string) *rbacv1.ClusterRoleBinding {
	t.Helper()
	b, err := wc.ClusterRoleBindings().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func kindOf(obj client.Object) string {
	switch obj.(type) {
	case *rbacv1.ClusterRole:
		return "ClusterRole"
	case *rbacv1.ClusterRoleBinding:
		return "ClusterRoleBinding"
	case *rbacv1.Role:
		return "Role"
	case *rbacv1.RoleBinding:
		return "RoleBinding"
	}
	return ""
}
