package simulate_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/simulate"
)

// rollOutStatefulSetWithClaims applies StatefulSet db with that many replicas and a claim
// template "data" of 1Gi (and the spec's extra fields, if any), and waits for its rollout.
func (e *env) rollOutStatefulSetWithClaims(replicas int, extraSpec ...string) {
	e.t.Helper()
	manifest := strings.Replace(statefulSetManifest, "replicas: 3", fmt.Sprintf("replicas: %d", replicas), 1) + strings.Join(extraSpec, "") + `  volumeClaimTemplates:
  - metadata: {name: data}
    spec:
      accessModes: [ReadWriteOnce]
      resources: {requests: {storage: 1Gi}}
`
	e.kubectl(true, manifest, "apply", "-f", "-")
	e.kubectl(true, "", "rollout", "status", "statefulset/db", "--timeout=60s")
}

// TestStatefulSetVolumeClaims: each ordinal gets the PersistentVolumeClaims of the
// volumeClaimTemplates, <claim>-<set>-<ordinal>, with the set's selector labels, which the
// PersistentVolume controller binds to a provisioned volume, and its pod mounts them; a
// scale-down keeps them (Retain) and the pod that comes back uses them again.
func TestStatefulSetVolumeClaims(t *testing.T) {
	g := NewWithT(t)
	e := newWorkerEnv(t)
	ctx := context.Background()
	e.rollOutStatefulSetWithClaims(2)
	uids := map[string]types.UID{}
	for _, name := range []string{"data-db-0", "data-db-1"} {
		pvc, err := e.cs.CoreV1().PersistentVolumeClaims("default").Get(ctx, name, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(pvc.Status.Phase).To(Equal(corev1.ClaimBound))
		g.Expect(pvc.Status.Capacity.Storage().Equal(resource.MustParse("1Gi"))).To(BeTrue())
		g.Expect(pvc.Status.AccessModes).To(Equal([]corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}))
		g.Expect(pvc.Labels).To(HaveKeyWithValue("app", "db"))
		g.Expect(pvc.Spec.VolumeName).To(Equal("pvc-"+string(pvc.UID)), "provisioned and bound by the PersistentVolume controller")
		pv, err := e.cs.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(pv.Status.Phase).To(Equal(corev1.VolumeBound))
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
	g.Expect(pvc.OwnerReferences).To(BeEmpty(), "Retain: nobody owns it")

	e.kubectl(true, "", "scale", "statefulset/db", "--replicas=2")
	e.kubectl(true, "", "rollout", "status", "statefulset/db", "--timeout=60s")
	pvc, err = e.cs.CoreV1().PersistentVolumeClaims("default").Get(ctx, "data-db-1", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pvc.UID).To(Equal(uids["data-db-1"]), "the same claim, used again")
	claims, err := e.cs.CoreV1().PersistentVolumeClaims("default").List(ctx, metav1.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(claims.Items).To(HaveLen(2))
}

// TestStatefulSetClaimRetention: under persistentVolumeClaimRetentionPolicy Delete/Delete the
// set owns its ordinals' claims, a scale-down hands a condemned pod's claims to the pod so they
// and their volumes go with it, the pod that comes back gets a new claim, a policy changed to
// Retain takes the set's reference away, and a deleted set takes its claims along; all through
// the garbage collector, as upstream.
func TestStatefulSetClaimRetention(t *testing.T) {
	g := NewWithT(t)
	e := newWorkerEnv(t)
	ctx := context.Background()
	e.rollOutStatefulSetWithClaims(3, "  persistentVolumeClaimRetentionPolicy: {whenScaled: Delete, whenDeleted: Delete}\n")
	set, err := e.cs.AppsV1().StatefulSets("default").Get(ctx, "db", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	claim := func(name string) func(Gomega) *corev1.PersistentVolumeClaim {
		return func(g Gomega) *corev1.PersistentVolumeClaim {
			pvc, err := e.cs.CoreV1().PersistentVolumeClaims("default").Get(ctx, name, metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			return pvc
		}
	}
	ownedBySet := ConsistOf(And(HaveField("Kind", "StatefulSet"), HaveField("Name", "db"), HaveField("UID", set.UID),
		HaveField("Controller", HaveValue(BeTrue())), HaveField("BlockOwnerDeletion", HaveValue(BeTrue()))))
	volumes := map[string]string{}
	for _, name := range []string{"data-db-0", "data-db-1", "data-db-2"} {
		g.Eventually(claim(name), 10*time.Second, 50*time.Millisecond).Should(HaveField("OwnerReferences", ownedBySet))
		g.Eventually(claim(name), 10*time.Second, 50*time.Millisecond).Should(HaveField("Spec.VolumeName", Not(BeEmpty())))
		volumes[name] = claim(name)(g).Spec.VolumeName
	}
	old1 := claim("data-db-1")(g).UID

	// Scale-down: the condemned pods' claims, and their provisioned volumes, are deleted.
	e.kubectl(true, "", "scale", "statefulset/db", "--replicas=1")
	for _, name := range []string{"data-db-1", "data-db-2"} {
		g.Eventually(func() error {
			_, err := e.cs.CoreV1().PersistentVolumeClaims("default").Get(ctx, name, metav1.GetOptions{})
			return err
		}, 30*time.Second, 100*time.Millisecond).Should(Satisfy(apierrors.IsNotFound), name)
		g.Eventually(func() error {
			_, err := e.cs.CoreV1().PersistentVolumes().Get(ctx, volumes[name], metav1.GetOptions{})
			return err
		}, 30*time.Second, 100*time.Millisecond).Should(Satisfy(apierrors.IsNotFound), volumes[name])
	}
	g.Expect(claim("data-db-0")(g).OwnerReferences).To(ownedBySet)

	// Scale-up: a new claim for the ordinal, owned by the set.
	e.kubectl(true, "", "scale", "statefulset/db", "--replicas=2")
	e.kubectl(true, "", "rollout", "status", "statefulset/db", "--timeout=60s")
	g.Eventually(claim("data-db-1"), 10*time.Second, 50*time.Millisecond).Should(And(
		HaveField("UID", Not(Equal(old1))), HaveField("OwnerReferences", ownedBySet)))

	// Retain on deletion: the set lets go of its claims.
	e.kubectl(true, "", "patch", "statefulset/db", "--type=merge", "-p", `{"spec":{"persistentVolumeClaimRetentionPolicy":{"whenDeleted":"Retain"}}}`)
	for _, name := range []string{"data-db-0", "data-db-1"} {
		g.Eventually(claim(name), 10*time.Second, 50*time.Millisecond).Should(HaveField("OwnerReferences", BeEmpty()))
	}

	// Delete on deletion again, then the set goes and takes its claims and their volumes along.
	e.kubectl(true, "", "patch", "statefulset/db", "--type=merge", "-p", `{"spec":{"persistentVolumeClaimRetentionPolicy":{"whenDeleted":"Delete"}}}`)
	for _, name := range []string{"data-db-0", "data-db-1"} {
		g.Eventually(claim(name), 10*time.Second, 50*time.Millisecond).Should(HaveField("OwnerReferences", ownedBySet))
	}
	e.kubectl(true, "", "delete", "statefulset/db", "--wait=false")
	g.Eventually(func(g Gomega) {
		claims, err := e.cs.CoreV1().PersistentVolumeClaims("default").List(ctx, metav1.ListOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(claims.Items).To(BeEmpty())
		pvs, err := e.cs.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(pvs.Items).To(BeEmpty())
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
}

// ephemeralPod is the manifest of a pod with a generic ephemeral volume "scratch".
func ephemeralPod(name string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
spec:
  containers:
  - name: app
    image: busybox:1.36
  volumes:
  - name: scratch
    ephemeral:
      volumeClaimTemplate:
        metadata:
          labels: {type: scratch}
        spec:
          accessModes: [ReadWriteOnce]
          resources: {requests: {storage: 1Gi}}
`, name)
}

// TestGenericEphemeralVolume: a pod's generic ephemeral volume gets claim <pod>-<volume>, owned
// by the pod, provisioned, bound and attached before the pod runs, and deleted with its volume
// when the pod goes; a claim of that name the pod does not own keeps the pod Pending with
// upstream's message.
func TestGenericEphemeralVolume(t *testing.T) {
	g := NewWithT(t)
	e := newWorkerEnv(t)
	ctx := context.Background()
	e.kubectl(true, ephemeralPod("app"), "apply", "-f", "-")
	e.kubectl(true, "", "wait", "--for=condition=Ready", "pod/app", "--timeout=30s")
	pod, err := e.cs.CoreV1().Pods("default").Get(ctx, "app", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	pvc, err := e.cs.CoreV1().PersistentVolumeClaims("default").Get(ctx, "app-scratch", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pvc.OwnerReferences).To(ConsistOf(And(HaveField("Kind", "Pod"), HaveField("Name", "app"), HaveField("UID", pod.UID),
		HaveField("Controller", HaveValue(BeTrue())), HaveField("BlockOwnerDeletion", HaveValue(BeTrue())))))
	g.Expect(pvc.Labels).To(Equal(map[string]string{"type": "scratch"}))
	g.Expect(pvc.Status.Phase).To(Equal(corev1.ClaimBound))
	pv, err := e.cs.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = e.cs.StorageV1().VolumeAttachments().Get(ctx, attachment(pv, pod.Spec.NodeName), metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred(), "attached before the pod ran")

	// A claim of the name that the pod does not own is not its volume.
	e.kubectl(true, strings.Replace(dataClaim, "name: data", "name: other-scratch", 1), "apply", "-f", "-")
	e.kubectl(true, ephemeralPod("other"), "apply", "-f", "-")
	g.Eventually(func(g Gomega) {
		other, err := e.cs.CoreV1().Pods("default").Get(ctx, "other", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(other.Spec.NodeName).To(BeEmpty())
		g.Expect(other.Status.Conditions).To(ContainElement(And(HaveField("Type", corev1.PodScheduled),
			HaveField("Reason", corev1.PodReasonUnschedulable),
			HaveField("Message", ContainSubstring("PVC default/other-scratch was not created for pod default/other (pod is not owner)")))))
	}, 10*time.Second, 50*time.Millisecond).Should(Succeed())

	// The pod goes, and with it its claim and the claim's volume.
	e.kubectl(true, "", "delete", "pod/app", "--wait=true", "--timeout=30s")
	g.Eventually(func() error {
		_, err := e.cs.CoreV1().PersistentVolumeClaims("default").Get(ctx, "app-scratch", metav1.GetOptions{})
		return err
	}, 30*time.Second, 100*time.Millisecond).Should(Satisfy(apierrors.IsNotFound))
	g.Eventually(func() error {
		_, err := e.cs.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
		return err
	}, 30*time.Second, 100*time.Millisecond).Should(Satisfy(apierrors.IsNotFound))
}

// claimPod is the manifest of a pod that mounts a claim.
func claimPod(name, claim string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
spec:
  containers:
  - name: app
    image: busybox:1.36
  volumes:
  - name: data
    persistentVolumeClaim: {claimName: %s}
`, name, claim)
}

const dataClaim = `apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: data
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 2Gi}}
`

var claimManifest = dataClaim + "---\n" + claimPod("app", "data")

// attachment is the VolumeAttachment name the CSI attacher gives a volume on a node.
func attachment(pv *corev1.PersistentVolume, node string) string {
	return fmt.Sprintf("csi-%x", sha256.Sum256([]byte(pv.Spec.CSI.VolumeHandle+pv.Spec.CSI.Driver+node)))
}

// TestClaimProvisionedBoundAttachedAndDeleted: a claim without a class that kubectl creates
// gets a volume pvc-<uid> from the simulated CSI provisioner, both Bound with the fields and
// annotations upstream's PersistentVolume controller and external provisioner set; the pod that
// mounts it starts once its node lists the volume attached (a VolumeAttachment, attached) and in
// use. Deleting the claim waits for the pod (pvc-protection); once the pod is gone the volume is
// detached, and the claim and its volume (policy Delete) are deleted.
func TestClaimProvisionedBoundAttachedAndDeleted(t *testing.T) {
	g := NewWithT(t)
	e := newWorkerEnv(t)
	ctx := context.Background()
	e.kubectl(true, claimManifest, "apply", "-f", "-")
	e.kubectl(true, "", "wait", "--for=condition=Ready", "pod/app", "--timeout=30s")

	pvc, err := e.cs.CoreV1().PersistentVolumeClaims("default").Get(ctx, "data", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pvc.Status.Phase).To(Equal(corev1.ClaimBound))
	g.Expect(pvc.Spec.VolumeName).To(Equal("pvc-" + string(pvc.UID)))
	g.Expect(pvc.Annotations).To(And(HaveKeyWithValue("pv.kubernetes.io/bind-completed", "yes"),
		HaveKeyWithValue("pv.kubernetes.io/bound-by-controller", "yes"),
		HaveKeyWithValue("volume.kubernetes.io/storage-provisioner", simulate.CSIDriver),
		HaveKeyWithValue("volume.beta.kubernetes.io/storage-provisioner", simulate.CSIDriver)))
	g.Expect(pvc.Finalizers).To(ContainElement("kubernetes.io/pvc-protection"))
	g.Expect(pvc.Status.Capacity.Storage().Equal(resource.MustParse("2Gi"))).To(BeTrue())
	g.Expect(pvc.Status.AccessModes).To(Equal([]corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}))

	pv, err := e.cs.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pv.Status.Phase).To(Equal(corev1.VolumeBound))
	g.Expect(pv.Annotations).To(HaveKeyWithValue("pv.kubernetes.io/provisioned-by", simulate.CSIDriver))
	g.Expect(pv.Annotations).NotTo(HaveKey("pv.kubernetes.io/bound-by-controller"), "provisioned pre-bound")
	g.Expect(pv.Spec.Capacity.Storage().Equal(resource.MustParse("2Gi"))).To(BeTrue())
	g.Expect(pv.Spec.AccessModes).To(Equal([]corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}))
	g.Expect(pv.Spec.PersistentVolumeReclaimPolicy).To(Equal(corev1.PersistentVolumeReclaimDelete))
	g.Expect(pv.Spec.StorageClassName).To(BeEmpty())
	g.Expect(*pv.Spec.VolumeMode).To(Equal(corev1.PersistentVolumeFilesystem))
	g.Expect(pv.Spec.ClaimRef).NotTo(BeNil())
	g.Expect(*pv.Spec.ClaimRef).To(And(HaveField("Kind", "PersistentVolumeClaim"), HaveField("APIVersion", "v1"),
		HaveField("Namespace", "default"), HaveField("Name", "data"), HaveField("UID", pvc.UID),
		HaveField("ResourceVersion", Not(BeEmpty()))))
	g.Expect(pv.Spec.CSI).NotTo(BeNil())
	g.Expect(pv.Spec.CSI.Driver).To(Equal(simulate.CSIDriver))
	g.Expect(pv.Spec.CSI.VolumeHandle).NotTo(BeEmpty())

	// Attached to the pod's node, and in use there.
	volumeName := corev1.UniqueVolumeName("kubernetes.io/csi/" + simulate.CSIDriver + "^" + pv.Spec.CSI.VolumeHandle)
	node, err := e.cs.CoreV1().Nodes().Get(ctx, "worker-0", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(node.Status.VolumesAttached).To(Equal([]corev1.AttachedVolume{{Name: volumeName, DevicePath: ""}}))
	g.Expect(node.Status.VolumesInUse).To(Equal([]corev1.UniqueVolumeName{volumeName}))
	va, err := e.cs.StorageV1().VolumeAttachments().Get(ctx, attachment(pv, "worker-0"), metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(va.Status.Attached).To(BeTrue())
	g.Expect(va.Spec.Attacher).To(Equal(simulate.CSIDriver))
	g.Expect(va.Spec.NodeName).To(Equal("worker-0"))
	g.Expect(va.Spec.Source.PersistentVolumeName).To(Equal(&pv.Name))
	out := e.kubectl(true, "", "get", "pvc,pv,volumeattachments")
	g.Expect(out).To(MatchRegexp(`data\s+Bound\s+` + pv.Name + `\s+2Gi\s+RWO\s`))
	g.Expect(out).To(MatchRegexp(pv.Name + `\s+2Gi\s+RWO\s+Delete\s+Bound\s+default/data\s`))
	g.Expect(out).To(MatchRegexp(va.Name + `\s+` + regexp.QuoteMeta(simulate.CSIDriver) + `\s+` + pv.Name + `\s+worker-0\s+true\s`))

	// The claim's deletion waits for its pod.
	g.Expect(e.cs.CoreV1().PersistentVolumeClaims("default").Delete(ctx, "data", metav1.DeleteOptions{})).To(Succeed())
	pvc, err = e.cs.CoreV1().PersistentVolumeClaims("default").Get(ctx, "data", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred(), "held by kubernetes.io/pvc-protection while the pod runs")
	g.Expect(pvc.DeletionTimestamp).NotTo(BeNil())

	g.Expect(e.cs.CoreV1().Pods("default").Delete(ctx, "app", metav1.DeleteOptions{})).To(Succeed())
	g.Eventually(func(g Gomega) {
		_, err := e.cs.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the volume of policy Delete is deleted")
	}, safetyTimeout, poll).Should(Succeed())
	_, err = e.cs.CoreV1().PersistentVolumeClaims("default").Get(ctx, "data", metav1.GetOptions{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue())
	_, err = e.cs.StorageV1().VolumeAttachments().Get(ctx, va.Name, metav1.GetOptions{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "detached before the volume went")
	node, err = e.cs.CoreV1().Nodes().Get(ctx, "worker-0", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(node.Status.VolumesAttached).To(BeEmpty())
	g.Expect(node.Status.VolumesInUse).To(BeEmpty())
}

// TestClaimsOfClassesAndPreBoundVolumes: a claim of a StorageClass gets a volume of the class's
// provisioner and reclaim policy (Retain: the volume stays Released when the claim goes); a
// claim of class "" binds the volume a user pre-bound to it, and nothing is provisioned for it.
func TestClaimsOfClassesAndPreBoundVolumes(t *testing.T) {
	g := NewWithT(t)
	e := newWorkerEnv(t)
	ctx := context.Background()
	e.kubectl(true, `apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: kept
provisioner: disk.example.com
reclaimPolicy: Retain
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: kept
spec:
  storageClassName: kept
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
---
apiVersion: v1
kind: PersistentVolume
metadata:
  name: static
spec:
  storageClassName: ""
  capacity: {storage: 5Gi}
  accessModes: [ReadWriteMany]
  hostPath: {path: /data}
  claimRef: {namespace: default, name: static}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: static
spec:
  storageClassName: ""
  accessModes: [ReadWriteMany]
  resources: {requests: {storage: 1Gi}}
`, "apply", "-f", "-")
	var kept *corev1.PersistentVolumeClaim
	g.Eventually(func(g Gomega) {
		var err error
		kept, err = e.cs.CoreV1().PersistentVolumeClaims("default").Get(ctx, "kept", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(kept.Status.Phase).To(Equal(corev1.ClaimBound))
		static, err := e.cs.CoreV1().PersistentVolumeClaims("default").Get(ctx, "static", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(static.Status.Phase).To(Equal(corev1.ClaimBound))
		g.Expect(static.Spec.VolumeName).To(Equal("static"))
		g.Expect(static.Status.Capacity.Storage().Equal(resource.MustParse("5Gi"))).To(BeTrue(), "the volume's capacity")
	}, safetyTimeout, poll).Should(Succeed())
	pv, err := e.cs.CoreV1().PersistentVolumes().Get(ctx, kept.Spec.VolumeName, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pv.Annotations).To(HaveKeyWithValue("pv.kubernetes.io/provisioned-by", "disk.example.com"))
	g.Expect(pv.Spec.CSI.Driver).To(Equal("disk.example.com"))
	g.Expect(pv.Spec.StorageClassName).To(Equal("kept"))
	g.Expect(pv.Spec.PersistentVolumeReclaimPolicy).To(Equal(corev1.PersistentVolumeReclaimRetain))
	static, err := e.cs.CoreV1().PersistentVolumes().Get(ctx, "static", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(static.Status.Phase).To(Equal(corev1.VolumeBound))
	g.Expect(static.Spec.PersistentVolumeReclaimPolicy).To(Equal(corev1.PersistentVolumeReclaimRetain), "the API's default")
	g.Expect(static.Annotations).NotTo(HaveKey("pv.kubernetes.io/bound-by-controller"), "pre-bound by the user")
	pvs, err := e.cs.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pvs.Items).To(HaveLen(2), "none provisioned for the claim of class \"\"")

	g.Expect(e.cs.CoreV1().PersistentVolumeClaims("default").Delete(ctx, "kept", metav1.DeleteOptions{})).To(Succeed())
	g.Eventually(func(g Gomega) {
		pv, err := e.cs.CoreV1().PersistentVolumes().Get(ctx, kept.Spec.VolumeName, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred(), "Retain keeps the volume")
		g.Expect(pv.Status.Phase).To(Equal(corev1.VolumeReleased))
	}, safetyTimeout, poll).Should(Succeed())
}

// TestDrainDetachesStatefulSetVolume: a StatefulSet pod's volume is attached to its node
// (VolumeAttachment, node.status.volumesAttached and volumesInUse); `kubectl drain` evicts the
// pod, and once it is gone the volume leaves volumesInUse, then volumesAttached, and its
// VolumeAttachment is deleted: what CAPI's drain waits for before it deletes the Node. The claim
// and its volume stay (the set's retention policy, Retain).
func TestDrainDetachesStatefulSetVolume(t *testing.T) {
	g := NewWithT(t)
	e := newWorkerEnv(t)
	ctx := context.Background()
	e.rollOutStatefulSetWithClaims(1)
	pvc, err := e.cs.CoreV1().PersistentVolumeClaims("default").Get(ctx, "data-db-0", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	pv, err := e.cs.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	volumeName := corev1.UniqueVolumeName("kubernetes.io/csi/" + pv.Spec.CSI.Driver + "^" + pv.Spec.CSI.VolumeHandle)
	node, err := e.cs.CoreV1().Nodes().Get(ctx, "worker-0", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(node.Status.VolumesAttached).To(Equal([]corev1.AttachedVolume{{Name: volumeName}}))
	g.Expect(node.Status.VolumesInUse).To(Equal([]corev1.UniqueVolumeName{volumeName}))
	va, err := e.cs.StorageV1().VolumeAttachments().Get(ctx, attachment(pv, "worker-0"), metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(va.Status.Attached).To(BeTrue())

	e.kubectl(true, "", "drain", "worker-0", "--ignore-daemonsets", "--timeout=60s")
	g.Eventually(func(g Gomega) {
		node, err := e.cs.CoreV1().Nodes().Get(ctx, "worker-0", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(node.Status.VolumesInUse).To(BeEmpty())
		g.Expect(node.Status.VolumesAttached).To(BeEmpty())
		_, err = e.cs.StorageV1().VolumeAttachments().Get(ctx, va.Name, metav1.GetOptions{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue())
	}, safetyTimeout, poll).Should(Succeed())
	pvc, err = e.cs.CoreV1().PersistentVolumeClaims("default").Get(ctx, "data-db-0", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pvc.Status.Phase).To(Equal(corev1.ClaimBound), "kept for the pod that comes back")
	g.Eventually(func(g Gomega) {
		pod, err := e.cs.CoreV1().Pods("default").Get(ctx, "db-0", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(pod.Spec.NodeName).To(BeEmpty(), "the replacement waits for a schedulable node")
	}, safetyTimeout, poll).Should(Succeed())
}

// TestVolumesResumeAfterRestart: a cluster restored from its state on disk keeps its claims
// bound, its volumes attached and in use; its controllers go on: a drain detaches them.
func TestVolumesResumeAfterRestart(t *testing.T) {
	g := NewWithT(t)
	e, db := newDurableWorkerEnv(t)
	ctx := context.Background()
	e.rollOutStatefulSetWithClaims(1)
	before, err := e.cs.CoreV1().Nodes().Get(ctx, "worker-0", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(before.Status.VolumesAttached).To(HaveLen(1))
	e.stop()

	e = newEnv(t, db)
	after, err := e.cs.CoreV1().Nodes().Get(ctx, "worker-0", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(after.Status.VolumesAttached).To(Equal(before.Status.VolumesAttached))
	g.Expect(after.Status.VolumesInUse).To(Equal(before.Status.VolumesInUse))
	pvc, err := e.cs.CoreV1().PersistentVolumeClaims("default").Get(ctx, "data-db-0", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pvc.Status.Phase).To(Equal(corev1.ClaimBound))
	e.kubectl(true, "", "drain", "worker-0", "--ignore-daemonsets", "--timeout=60s")
	g.Eventually(func(g Gomega) {
		node, err := e.cs.CoreV1().Nodes().Get(ctx, "worker-0", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(node.Status.VolumesAttached).To(BeEmpty())
		vas, err := e.cs.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(vas.Items).To(BeEmpty())
	}, safetyTimeout, poll).Should(Succeed())
}

// unschedulable waits until the pod is Unschedulable with message want, and its
// FailedScheduling event says so.
func (e *env) unschedulable(g *WithT, pod, want string) {
	e.t.Helper()
	ctx := context.Background()
	g.Eventually(func(g Gomega) {
		p, err := e.cs.CoreV1().Pods("default").Get(ctx, pod, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(p.Spec.NodeName).To(BeEmpty())
		g.Expect(p.Status.Conditions).To(ContainElement(And(
			HaveField("Type", corev1.PodScheduled), HaveField("Status", corev1.ConditionFalse),
			HaveField("Reason", corev1.PodReasonUnschedulable), HaveField("Message", want))))
		events, err := e.cs.EventsV1().Events("default").List(ctx, metav1.ListOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(events.Items).To(ContainElement(And(HaveField("Reason", "FailedScheduling"), HaveField("Note", want),
			HaveField("Regarding.Name", pod), HaveField("Type", corev1.EventTypeWarning))))
	}, safetyTimeout, poll).Should(Succeed())
}

// TestSchedulerWaitsForClaims: as kube-scheduler's VolumeBinding PreFilter, a pod whose claim
// does not exist is not scheduled (persistentvolumeclaim "data" not found) until the claim is
// created; a pod whose claim of Immediate binding is not bound yet (class "", no volume) waits
// (pod has unbound immediate PersistentVolumeClaims) until the PersistentVolume controller binds
// it to a volume created later. A pod whose ReadWriteOncePod claim another pod uses waits for
// that pod to go (VolumeRestrictions).
func TestSchedulerWaitsForClaims(t *testing.T) {
	g := NewWithT(t)
	e := newWorkerEnv(t)
	e.kubectl(true, claimPod("app", "data"), "apply", "-f", "-")
	e.unschedulable(g, "app", `0/1 nodes are available: persistentvolumeclaim "data" not found. `+
		`preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.`)
	e.kubectl(true, dataClaim, "apply", "-f", "-")
	e.kubectl(true, "", "wait", "--for=condition=Ready", "pod/app", "--timeout=30s")

	e.kubectl(true, `apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: static
spec:
  storageClassName: ""
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
---
`+claimPod("static", "static"), "apply", "-f", "-")
	e.unschedulable(g, "static", `0/1 nodes are available: pod has unbound immediate PersistentVolumeClaims. `+
		`preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.`)
	e.kubectl(true, `apiVersion: v1
kind: PersistentVolume
metadata:
  name: static
spec:
  storageClassName: ""
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  csi: {driver: disk.example.com, volumeHandle: static}
`, "apply", "-f", "-")
	e.kubectl(true, "", "wait", "--for=condition=Ready", "pod/static", "--timeout=30s")

	// VolumeRestrictions: a ReadWriteOncePod claim serves one pod at a time.
	e.kubectl(true, `apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: solo
spec:
  accessModes: [ReadWriteOncePod]
  resources: {requests: {storage: 1Gi}}
---
`+claimPod("solo-1", "solo"), "apply", "-f", "-")
	e.kubectl(true, "", "wait", "--for=condition=Ready", "pod/solo-1", "--timeout=30s")
	e.kubectl(true, claimPod("solo-2", "solo"), "apply", "-f", "-")
	e.unschedulable(g, "solo-2", "0/1 nodes are available: 1 node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode already in-use by another pod. "+
		"preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod.")
	e.kubectl(true, "", "delete", "pod/solo-1", "--wait=false")
	e.kubectl(true, "", "wait", "--for=condition=Ready", "pod/solo-2", "--timeout=30s")
}

// TestWaitForFirstConsumer: a claim of a WaitForFirstConsumer class stays Pending (neither
// bound nor provisioned) until a pod that uses it is scheduled: the scheduler annotates it with
// the node it chose (volume.kubernetes.io/selected-node), the provisioner provisions it, it is
// Bound and the pod runs there. A local volume (class of kubernetes.io/no-provisioner, node
// affinity to worker-1) is chosen by the scheduler, which places the pod on the volume's node;
// a pod whose claim no volume on any node satisfies fits nowhere; once worker-1 is cordoned, a
// new pod of the bound local claim fits nowhere either (the volume's node affinity).
func TestWaitForFirstConsumer(t *testing.T) {
	g := NewWithT(t)
	e := newWorkerEnv(t)
	e.addNode("worker-1", "10.0.0.21", false)
	ctx := context.Background()
	e.kubectl(true, `apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: late
provisioner: disk.example.com
volumeBindingMode: WaitForFirstConsumer
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: late
spec:
  storageClassName: late
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: now
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
`, "apply", "-f", "-")
	g.Eventually(func(g Gomega) {
		now, err := e.cs.CoreV1().PersistentVolumeClaims("default").Get(ctx, "now", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(now.Status.Phase).To(Equal(corev1.ClaimBound))
	}, safetyTimeout, poll).Should(Succeed())
	late, err := e.cs.CoreV1().PersistentVolumeClaims("default").Get(ctx, "late", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(late.Status.Phase).To(Equal(corev1.ClaimPending), "no consumer yet")
	g.Expect(late.Spec.VolumeName).To(BeEmpty())
	g.Expect(late.Annotations).NotTo(HaveKey("volume.kubernetes.io/selected-node"))
	g.Expect(late.Finalizers).To(ContainElement("kubernetes.io/pvc-protection"), "synced by the controller")

	e.kubectl(true, claimPod("late", "late"), "apply", "-f", "-")
	e.kubectl(true, "", "wait", "--for=condition=Ready", "pod/late", "--timeout=30s")
	late, err = e.cs.CoreV1().PersistentVolumeClaims("default").Get(ctx, "late", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	p, err := e.cs.CoreV1().Pods("default").Get(ctx, "late", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(late.Annotations).To(HaveKeyWithValue("volume.kubernetes.io/selected-node", p.Spec.NodeName))
	g.Expect(late.Status.Phase).To(Equal(corev1.ClaimBound))
	pv, err := e.cs.CoreV1().PersistentVolumes().Get(ctx, late.Spec.VolumeName, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pv.Annotations).To(HaveKeyWithValue("pv.kubernetes.io/provisioned-by", "disk.example.com"))

	// Local volumes: the scheduler chooses the volume, and the node with it.
	e.kubectl(true, `apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: local
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
---
apiVersion: v1
kind: PersistentVolume
metadata:
  name: local-1
spec:
  storageClassName: local
  capacity: {storage: 10Gi}
  accessModes: [ReadWriteOnce]
  local: {path: /mnt/disks/1}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [worker-1]}]
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: local
spec:
  storageClassName: local
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: local-none
spec:
  storageClassName: local
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
`, "apply", "-f", "-")
	e.kubectl(true, claimPod("local", "local"), "apply", "-f", "-")
	e.kubectl(true, "", "wait", "--for=condition=Ready", "pod/local", "--timeout=30s")
	p, err = e.cs.CoreV1().Pods("default").Get(ctx, "local", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(p.Spec.NodeName).To(Equal("worker-1"), "the volume's node")
	local, err := e.cs.CoreV1().PersistentVolumeClaims("default").Get(ctx, "local", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(local.Spec.VolumeName).To(Equal("local-1"))
	g.Expect(local.Annotations).NotTo(HaveKey("volume.kubernetes.io/selected-node"), "bound, not provisioned")

	e.kubectl(true, claimPod("none", "local-none"), "apply", "-f", "-")
	e.unschedulable(g, "none", "0/2 nodes are available: 2 node(s) didn't find available persistent volumes to bind. "+
		"preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling.")

	e.kubectl(true, "", "cordon", "worker-1")
	e.kubectl(true, claimPod("again", "local"), "apply", "-f", "-")
	e.unschedulable(g, "again", "0/2 nodes are available: 1 node(s) didn't match PersistentVolume's node affinity, "+
		"1 node(s) were unschedulable. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling.")
}

// TestVolumeExpansion: a bound claim whose StorageClass allows expansion grows as the expand
// controller, the CSI resizer and the kubelet grow it (the volume first, FileSystemResizePending
// and NodeResizePending until a pod mounts it, then status.capacity); kube-apiserver's resize
// admission and claim validation refuse what upstream refuses, with its messages, in its order.
func TestVolumeExpansion(t *testing.T) {
	g := NewWithT(t)
	e := newWorkerEnv(t)
	ctx := context.Background()
	classClaim := func(name, class, more string) string {
		return fmt.Sprintf("apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata:\n  name: %s\nprovisioner: disk.example.com\n%s---\n"+
			"apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: %s\nspec:\n  storageClassName: %s\n  accessModes: [ReadWriteOnce]\n"+
			"  resources: {requests: {storage: 1Gi}}\n---\n", class, more, name, class)
	}
	e.kubectl(true, classClaim("data", "growable", "allowVolumeExpansion: true\n")+classClaim("fixed", "fixed", "")+
		classClaim("later", "later", "allowVolumeExpansion: true\nvolumeBindingMode: WaitForFirstConsumer\n"), "apply", "-f", "-")
	e.kubectl(true, "", "wait", "--for=jsonpath={.status.phase}=Bound", "pvc/data", "pvc/fixed", "--timeout=30s")
	grow := func(claim, size string) []string {
		return []string{"patch", "pvc/" + claim, "-p", `{"spec":{"resources":{"requests":{"storage":"` + size + `"}}}}`}
	}
	g.Expect(e.kubectl(false, "", grow("fixed", "2Gi")...)).To(ContainSubstring(`persistentvolumeclaims "fixed" is forbidden: ` +
		"only dynamically provisioned pvc can be resized and the storageclass that provisions the pvc must support resize"))
	// Validation runs before admission, as in kube-apiserver: a claim not bound keeps its spec.
	g.Expect(e.kubectl(false, "", grow("later", "2Gi")...)).To(ContainSubstring(`The PersistentVolumeClaim "later" is invalid: ` +
		"spec: Forbidden: spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims"))
	g.Expect(e.kubectl(false, "", "patch", "pvc/data", "-p", `{"spec":{"accessModes":["ReadWriteMany"]}}`)).To(ContainSubstring(
		"spec: Forbidden: spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims"))

	// No pod mounts it: the volume grows, the file system waits for a pod.
	e.kubectl(true, "", grow("data", "3Gi")...)
	claim := func(g Gomega) *corev1.PersistentVolumeClaim {
		pvc, err := e.cs.CoreV1().PersistentVolumeClaims("default").Get(ctx, "data", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		return pvc
	}
	g.Eventually(func(g Gomega) {
		pvc := claim(g)
		g.Expect(pvc.Annotations).To(HaveKeyWithValue("volume.kubernetes.io/storage-resizer", "disk.example.com"))
		g.Expect(pvc.Status.AllocatedResourceStatuses).To(HaveKeyWithValue(corev1.ResourceStorage, corev1.PersistentVolumeClaimNodeResizePending))
		g.Expect(pvc.Status.Conditions).To(ConsistOf(And(HaveField("Type", corev1.PersistentVolumeClaimFileSystemResizePending),
			HaveField("Status", corev1.ConditionTrue), HaveField("Message", "Waiting for user to (re-)start a pod to finish file system resize of volume on node."))))
		pv, err := e.cs.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(pv.Spec.Capacity.Storage().String()).To(Equal("3Gi"))
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
	pvc := claim(g)
	g.Expect(pvc.Status.Capacity.Storage().String()).To(Equal("1Gi"), "the file system is not grown before a pod mounts it")
	g.Expect(pvc.Status.AllocatedResources.Storage().String()).To(Equal("3Gi"))

	// A pod mounts it: the kubelet grows the file system.
	e.kubectl(true, claimPod("app", "data"), "apply", "-f", "-")
	e.kubectl(true, "", "wait", "--for=condition=Ready", "pod/app", "--timeout=30s")
	g.Eventually(func(g Gomega) {
		pvc := claim(g)
		g.Expect(pvc.Status.Capacity.Storage().String()).To(Equal("3Gi"))
		g.Expect(pvc.Status.Conditions).To(BeEmpty())
		g.Expect(pvc.Status.AllocatedResourceStatuses).To(BeEmpty())
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
	g.Expect(e.kubectl(true, "", "get", "pvc/data", "--no-headers")).To(MatchRegexp(`data\s+Bound\s+pvc-\S+\s+3Gi\s+RWO\s+growable`))

	// Shrinking is refused at status.capacity and below (RecoverVolumeExpansionFailure).
	g.Expect(e.kubectl(false, "", grow("data", "2Gi")...)).To(ContainSubstring(
		"spec.resources.requests.storage: Forbidden: field can not be less than status.capacity"))

	// Online: with the pod running, a second expansion completes without a restart.
	e.kubectl(true, "", grow("data", "4Gi")...)
	g.Eventually(func(g Gomega) string { return claim(g).Status.Capacity.Storage().String() }, 30*time.Second, 100*time.Millisecond).Should(Equal("4Gi"))
}

// setNodeReady sets a Node's Ready condition as the node lifecycle controller does (Unknown: its
// kubelet stopped posting) and, with taint, adds that taint.
func (e *env) setNodeReady(name string, status corev1.ConditionStatus, taint *corev1.Taint) {
	e.t.Helper()
	ctx := context.Background()
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n := &corev1.Node{}
		if err := e.client.Get(ctx, client.ObjectKey{Name: name}, n); err != nil {
			return err
		}
		for i := range n.Status.Conditions {
			if n.Status.Conditions[i].Type == corev1.NodeReady {
				n.Status.Conditions[i].Status = status
			}
		}
		if err := e.client.Status().Update(ctx, n); err != nil || taint == nil {
			return err
		}
		n.Spec.Taints = append(n.Spec.Taints, *taint)
		return e.client.Update(ctx, n)
	}); err != nil {
		e.t.Fatal(err)
	}
}

// TestForcedDetach: a volume no pod needs any more but a node whose kubelet stopped posting
// still reports in use is detached anyway once maxWaitForUnmountDuration has passed (shortened
// here), and at once from a node with the node.kubernetes.io/out-of-service taint, as upstream's
// attach/detach reconciler does; so a claim can move on from a dead node.
func TestForcedDetach(t *testing.T) {
	g := NewWithT(t)
	e := newWorkerEnv(t)
	ctx := context.Background()
	e.sim.SetForceDetachTimeout(2 * time.Second)
	runAndStrand := func() (*storagev1.VolumeAttachment, corev1.UniqueVolumeName) {
		e.kubectl(true, claimManifest, "apply", "-f", "-")
		e.kubectl(true, "", "wait", "--for=condition=Ready", "pod/app", "--timeout=30s")
		pvc, err := e.cs.CoreV1().PersistentVolumeClaims("default").Get(ctx, "data", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		pv, err := e.cs.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		va, err := e.cs.StorageV1().VolumeAttachments().Get(ctx, attachment(pv, "worker-0"), metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(va.Status.Attached).To(BeTrue())
		return va, corev1.UniqueVolumeName("kubernetes.io/csi/" + pv.Spec.CSI.Driver + "^" + pv.Spec.CSI.VolumeHandle)
	}
	detached := func(g Gomega, va *storagev1.VolumeAttachment) {
		_, err := e.cs.StorageV1().VolumeAttachments().Get(ctx, va.Name, metav1.GetOptions{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "VolumeAttachment %s: %v", va.Name, err)
		node, err := e.cs.CoreV1().Nodes().Get(ctx, "worker-0", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(node.Status.VolumesAttached).To(BeEmpty())
	}

	// The kubelet stops posting; the pod goes; the node still reports the volume in use.
	va, volume := runAndStrand()
	e.setNodeReady("worker-0", corev1.ConditionUnknown, nil)
	e.kubectl(true, "", "delete", "pod/app", "--wait=true", "--timeout=30s")
	node, err := e.cs.CoreV1().Nodes().Get(ctx, "worker-0", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(node.Status.VolumesInUse).To(ConsistOf(volume), "a kubelet that stopped posting reports nothing")
	_, err = e.cs.StorageV1().VolumeAttachments().Get(ctx, va.Name, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred(), "still mounted as far as anyone knows: not detached before the wait")
	g.Eventually(func(g Gomega) { detached(g, va) }, 30*time.Second, 100*time.Millisecond).Should(Succeed())
	node, err = e.cs.CoreV1().Nodes().Get(ctx, "worker-0", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(node.Status.VolumesInUse).To(ConsistOf(volume), "detached by force, not because the kubelet unmounted it")

	// Back, then down again with the out-of-service taint: detached at once (the wait is an hour now).
	e.sim.SetForceDetachTimeout(time.Hour)
	e.setNodeReady("worker-0", corev1.ConditionTrue, nil)
	g.Eventually(func(g Gomega) []corev1.UniqueVolumeName {
		node, err := e.cs.CoreV1().Nodes().Get(ctx, "worker-0", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		return node.Status.VolumesInUse
	}, 30*time.Second, 100*time.Millisecond).Should(BeEmpty())
	va, _ = runAndStrand()
	e.setNodeReady("worker-0", corev1.ConditionUnknown, &corev1.Taint{Key: corev1.TaintNodeOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute})
	// The taint is NoExecute: the taint eviction controller may delete the pod before we do.
	e.kubectl(true, "", "delete", "pod/app", "--ignore-not-found", "--wait=true", "--timeout=30s")
	g.Eventually(func(g Gomega) { detached(g, va) }, 30*time.Second, 100*time.Millisecond).Should(Succeed())
}
