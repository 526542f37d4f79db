package apiserver

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/user"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// newRBACEnv serves a cluster whose requests carry the user client-go's impersonation headers
// name (in system:authenticated), else system:masters, as the authenticating mux in front of the
// handler would set it. It returns clients for the admin and for frank, who holds get and create
// on pods and may edit Roles in namespace team (the handler itself authorizes no verbs).
func newRBACEnv(t *testing.T) (admin, frank *kubernetes.Clientset) {
	t.Helper()
	m := store.NewManager()
	c, err := m.AddCluster("test", store.ClusterOptions{KubernetesVersion: testVersion})
	if err != nil {
		t.Fatal(err)
	}
	h := NewHandler(c, Options{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u := &user.DefaultInfo{Name: "kubernetes-admin", Groups: []string{user.SystemPrivilegedGroup}}
		if name := r.Header.Get("Impersonate-User"); name != "" {
			u = &user.DefaultInfo{Name: name, Groups: []string{user.AllAuthenticated}}
		}
		h.ServeHTTP(w, r.WithContext(apirequest.WithUser(r.Context(), u)))
	}))
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		m.DeleteCluster("test")
	})
	cfg := &rest.Config{Host: srv.URL, QPS: -1, Timeout: 30 * time.Second}
	admin = kubernetes.NewForConfigOrDie(cfg)
	fcfg := rest.CopyConfig(cfg)
	fcfg.Impersonate.UserName = "frank"
	frank = kubernetes.NewForConfigOrDie(fcfg)

	ctx := context.Background()
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, r := range []*rbacv1.Role{
		{ObjectMeta: metav1.ObjectMeta{Name: "frank", Namespace: "team"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "create"}},
			{APIGroups: []string{rbacv1.GroupName}, Resources: []string{"roles"}, Verbs: []string{"get", "patch", "update"}},
		}},
		{ObjectMeta: metav1.ObjectMeta{Name: "pods", Namespace: "team"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}},
		}},
		{ObjectMeta: metav1.ObjectMeta{Name: "quota", Namespace: "team"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"resourcequotas"}, Verbs: []string{"create"}},
		}},
	} {
		if _, err := admin.RbacV1().Roles("team").Create(ctx, r, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := admin.RbacV1().RoleBindings("team").Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "frank", Namespace: "team"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "frank"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "frank"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return admin, frank
}

// frankEscalates is upstream's refusal of frank's write of Role "pods" lacking the verbs on
// resourcequotas.
func frankEscalates(verbs string) string {
	return `roles.rbac.authorization.k8s.io "pods" is forbidden: user "frank" (groups=["system:authenticated"]) is attempting to grant RBAC permissions not currently held:` + "\n" +
		`{APIGroups:[""], Resources:["resourcequotas"], Verbs:[` + verbs + `]}`
}

// A patch or update of a Role that grants more than the user holds is refused with upstream's
// message; one that grants what it holds is stored. Updates of garbage-collection fields only are
// not judged (upstream's IsOnlyMutatingGCFields); other updates of a role the user could not
// write are.
func TestRBACEscalationOnPatchAndUpdate(t *testing.T) {
	g := NewWithT(t)
	admin, frank := newRBACEnv(t)
	ctx := context.Background()
	roles := frank.RbacV1().Roles("team")

	_, err := roles.Patch(ctx, "pods", types.JSONPatchType,
		[]byte(`[{"op":"add","path":"/rules/-","value":{"apiGroups":[""],"resources":["resourcequotas"],"verbs":["create"]}}]`), metav1.PatchOptions{})
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)
	g.Expect(err.Error()).To(Equal(frankEscalates(`"create"`)))

	r, err := roles.Get(ctx, "pods", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	r.Rules = append(r.Rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"resourcequotas"}, Verbs: []string{"create"}})
	_, err = roles.Update(ctx, r, metav1.UpdateOptions{})
	g.Expect(err).To(MatchError(frankEscalates(`"create"`)))
	_, err = roles.Update(ctx, r, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
	g.Expect(err).To(MatchError(frankEscalates(`"create"`)))

	_, err = roles.Patch(ctx, "pods", types.JSONPatchType,
		[]byte(`[{"op":"replace","path":"/rules/0/verbs","value":["get","create"]}]`), metav1.PatchOptions{})
	g.Expect(err).NotTo(HaveOccurred())

	_, err = roles.Patch(ctx, "quota", types.MergePatchType, []byte(`{"metadata":{"finalizers":["example.com/keep"]}}`), metav1.PatchOptions{})
	g.Expect(err).NotTo(HaveOccurred(), "a change of finalizers only is not judged")
	_, err = roles.Patch(ctx, "quota", types.MergePatchType, []byte(`{"metadata":{"labels":{"a":"b"}}}`), metav1.PatchOptions{})
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)

	// Removing a ClusterRole's aggregationRule needs full authority, as setting one does.
	_, err = admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta:      metav1.ObjectMeta{Name: "aggregated"},
		AggregationRule: &rbacv1.AggregationRule{ClusterRoleSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{"none": "x"}}}},
	}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = frank.RbacV1().ClusterRoles().Patch(ctx, "aggregated", types.MergePatchType, []byte(`{"aggregationRule":null}`), metav1.PatchOptions{})
	g.Expect(err).To(MatchError(`clusterroles.rbac.authorization.k8s.io "aggregated" is forbidden: must have cluster-admin privileges to use the aggregationRule`))
}

// The escalation check of a patch judges the object that is stored, in the same optimistic
// write: frank's patch only adds create to the Role's first rule, harmless on the Role he read
// (pods), but an admin's write lands after the check allowed it and before it is stored, making
// the first rule resourcequotas. The patch is applied again to the new Role and judged again: it
// is refused, and the stored Role is the admin's. (Judged by a dry run before the write, it was
// stored, granting frank create on resourcequotas.) A concurrent write that keeps the patch
// harmless lets it through, applied to the new Role.
func TestRBACEscalationPatchRacesConcurrentWrite(t *testing.T) {
	for _, tc := range []struct {
		name       string
		concurrent rbacv1.PolicyRule
		wantErr    string
		want       rbacv1.PolicyRule
	}{
		{"escalating", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"resourcequotas"}, Verbs: []string{"get"}},
			frankEscalates(`"get" "create"`),
			rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"resourcequotas"}, Verbs: []string{"get"}}},
		{"harmless", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list"}},
			"", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "create"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			admin, frank := newRBACEnv(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()

			var judged atomic.Int32
			hook := func() {
				if judged.Add(1) != 1 {
					return
				}
				r, err := admin.RbacV1().Roles("team").Get(ctx, "pods", metav1.GetOptions{})
				if err != nil {
					t.Error(err)
					return
				}
				r.Rules = []rbacv1.PolicyRule{tc.concurrent}
				if _, err := admin.RbacV1().Roles("team").Update(ctx, r, metav1.UpdateOptions{}); err != nil {
					t.Error(err)
				}
			}
			afterGrantJudged.Store(&hook)
			t.Cleanup(func() { afterGrantJudged.Store(nil) })

			_, err := frank.RbacV1().Roles("team").Patch(ctx, "pods", types.JSONPatchType,
				[]byte(`[{"op":"replace","path":"/rules/0/verbs","value":["get","create"]}]`), metav1.PatchOptions{})
			if tc.wantErr != "" {
				g.Expect(err).To(MatchError(tc.wantErr))
				g.Expect(judged.Load()).To(BeEquivalentTo(1), "the check allowed the patch on the Role frank read")
			} else {
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(judged.Load()).To(BeEquivalentTo(2), "the check ran again on the new Role")
			}
			r, err := admin.RbacV1().Roles("team").Get(ctx, "pods", metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(r.Rules).To(Equal([]rbacv1.PolicyRule{tc.want}))
		})
	}
}
