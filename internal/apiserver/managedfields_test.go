package apiserver

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// managers lists the field managers recorded on an object.
func managers(obj metav1.Object) []string {
	var out []string
	for _, e := range obj.GetManagedFields() {
		out = append(out, e.Manager)
	}
	return out
}

// TestUntrackedInProcessWrites: objects the simulator writes through its untracked in-process
// client carry no managedFields, while writes over HTTP keep full server-side apply semantics
// on them (ownership, conflicts between appliers, managedFields on creates).
func TestUntrackedInProcessWrites(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	env := newTestEnv(t, Options{})
	in := env.cluster.Client(store.WithoutManagedFields())
	cs := env.clientset(t)

	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"kubernetes.io/hostname": "n1"}},
		Spec: corev1.NodeSpec{ProviderID: "goofy://n1"}}
	g.Expect(in.Create(ctx, node)).To(Succeed())
	g.Expect(node.ManagedFields).To(BeEmpty())
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	g.Expect(in.Status().Update(ctx, node)).To(Succeed())
	got, err := cs.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.ManagedFields).To(BeEmpty(), "in-process writes are not tracked")
	g.Expect(got.Status.Conditions).To(HaveLen(1))

	// A real client applies a label: the fields that were there go to "before-first-apply".
	applied, err := cs.CoreV1().Nodes().Apply(ctx, corev1ac.Node("n1").WithLabels(map[string]string{"capi": "a"}),
		metav1.ApplyOptions{FieldManager: "capi"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(applied.Labels).To(HaveKeyWithValue("capi", "a"))
	g.Expect(applied.Labels).To(HaveKeyWithValue("kubernetes.io/hostname", "n1"), "apply keeps unowned fields")
	g.Expect(managers(applied)).To(ContainElements("before-first-apply", "capi"))

	// A second applier claiming the same label conflicts, and wins only with force.
	_, err = cs.CoreV1().Nodes().Apply(ctx, corev1ac.Node("n1").WithLabels(map[string]string{"capi": "b"}),
		metav1.ApplyOptions{FieldManager: "other"})
	g.Expect(apierrors.IsConflict(err)).To(BeTrue(), "got %v", err)
	forced, err := cs.CoreV1().Nodes().Apply(ctx, corev1ac.Node("n1").WithLabels(map[string]string{"capi": "b"}),
		metav1.ApplyOptions{FieldManager: "other", Force: true})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(forced.Labels).To(HaveKeyWithValue("capi", "b"))

	// Once tracked, the object stays tracked under in-process writes: they are recorded too.
	g.Expect(in.Get(ctx, client.ObjectKey{Name: "n1"}, node)).To(Succeed())
	node.Labels["sim"] = "1"
	g.Expect(in.Update(ctx, node)).To(Succeed())
	g.Expect(managers(node)).To(ContainElements("before-first-apply", "other", "goofy"), "capi lost its only field to the forced apply")

	// A create over HTTP records its manager as always.
	cm, err := cs.CoreV1().ConfigMaps("default").Create(ctx, configMap("default", "cm", map[string]string{"a": "b"}),
		metav1.CreateOptions{FieldManager: "kubectl"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(managers(cm)).To(Equal([]string{"kubectl"}))
}
