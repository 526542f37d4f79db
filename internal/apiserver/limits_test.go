package apiserver

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// jsonPatchOps is a JSON patch of n test operations (each a no-op on any object).
func jsonPatchOps(n int) []byte {
	ops := make([]string, n)
	for i := range ops {
		ops[i] = `{"op":"test","path":"/kind","value":"ConfigMap"}`
	}
	return []byte("[" + strings.Join(ops, ",") + "]")
}

// copyBomb doubles a ConfigMap's data with every copy: 14 copies of 2 KB would end at 32 MB,
// from a 2 KB request. Without the copy limit the patch applies and the result fails to decode
// (400: data values must be strings); with it, applying stops at 3 MiB (422).
func copyBomb() []byte {
	var b strings.Builder
	b.WriteString(`[{"op":"add","path":"/data","value":{"a":"` + strings.Repeat("x", 2048) + `"}}`)
	for i := 0; i < 14; i++ {
		fmt.Fprintf(&b, `,{"op":"copy","from":"/data","path":"/data/c%d"}`, i)
	}
	b.WriteString("]")
	return []byte(b.String())
}

func TestBoundsAnswerAsUpstream(t *testing.T) {
	g := NewWithT(t)
	env := newTestEnv(t, Options{})
	cs := env.clientset(t)
	c := ctx(t)
	cms := cs.CoreV1().ConfigMaps("default")

	// ConfigMap and Secret data: at most 1 MiB, 422 with upstream's field error.
	big := strings.Repeat("x", 1200*1000)
	_, err := cms.Create(c, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "big"}, Data: map[string]string{"k": big}}, metav1.CreateOptions{})
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
	g.Expect(err.Error()).To(ContainSubstring("Too long: may not be more than 1048576 bytes"))
	_, err = cs.CoreV1().Secrets("default").Create(c, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "big"}, Data: map[string][]byte{"k": []byte(big)}}, metav1.CreateOptions{})
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
	g.Expect(err.Error()).To(ContainSubstring("data: Too long: may not be more than 1048576 bytes"))
	_, err = cms.Create(c, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "badkey"}, Data: map[string]string{"a b": "v"}}, metav1.CreateOptions{})
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)

	// Growing a ConfigMap past the bound by update or patch is refused too.
	cm, err := cms.Create(c, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "small"}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	cm.Data["k"] = big
	_, err = cms.Update(c, cm, metav1.UpdateOptions{})
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
	_, err = cms.Patch(c, "small", types.MergePatchType, []byte(`{"data":{"k":"`+big+`"}}`), metav1.PatchOptions{})
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)

	// JSON patch: at most 10,000 operations (413), copies adding up to at most 3 MiB (422).
	_, err = cms.Patch(c, "small", types.JSONPatchType, jsonPatchOps(10000), metav1.PatchOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = cms.Patch(c, "small", types.JSONPatchType, jsonPatchOps(10001), metav1.PatchOptions{})
	g.Expect(apierrors.IsRequestEntityTooLargeError(err)).To(BeTrue(), "%v", err)
	g.Expect(err.Error()).To(ContainSubstring("The allowed maximum operations in a JSON patch is 10000, got 10001"))
	bomb := copyBomb()
	g.Expect(len(bomb)).To(BeNumerically("<", 4096))
	_, err = cms.Patch(c, "small", types.JSONPatchType, bomb, metav1.PatchOptions{})
	// Upstream's answer (NewGenericServerResponse): 422, reason Invalid, its generic message.
	status := apierrors.APIStatus(nil)
	g.Expect(errors.As(err, &status)).To(BeTrue(), "%v", err)
	g.Expect(status.Status().Code).To(Equal(int32(http.StatusUnprocessableEntity)), "%v", err)
	g.Expect(status.Status().Reason).To(Equal(metav1.StatusReasonInvalid))
	after, err := cms.Get(c, "small", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(after.Data).To(Equal(map[string]string{"k": "v"}), "the refused patch changed nothing")

	// The same bounds on the scale subresource's patches.
	_, err = cs.AppsV1().Deployments("default").Create(c, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "d"},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "d"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "d"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}}},
		},
	}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	scaleOps := strings.Replace(string(jsonPatchOps(10001)), `"value":"ConfigMap"`, `"value":"Scale"`, -1)
	_, err = cs.AppsV1().Deployments("default").Patch(c, "d", types.JSONPatchType, []byte(scaleOps), metav1.PatchOptions{}, "scale")
	g.Expect(apierrors.IsRequestEntityTooLargeError(err)).To(BeTrue(), "%v", err)
}
