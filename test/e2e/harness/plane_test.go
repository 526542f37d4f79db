package harness

import (
	"context"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/testenv"
)

// TestPlaneWithCAPI starts the plane with the CAPI managers alone and proves what the lifecycle
// suite relies on: CRDs carry contract labels, CAPI's webhooks default, validate and convert, the
// garbage collector runs, and Stop leaves no process behind.
func TestPlaneWithCAPI(t *testing.T) {
	bins := DefaultBinaries(testenv.RepoRoot())
	if err := bins.check(false); err != nil {
		t.Skipf("management plane binaries not built (run hack/capi-managers.sh and ENVTEST_BINARIES='plane-controllers' hack/envtest.sh): %v", err)
	}
	ctrllog.SetLogger(logr.Discard()) // envtest's own logging; the plane reports through Progress
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	out := t.TempDir()
	plane, err := Start(ctx, Options{RepoRoot: testenv.RepoRoot(), OutputDir: out, Binaries: bins, SkipGoofy: true, Progress: testWriter{t}})
	g.Expect(err).NotTo(HaveOccurred())
	stopped := false
	defer func() {
		if t.Failed() {
			DumpLogs(testWriter{t}, plane.LogFiles(), 40)
		}
		if !stopped {
			plane.Stop()
		}
	}()

	// Webhook configurations of all three managers, renamed so they do not collide.
	names, err := plane.WebhookConfigurationNames(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(names).To(ContainElements(
		"capi-mutating-webhook-configuration", "capi-validating-webhook-configuration",
		"capi-kubeadm-bootstrap-mutating-webhook-configuration", "capi-kubeadm-control-plane-validating-webhook-configuration"))

	// Contract labels: CAPI's added by the harness, Goofy's from config/crd/kustomization.yaml.
	crd := &apiextensionsv1.CustomResourceDefinition{}
	g.Expect(plane.Client.Get(ctx, client.ObjectKey{Name: "machines.cluster.x-k8s.io"}, crd)).To(Succeed())
	g.Expect(crd.Labels).To(HaveKeyWithValue("cluster.x-k8s.io/v1beta2", "v1beta2"))
	g.Expect(plane.Client.Get(ctx, client.ObjectKey{Name: "goofymachines.infrastructure.cluster.x-k8s.io"}, crd)).To(Succeed())
	g.Expect(crd.Labels).To(HaveKeyWithValue("cluster.x-k8s.io/v1beta2", "v1alpha1"))

	// Defaulting: CAPI's MachineDeployment webhook fills the selector and cluster-name labels.
	g.Expect(plane.EnsureNamespace(ctx, "harness")).To(Succeed())
	md := &clusterv1.MachineDeployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "harness", Name: "md"},
		Spec: clusterv1.MachineDeploymentSpec{
			ClusterName: "c1",
			Replicas:    ptr.To[int32](1),
			Template: clusterv1.MachineTemplateSpec{Spec: clusterv1.MachineSpec{
				ClusterName: "c1",
				Version:     "v1.36.3",
				Bootstrap: clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{
					APIGroup: "bootstrap.cluster.x-k8s.io", Kind: "KubeadmConfigTemplate", Name: "md"}},
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{
					APIGroup: "infrastructure.cluster.x-k8s.io", Kind: "GoofyMachineTemplate", Name: "md"},
			}},
		},
	}
	g.Expect(plane.Client.Create(ctx, md)).To(Succeed())
	g.Expect(md.Labels).To(HaveKeyWithValue(clusterv1.ClusterNameLabel, "c1"))
	g.Expect(md.Spec.Selector.MatchLabels).To(HaveKeyWithValue(clusterv1.ClusterNameLabel, "c1"))

	// Validation: an invalid version is refused by the validating webhook.
	bad := md.DeepCopy()
	bad.ResourceVersion, bad.Name = "", "bad"
	bad.Spec.Template.Spec.Version = "vfoo"
	err = plane.Client.Create(ctx, bad)
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "expected a validation error, got %v", err)
	g.Expect(err.Error()).To(ContainSubstring("semantic version"))

	// Conversion: reading the v1beta2 object as v1beta1 goes through the core manager's /convert.
	old := &unstructured.Unstructured{}
	old.SetGroupVersionKind(schema.GroupVersionKind{Group: "cluster.x-k8s.io", Version: "v1beta1", Kind: "MachineDeployment"})
	g.Expect(plane.Client.Get(ctx, client.ObjectKeyFromObject(md), old)).To(Succeed())
	g.Expect(old.GetAPIVersion()).To(Equal("cluster.x-k8s.io/v1beta1"))

	// Garbage collection: a dependent goes away with its owner (the plane's garbage collector is running).
	owner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "harness", Name: "owner"}}
	g.Expect(plane.Client.Create(ctx, owner)).To(Succeed())
	dep := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "harness", Name: "dependent",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID}}}}
	g.Expect(plane.Client.Create(ctx, dep)).To(Succeed())
	g.Expect(plane.Client.Delete(ctx, owner)).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(plane.Client.Get(ctx, client.ObjectKeyFromObject(dep), &corev1.ConfigMap{}))
	}, time.Minute, 250*time.Millisecond).Should(BeTrue(), "the garbage collector did not delete the dependent")

	// The same for an owner of a custom resource (the collector finds CAPI's CRDs through discovery),
	// with foreground deletion: the owner stays until its dependent is gone.
	crDep := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "harness", Name: "md-dependent",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: clusterv1.GroupVersion.String(), Kind: "MachineDeployment",
			Name: md.Name, UID: md.UID, BlockOwnerDeletion: ptr.To(true)}}}}
	g.Expect(plane.Client.Create(ctx, crDep)).To(Succeed())
	g.Expect(plane.Client.Delete(ctx, md, client.PropagationPolicy(metav1.DeletePropagationForeground))).To(Succeed())
	g.Eventually(func() bool {
		depGone := apierrors.IsNotFound(plane.Client.Get(ctx, client.ObjectKeyFromObject(crDep), &corev1.ConfigMap{}))
		ownerGone := apierrors.IsNotFound(plane.Client.Get(ctx, client.ObjectKeyFromObject(md), &clusterv1.MachineDeployment{}))
		return depGone && ownerGone
	}, time.Minute, 250*time.Millisecond).Should(BeTrue(), "the foreground deletion of a MachineDeployment did not complete")

	// Namespace deletion: the namespace controller deletes what it holds, then the namespace.
	g.Expect(plane.EnsureNamespace(ctx, "harness-doomed")).To(Succeed())
	g.Expect(plane.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "harness-doomed", Name: "content"}})).To(Succeed())
	g.Expect(plane.Client.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "harness-doomed"}})).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(plane.Client.Get(ctx, client.ObjectKey{Name: "harness-doomed"}, &corev1.Namespace{}))
	}, time.Minute, 250*time.Millisecond).Should(BeTrue(), "the namespace controller did not delete the namespace")

	// Every process has its own log file with content.
	for name, f := range plane.LogFiles() {
		fi, err := os.Stat(f)
		g.Expect(err).NotTo(HaveOccurred(), name)
		g.Expect(fi.Size()).To(BeNumerically(">", 0), name)
	}

	// Stop leaves no process behind.
	var pids []int
	for _, p := range plane.CAPIManagers {
		pids = append(pids, p.Pid())
	}
	plane.Stop()
	stopped = true
	for _, pid := range pids {
		g.Expect(syscall.Kill(pid, 0)).To(MatchError(syscall.ESRCH), "pid %d still alive", pid)
	}
}

func TestRenderTemplate(t *testing.T) {
	g := NewWithT(t)
	tmpl := []byte("name: ${CLUSTER_NAME}\nreplicas: ${WORKER_MACHINE_COUNT:=2}\nns: ${NAMESPACE}\n")
	out, err := RenderTemplate(tmpl, map[string]string{"CLUSTER_NAME": "a", "NAMESPACE": "n"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(out)).To(Equal("name: a\nreplicas: 2\nns: n\n"))

	_, err = RenderTemplate([]byte("x: ${GOOFY_TEST_UNSET_VARIABLE}\n"), nil)
	g.Expect(err).To(MatchError(ContainSubstring("GOOFY_TEST_UNSET_VARIABLE")))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
