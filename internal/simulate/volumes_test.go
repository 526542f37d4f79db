package simulate_test

import (
	"context"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestStatefulSetVolumeClaims: each ordinal gets the PersistentVolumeClaims of the
// volumeClaimTemplates, <claim>-<set>-<ordinal>, Bound, with the set's selector labels, and its
// pod mounts them; a scale-down keeps them (Retain) and the pod that comes back uses them again.
func TestStatefulSetVolumeClaims(t *testing.T) {
	g := NewWithT(t)
	e := newWorkerEnv(t)
	ctx := context.Background()
	manifest := strings.Replace(statefulSetManifest, "replicas: 3", "replicas: 2", 1) + `  volumeClaimTemplates:
  - metadata: {name: data}
    spec:
      accessModes: [ReadWriteOnce]
      resources: {requests: {storage: 1Gi}}
`
	e.kubectl(true, manifest, "apply", "-f", "-")
	e.kubectl(true, "", "rollout", "status", "statefulset/db", "--timeout=60s")
	uids := map[string]types.UID{}
	for _, name := range []string{"data-db-0", "data-db-1"} {
		pvc, err := e.cs.CoreV1().PersistentVolumeClaims("default").Get(ctx, name, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(pvc.Status.Phase).To(Equal(corev1.ClaimBound))
		g.Expect(pvc.Status.Capacity.Storage().Equal(resource.MustParse("1Gi"))).To(BeTrue())
		g.Expect(pvc.Status.AccessModes).To(Equal([]corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}))
		g.Expect(pvc.Labels).To(HaveKeyWithValue("app", "db"))
		uids[name] = pvc.UID
	}
	pod, err := e.cs.CoreV1().Pods("default").Get(ctx, "db-1", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pod.Spec.Volumes).To(ContainElement(And(HaveField("Name", "data"),
		HaveField("VolumeSource.PersistentVolumeClaim.ClaimName", "data-db-1"))))

	e.kubectl(true, "", "scale", "statefulset/db", "--replicas=1")
	g.Eventually(func(g Gomega) {
		_, err := e.cs.CoreV1().Pods("default").Get(ctx, "db-1", metav1.GetOptions{})
		g.Expect(err).To(HaveOccurred())
	}, 20*time.Second, 100*time.Millisecond).Should(Succeed())
	pvc, err := e.cs.CoreV1().PersistentVolumeClaims("default").Get(ctx, "data-db-1", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred(), "kept on scale-down")
	g.Expect(pvc.UID).To(Equal(uids["data-db-1"]))

	e.kubectl(true, "", "scale", "statefulset/db", "--replicas=2")
	e.kubectl(true, "", "rollout", "status", "statefulset/db", "--timeout=60s")
	pvc, err = e.cs.CoreV1().PersistentVolumeClaims("default").Get(ctx, "data-db-1", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pvc.UID).To(Equal(uids["data-db-1"]), "the same claim, used again")
	claims, err := e.cs.CoreV1().PersistentVolumeClaims("default").List(ctx, metav1.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(claims.Items).To(HaveLen(2))
}
