package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/goofy-capi/cluster-api-provider-goofy/test/e2e/harness"
)

var (
	repoOnce sync.Once
	ccRepo   *harness.ClusterctlRepository
	ccErr    error
)

// clusterctlRepository builds the local repositories once per suite run.
func clusterctlRepository(ctx context.Context, t *testing.T, g Gomega) *harness.ClusterctlRepository {
	t.Helper()
	repo, err := buildClusterctlRepository(ctx, logWriter{t})
	g.Expect(err).NotTo(HaveOccurred())
	return repo
}

// generateCluster runs the real `clusterctl generate cluster` against the local repository.
func generateCluster(ctx context.Context, t *testing.T, g Gomega, name, flavor string, cp, workers string, extraEnv ...string) []byte {
	t.Helper()
	return generateClusterIn(ctx, t, g, ns, name, flavor, cp, workers, extraEnv...)
}

// generateClusterIn is generateCluster for another target namespace.
func generateClusterIn(ctx context.Context, t *testing.T, g Gomega, namespace, name, flavor string, cp, workers string, extraEnv ...string) []byte {
	t.Helper()
	repo := clusterctlRepository(ctx, t, g)
	out, err := repo.Clusterctl(ctx, bins.Clusterctl(), extraEnv, clusterctlGenerateArgs(namespace, name, flavor, cp, workers)...)
	g.Expect(err).NotTo(HaveOccurred())
	return []byte(out)
}

// clusterctlGenerateArgs are the arguments of `clusterctl generate cluster` for a cluster of the
// namespace.
func clusterctlGenerateArgs(namespace, name, flavor, cp, workers string) []string {
	args := []string{"generate", "cluster", name, "--infrastructure", "goofy:" + harness.GoofyVersion,
		"--target-namespace", namespace, "--control-plane-machine-count", cp, "--worker-machine-count", workers,
		"--kubeconfig", plane.Kubeconfig}
	if flavor != "" {
		args = append(args, "--flavor", flavor)
	}
	return args
}

// generateNamespace is the target namespace of TestClusterctlGenerate's output, which is never applied.
const generateNamespace = "e2e-generate"

func kindsOf(g Gomega, manifests []byte) []string {
	var kinds []string
	for _, doc := range strings.Split(string(manifests), "\n---") {
		u := &unstructured.Unstructured{}
		g.Expect(yaml.Unmarshal([]byte(doc), &u.Object)).To(Succeed())
		if len(u.Object) > 0 {
			kinds = append(kinds, u.GetKind())
		}
	}
	return kinds
}

// clusterctl reads the repository `make release-manifests` builds: the provider description, the
// components and the cluster flavors (the topology flavor pulls in clusterclass-goofy.yaml).
func TestClusterctlGenerate(t *testing.T) {
	ctx, g := begin(t, 10*time.Minute)
	repo := clusterctlRepository(ctx, t, g)

	out, err := repo.Clusterctl(ctx, bins.Clusterctl(), nil, "generate", "provider", "--infrastructure", "goofy", "--describe")
	g.Expect(err).NotTo(HaveOccurred())
	t.Log(out)
	g.Expect(out).To(ContainSubstring("goofy"))
	g.Expect(out).To(ContainSubstring(harness.GoofyVersion))
	g.Expect(out).To(ContainSubstring("goofy-system"))

	out, err = repo.Clusterctl(ctx, bins.Clusterctl(), nil, "generate", "provider", "--infrastructure", "goofy")
	g.Expect(err).NotTo(HaveOccurred())
	kinds := kindsOf(g, []byte(out))
	g.Expect(kinds).To(ContainElements("Namespace", "CustomResourceDefinition", "Deployment", "ClusterRole"))
	namespaces := 0
	for _, k := range kinds {
		if k == "Namespace" {
			namespaces++
		}
	}
	g.Expect(namespaces).To(Equal(1), "clusterctl requires exactly one Namespace in the components")

	// A namespace of its own: with --kubeconfig, clusterctl leaves out of the topology flavor a
	// ClusterClass that the target namespace already has, and the suite's namespace has the
	// goofy ClusterClass once the cc cluster exists.
	def := generateClusterIn(ctx, t, g, generateNamespace, "gen", "", "3", "2")
	g.Expect(kindsOf(g, def)).To(ConsistOf("Cluster", "GoofyCluster", "KubeadmControlPlane", "GoofyMachineTemplate",
		"KubeadmConfigTemplate", "GoofyMachineTemplate", "MachineDeployment", "MachineHealthCheck"))
	g.Expect(string(def)).To(ContainSubstring("replicas: 3"))
	g.Expect(string(def)).To(ContainSubstring("namespace: " + generateNamespace))

	topo := generateClusterIn(ctx, t, g, generateNamespace, "gen", "topology", "1", "1")
	g.Expect(kindsOf(g, topo)).To(ContainElements("ClusterClass", "GoofyClusterTemplate", "KubeadmControlPlaneTemplate", "Cluster"))

	pool := generateClusterIn(ctx, t, g, generateNamespace, "gen", "machinepool", "1", "3")
	g.Expect(kindsOf(g, pool)).To(ConsistOf("Cluster", "GoofyCluster", "KubeadmControlPlane", "GoofyMachineTemplate",
		"KubeadmConfig", "GoofyMachinePool", "MachinePool"))
	g.Expect(string(pool)).To(ContainSubstring("replicas: 3"))
}

// clusterctl init installs CAPI core, kubeadm bootstrap and control plane, and Goofy from local
// repositories into an empty management cluster, leaving the inventory, contract-labelled CRDs,
// RBAC and the Goofy Deployment (no kubelet runs it here; init without --wait-providers).
func TestClusterctlInit(t *testing.T) {
	ctx, g := begin(t, 10*time.Minute)
	repo := clusterctlRepository(ctx, t, g)
	bare, err := harness.Start(ctx, harness.Options{
		RepoRoot: repoRoot, OutputDir: filepath.Join(runDir, "clusterctl-init"), Binaries: bins, Bare: true, Progress: logWriter{t},
	})
	g.Expect(err).NotTo(HaveOccurred())
	defer bare.Stop()
	g.Expect(bare.InstallCertManagerCRDs(ctx, logWriter{t})).To(Succeed())

	repo.Log = logWriter{t}
	defer func() { repo.Log = nil }()
	_, err = repo.Clusterctl(ctx, bins.Clusterctl(), nil, "init", "--kubeconfig", bare.Kubeconfig,
		"--core", "cluster-api:"+harness.CAPIVersion, "--bootstrap", "kubeadm:"+harness.CAPIVersion,
		"--control-plane", "kubeadm:"+harness.CAPIVersion, "--infrastructure", "goofy:"+harness.GoofyVersion)
	g.Expect(err).NotTo(HaveOccurred())

	providers := &unstructured.UnstructuredList{}
	providers.SetAPIVersion("clusterctl.cluster.x-k8s.io/v1alpha3")
	providers.SetKind("ProviderList")
	g.Expect(bare.Client.List(ctx, providers)).To(Succeed())
	var names []string
	for _, p := range providers.Items {
		names = append(names, p.GetName()+"@"+p.GetNamespace())
	}
	g.Expect(names).To(ContainElements("cluster-api@capi-system", "infrastructure-goofy@goofy-system"))
	g.Expect(names).To(HaveLen(4))

	crd := &apiextensionsv1.CustomResourceDefinition{}
	g.Expect(bare.Client.Get(ctx, client.ObjectKey{Name: "goofymachines.infrastructure.cluster.x-k8s.io"}, crd)).To(Succeed())
	g.Expect(crd.Labels).To(HaveKeyWithValue("cluster.x-k8s.io/v1beta2", "v1alpha1"))
	g.Expect(crd.Labels).To(HaveKeyWithValue("cluster.x-k8s.io/provider", "infrastructure-goofy"))
	g.Expect(bare.Client.Get(ctx, client.ObjectKey{Name: "kubeadmcontrolplanes.controlplane.cluster.x-k8s.io"}, crd)).To(Succeed())
	g.Expect(crd.Labels).To(HaveKeyWithValue("cluster.x-k8s.io/v1beta2", "v1beta2"))
	g.Expect(crd.Labels).To(HaveKeyWithValue("cluster.x-k8s.io/provider", "control-plane-kubeadm"))

	dep := &appsv1.Deployment{}
	g.Expect(bare.Client.Get(ctx, client.ObjectKey{Namespace: "goofy-system", Name: "goofy-controller-manager"}, dep)).To(Succeed())
	g.Expect(dep.Spec.Template.Spec.Containers).To(ContainElement(HaveField("Name", "manager")))
	g.Expect(dep.Spec.Template.Spec.Containers[0].Args).To(ContainElement(HavePrefix("--listener-port-range=")))

	roles := &unstructured.UnstructuredList{}
	roles.SetAPIVersion("rbac.authorization.k8s.io/v1")
	roles.SetKind("ClusterRoleList")
	g.Expect(bare.Client.List(ctx, roles, client.MatchingLabels{"cluster.x-k8s.io/provider": "infrastructure-goofy"})).To(Succeed())
	g.Expect(roles.Items).NotTo(BeEmpty(), "no Goofy ClusterRole installed")
}
