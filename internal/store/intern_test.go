package store

import (
	"reflect"
	"testing"

	. "github.com/onsi/gomega"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestEqualValuesAreStoredOnce: the same ClusterRole stored in two clusters holds one labels map
// and one rule list; a patch in one cluster changes only that cluster's object.
func TestEqualValuesAreStoredOnce(t *testing.T) {
	g := NewWithT(t)
	gvr := rbacv1.SchemeGroupVersion.WithResource("clusterroles")
	role := func() *rbacv1.ClusterRole {
		return &rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: "view-widgets", Labels: map[string]string{"kubernetes.io/bootstrapping": "rbac-defaults"}},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"example.com"}, Resources: []string{"widgets"}, Verbs: []string{"get", "list", "watch"}}},
		}
	}
	a, b := newTestCluster(t), newTestCluster(t)
	for _, c := range []*Cluster{a, b} {
		_, err := c.Create(gvr, "", role(), CreateOptions{FieldManager: "test"})
		g.Expect(err).NotTo(HaveOccurred())
	}
	inA := a.getLocked(gvr.GroupResource(), "view-widgets").(*rbacv1.ClusterRole)
	inB := b.getLocked(gvr.GroupResource(), "view-widgets").(*rbacv1.ClusterRole)
	g.Expect(inA).NotTo(BeIdenticalTo(inB))
	g.Expect(reflect.ValueOf(inA.Labels).Pointer()).To(Equal(reflect.ValueOf(inB.Labels).Pointer()), "one labels map")
	g.Expect(&inA.Rules[0]).To(BeIdenticalTo(&inB.Rules[0]), "one rule list")

	_, err := a.Patch(gvr, "", "view-widgets", types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"team":"a"}},"rules":[{"apiGroups":["example.com"],"resources":["widgets"],"verbs":["*"]}]}`), PatchOptions{FieldManager: "test"})
	g.Expect(err).NotTo(HaveOccurred())
	got, err := b.Get(gvr, "", "view-widgets")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.(*rbacv1.ClusterRole).Labels).To(Equal(map[string]string{"kubernetes.io/bootstrapping": "rbac-defaults"}))
	g.Expect(got.(*rbacv1.ClusterRole).Rules[0].Verbs).To(Equal([]string{"get", "list", "watch"}))
	got, err = a.Get(gvr, "", "view-widgets")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.(*rbacv1.ClusterRole).Labels).To(HaveKeyWithValue("team", "a"))
	g.Expect(got.(*rbacv1.ClusterRole).Rules[0].Verbs).To(Equal([]string{"*"}))
}
