package authz_test

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// A request without credentials is system:anonymous, as on a kubeadm cluster: kubeadm's policy
// lets it read cluster-info (what `kubeadm join` discovery reads) and the health endpoints, and
// everything else is refused with kube-apiserver's 403, not a 401; a binding to
// system:unauthenticated widens it from the next request on. (kubectl prompts for a user name
// when its kubeconfig has no credentials, so client-go is the anonymous client here.)
func TestAnonymousRequests(t *testing.T) {
	g := NewWithT(t)
	c := newCluster(t)
	ctx := context.Background()
	g.Expect(c.admin.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cluster-info", Namespace: metav1.NamespacePublic},
		Data: map[string]string{"kubeconfig": "apiVersion: v1\nkind: Config\n"}})).To(Succeed())
	g.Expect(c.admin.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: metav1.NamespacePublic}})).To(Succeed())
	anon := kubernetes.NewForConfigOrDie(&rest.Config{Host: c.l.Address(), TLSClientConfig: rest.TLSClientConfig{CAData: c.caPEM()}})

	cm, err := anon.CoreV1().ConfigMaps(metav1.NamespacePublic).Get(ctx, "cluster-info", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cm.Data).To(HaveKey("kubeconfig"))
	_, err = anon.CoreV1().ConfigMaps(metav1.NamespacePublic).Get(ctx, "other", metav1.GetOptions{})
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "got %v", err)
	g.Expect(err.Error()).To(Equal(`configmaps "other" is forbidden: User "system:anonymous" cannot get resource "configmaps" in API group "" in the namespace "kube-public"`))
	listNamespaces := func() error {
		_, err := anon.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		return err
	}
	err = listNamespaces()
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "got %v", err)
	g.Expect(err.Error()).To(Equal(`namespaces is forbidden: User "system:anonymous" cannot list resource "namespaces" in API group "" at the cluster scope`))
	raw := func(path string) (int, error) {
		var code int
		err := anon.CoreV1().RESTClient().Get().AbsPath(path).Do(ctx).StatusCode(&code).Error()
		return code, err
	}
	code, err := raw("/api")
	g.Expect(code).To(Equal(403))
	g.Expect(err).To(MatchError(ContainSubstring(`forbidden: User "system:anonymous" cannot get path "/api"`)))
	for _, path := range []string{"/healthz", "/livez", "/readyz", "/version"} {
		code, err := raw(path)
		g.Expect(err).NotTo(HaveOccurred(), path)
		g.Expect(code).To(Equal(200), path)
	}

	// The group every anonymous request carries can be bound like any other.
	admin := c.kubectl("kubernetes-admin", "system:masters")
	admin.ok("create", "clusterrolebinding", "anonymous-view", "--clusterrole=view", "--group=system:unauthenticated")
	g.Expect(listNamespaces()).To(Succeed())
	admin.ok("delete", "clusterrolebinding", "anonymous-view")
	g.Expect(listNamespaces()).To(Satisfy(apierrors.IsForbidden))
}
