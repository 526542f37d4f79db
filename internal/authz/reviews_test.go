package authz_test

import (
	"context"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// kubectl auth can-i (SelfSubjectAccessReview), can-i --list (SelfSubjectRulesReview) and whoami
// (SelfSubjectReview), for a user, an admin and through impersonation.
func TestAuthCommandsWithKubectl(t *testing.T) {
	g := NewWithT(t)
	c := newCluster(t)
	admin := c.kubectl("kubernetes-admin", "system:masters")
	admin.ok("create", "rolebinding", "carol-view", "--clusterrole=view", "--user=carol", "-n", "default")
	carol := c.kubectl("carol", "testers")

	g.Expect(strings.TrimSpace(carol.ok("auth", "can-i", "list", "pods"))).To(Equal("yes"))
	code, out, _ := carol.run("auth", "can-i", "delete", "pods")
	g.Expect(code).To(Equal(1))
	g.Expect(strings.TrimSpace(out)).To(Equal("no"))
	code, out, _ = carol.run("auth", "can-i", "list", "pods", "-n", "kube-system")
	g.Expect(code).To(Equal(1))
	g.Expect(strings.TrimSpace(out)).To(Equal("no"))
	g.Expect(strings.TrimSpace(carol.ok("auth", "can-i", "get", "/healthz"))).To(Equal("yes"))
	g.Expect(strings.TrimSpace(admin.ok("auth", "can-i", "*", "*"))).To(Equal("yes"))
	code, out, _ = admin.run("auth", "can-i", "delete", "pods", "--as=carol")
	g.Expect(code).To(Equal(1))
	g.Expect(strings.TrimSpace(out)).To(Equal("no"))

	list := carol.ok("auth", "can-i", "--list")
	g.Expect(list).To(MatchRegexp(`(?m)^\s*pods\s+\[\]\s+\[\]\s+\[get list watch\]`))
	g.Expect(list).To(MatchRegexp(`(?m)^\s*selfsubjectaccessreviews\.authorization\.k8s\.io\s+\[\]\s+\[\]\s+\[create\]`))
	g.Expect(list).To(MatchRegexp(`(?m)^\s*\[/healthz\]\s+\[\]\s+\[get\]`))
	g.Expect(list).NotTo(ContainSubstring("secrets"))
	g.Expect(admin.ok("auth", "can-i", "--list")).To(MatchRegexp(`(?m)^\s*\*\.\*\s+\[\]\s+\[\]\s+\[\*\]`))

	// The review kinds are described in OpenAPI, as upstream's.
	g.Expect(carol.ok("explain", "selfsubjectaccessreviews.spec.resourceAttributes")).To(ContainSubstring("verb"))
	g.Expect(carol.ok("explain", "selfsubjectreviews.status")).To(ContainSubstring("userInfo"))

	who := carol.ok("auth", "whoami")
	g.Expect(who).To(MatchRegexp(`Username\s+carol`))
	g.Expect(who).To(MatchRegexp(`Groups\s+\[testers system:authenticated\]`))
	g.Expect(admin.ok("auth", "whoami", "--as=dave", "--as-group=ops")).To(MatchRegexp(`Username\s+dave`))
}

// client-go's typed reviews: the self reviews for anyone, SubjectAccessReview and
// LocalSubjectAccessReview for those allowed to create them, with upstream's validation.
func TestReviewsWithClientGo(t *testing.T) {
	g := NewWithT(t)
	c := newCluster(t)
	ctx := context.Background()
	erin := c.clientset("erin")

	ssar, err := erin.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
		Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "get", Resource: "configmaps", Namespace: "default"}},
	}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ssar.Status.Allowed).To(BeFalse())
	ssar, err = erin.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
		Spec: authorizationv1.SelfSubjectAccessReviewSpec{NonResourceAttributes: &authorizationv1.NonResourceAttributes{Verb: "get", Path: "/version"}},
	}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ssar.Status.Allowed).To(BeTrue())
	_, err = erin.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{}, metav1.CreateOptions{})
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "got %v", err)
	g.Expect(err.Error()).To(ContainSubstring("exactly one of nonResourceAttributes or resourceAttributes must be specified"))

	ssr, err := erin.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ssr.Status.UserInfo.Username).To(Equal("erin"))

	// Not stored: only create is served.
	_, err = c.clientset("kubernetes-admin", "system:masters").AuthorizationV1().RESTClient().Get().AbsPath("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews").DoRaw(ctx)
	g.Expect(apierrors.IsMethodNotSupported(err)).To(BeTrue(), "got %#v", err)

	// SubjectAccessReview: erin may not ask about others; an admin may.
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: "system:kube-scheduler",
		ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "create", Resource: "pods", Subresource: "binding", Namespace: "default"}}}
	_, err = erin.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "got %v", err)
	admin := c.clientset("kubernetes-admin", "system:masters")
	got, err := admin.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.Status.Allowed).To(BeTrue())
	_, err = admin.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		NonResourceAttributes: &authorizationv1.NonResourceAttributes{Verb: "get", Path: "/"}}}, metav1.CreateOptions{})
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "got %v", err)

	lsar, err := admin.AuthorizationV1().LocalSubjectAccessReviews("kube-system").Create(ctx, &authorizationv1.LocalSubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{User: "system:kube-controller-manager",
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Name: "kube-controller-manager", Namespace: "kube-system"}},
	}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(lsar.Status.Allowed).To(BeTrue())
	_, err = admin.AuthorizationV1().LocalSubjectAccessReviews("kube-system").Create(ctx, &authorizationv1.LocalSubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{User: "x", ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "get", Resource: "pods", Namespace: "default"}},
	}, metav1.CreateOptions{})
	g.Expect(apierrors.IsBadRequest(err)).To(BeTrue(), "got %v", err)

	// Selectors (1.31+): validated as kube-apiserver validates them; the decision is RBAC's.
	withSelectors := func(fs *authorizationv1.FieldSelectorAttributes, ls *authorizationv1.LabelSelectorAttributes) (*authorizationv1.SelfSubjectAccessReview, error) {
		return admin.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Verb: "list", Resource: "pods", FieldSelector: fs, LabelSelector: ls}},
		}, metav1.CreateOptions{})
	}
	allowed, err := withSelectors(&authorizationv1.FieldSelectorAttributes{RawSelector: "spec.nodeName=n1"},
		&authorizationv1.LabelSelectorAttributes{Requirements: []metav1.LabelSelectorRequirement{{Key: "app", Operator: metav1.LabelSelectorOpIn, Values: []string{"web"}}}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(allowed.Status.Allowed).To(BeTrue())
	_, err = withSelectors(&authorizationv1.FieldSelectorAttributes{RawSelector: "spec.nodeName=n1",
		Requirements: []metav1.FieldSelectorRequirement{{Key: "spec.nodeName", Operator: metav1.FieldSelectorOpIn, Values: []string{"n1"}}}}, nil)
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "got %v", err)
	g.Expect(err.Error()).To(ContainSubstring("spec.resourceAttributes.fieldSelector.rawSelector"))
	_, err = withSelectors(nil, &authorizationv1.LabelSelectorAttributes{})
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "got %v", err)
	g.Expect(err.Error()).To(ContainSubstring("when spec.resourceAttributes.labelSelector is specified, requirements or rawSelector is required"))
	_, err = withSelectors(nil, &authorizationv1.LabelSelectorAttributes{Requirements: []metav1.LabelSelectorRequirement{{Key: "app", Operator: metav1.LabelSelectorOpExists, Values: []string{"x"}}}})
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "an Exists requirement with values: %v", err)

	// Discovery lists them.
	res, err := erin.Discovery().ServerResourcesForGroupVersion("authorization.k8s.io/v1")
	g.Expect(err).NotTo(HaveOccurred())
	var names []string
	for _, r := range res.APIResources {
		names = append(names, r.Name)
	}
	g.Expect(names).To(ConsistOf("localsubjectaccessreviews", "selfsubjectaccessreviews", "selfsubjectrulesreviews", "subjectaccessreviews"))
}
