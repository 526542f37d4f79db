package e2e

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	infrav1 "github.com/goofy-capi/cluster-api-provider-goofy/api/v1alpha1"
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

// ccManifests renders the ClusterClass scenario's cluster with the real clusterctl: the topology
// flavor (ClusterClass goofy: a KubeadmControlPlane and a MachineDeployment of class
// default-worker) with the topology-machinepool flavor's machine pool (class default-worker-pool)
// added to its topology, so that one cluster runs both worker classes of the ClusterClass. workers
// is the replicas of each. Its VMs take ccVMStartupDuration (GOOFY_VM_STARTUP_DURATION, the
// ClusterClass variable vmStartupDuration), which the class's patches set on every machine template,
// the GoofyMachinePoolTemplate's included.
func ccManifests(ctx context.Context, repo *harness.ClusterctlRepository, namespace, name, cp, workers string) ([]byte, error) {
	env := []string{"GOOFY_VM_STARTUP_DURATION=" + ccVMStartupDuration.String()}
	topo, err := repo.Clusterctl(ctx, bins.Clusterctl(), env, clusterctlGenerateArgs(namespace, name, "topology", cp, workers)...)
	if err != nil {
		return nil, err
	}
	pool, err := repo.Clusterctl(ctx, bins.Clusterctl(), nil, clusterctlGenerateArgs(namespace, name, "topology-machinepool", cp, workers)...)
	if err != nil {
		return nil, err
	}
	_, poolCluster, err := findCluster(pool)
	if err != nil {
		return nil, err
	}
	pools, found, err := unstructured.NestedSlice(poolCluster.Object, "spec", "topology", "workers", "machinePools")
	if err != nil || !found || len(pools) == 0 {
		return nil, fmt.Errorf("the topology-machinepool flavor's Cluster has no spec.topology.workers.machinePools (%v)", err)
	}
	docs, cluster, err := findCluster(topo)
	if err != nil {
		return nil, err
	}
	if err := unstructured.SetNestedSlice(cluster.Object, pools, "spec", "topology", "workers", "machinePools"); err != nil {
		return nil, err
	}
	data, err := yaml.Marshal(cluster.Object)
	if err != nil {
		return nil, err
	}
	for i, doc := range docs {
		if doc == nil {
			docs[i] = data
			break
		}
	}
	return bytes.Join(docs, []byte("\n---\n")), nil
}

// ccVMStartupDuration is the cc cluster's vmStartupDuration: not the ClusterClass templates' 1s, so
// that TestClusterClass sees the class's patch reach the GoofyMachinePool.
const ccVMStartupDuration = 1500 * time.Millisecond

// findCluster splits rendered manifests into documents and returns them with the one Cluster
// taken out (its place is nil) and parsed.
func findCluster(manifests string) ([][]byte, *unstructured.Unstructured, error) {
	var docs [][]byte
	var cluster *unstructured.Unstructured
	for _, doc := range strings.Split(manifests, "\n---") {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			return nil, nil, err
		}
		if len(u.Object) > 0 && u.GetKind() == "Cluster" && cluster == nil {
			cluster = u
			docs = append(docs, nil)
			continue
		}
		docs = append(docs, []byte(doc))
	}
	if cluster == nil {
		return nil, nil, fmt.Errorf("no Cluster in the rendered manifests")
	}
	return docs, cluster, nil
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

// docOf returns the document of the manifests with that kind and name.
func docOf(g Gomega, manifests []byte, kind, name string) []byte {
	for _, doc := range strings.Split(string(manifests), "\n---") {
		u := &unstructured.Unstructured{}
		g.Expect(yaml.Unmarshal([]byte(doc), &u.Object)).To(Succeed())
		if len(u.Object) > 0 && u.GetKind() == kind && u.GetName() == name {
			return []byte(doc)
		}
	}
	g.Expect(fmt.Sprintf("%s %s", kind, name)).To(BeEmpty(), "not in the rendered manifests")
	return nil
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

	// The ClusterClass comes with both worker classes and their templates: default-worker (a
	// MachineDeployment's GoofyMachineTemplate) and default-worker-pool (a MachinePool's
	// GoofyMachinePoolTemplate, bootstrapped by a KubeadmConfigTemplate).
	classKinds := []string{"ClusterClass", "GoofyClusterTemplate", "KubeadmControlPlaneTemplate", "GoofyMachineTemplate",
		"GoofyMachineTemplate", "KubeadmConfigTemplate", "GoofyMachinePoolTemplate", "KubeadmConfigTemplate"}
	topo := generateClusterIn(ctx, t, g, generateNamespace, "gen", "topology", "1", "1")
	g.Expect(kindsOf(g, topo)).To(ConsistOf(append(classKinds, "Cluster")))
	class := &clusterv1.ClusterClass{}
	g.Expect(yaml.Unmarshal(docOf(g, topo, "ClusterClass", "goofy"), class)).To(Succeed())
	g.Expect(class.Spec.Workers.MachineDeployments).To(ConsistOf(HaveField("Class", "default-worker")))
	g.Expect(class.Spec.Workers.MachinePools).To(HaveLen(1))
	mpClass := class.Spec.Workers.MachinePools[0]
	g.Expect(mpClass.Class).To(Equal("default-worker-pool"))
	g.Expect(mpClass.Infrastructure.TemplateRef).To(And(HaveField("Kind", "GoofyMachinePoolTemplate"),
		HaveField("APIVersion", "infrastructure.cluster.x-k8s.io/v1alpha1")))
	g.Expect(mpClass.Bootstrap.TemplateRef).To(And(HaveField("Kind", "KubeadmConfigTemplate"),
		HaveField("APIVersion", "bootstrap.cluster.x-k8s.io/v1beta2")))
	// The referenced templates are in the output, and the pool template's schema is the
	// GoofyMachinePool's spec (what the topology controller clones into the pool).
	g.Expect(docOf(g, topo, "KubeadmConfigTemplate", mpClass.Bootstrap.TemplateRef.Name)).NotTo(BeEmpty())
	poolTemplate := &infrav1.GoofyMachinePoolTemplate{}
	g.Expect(yaml.UnmarshalStrict(docOf(g, topo, "GoofyMachinePoolTemplate", mpClass.Infrastructure.TemplateRef.Name), poolTemplate)).To(Succeed())
	g.Expect(poolTemplate.Spec.Template.Spec.Template.Spec.InMemory).NotTo(BeNil())
	g.Expect(poolTemplate.Spec.Template.Spec.Template.Spec.InMemory.Node.Provisioning.StartupDuration.Duration).To(Equal(time.Second))
	var topoCluster clusterv1.Cluster
	g.Expect(yaml.Unmarshal(docOf(g, topo, "Cluster", "gen"), &topoCluster)).To(Succeed())
	g.Expect(topoCluster.Spec.Topology.Workers.MachinePools).To(BeEmpty(), "the topology flavor's workers are a MachineDeployment only")

	// Flavor topology-machinepool: the same ClusterClass, the workers in one MachinePool of the
	// default-worker-pool class.
	topoPool := generateClusterIn(ctx, t, g, generateNamespace, "gen", "topology-machinepool", "1", "3")
	g.Expect(kindsOf(g, topoPool)).To(ConsistOf(append(classKinds, "Cluster")))
	var poolCluster clusterv1.Cluster
	g.Expect(yaml.Unmarshal(docOf(g, topoPool, "Cluster", "gen"), &poolCluster)).To(Succeed())
	g.Expect(poolCluster.Spec.Topology.ClassRef.Name).To(Equal("goofy"))
	g.Expect(poolCluster.Spec.Topology.Workers.MachineDeployments).To(BeEmpty())
	g.Expect(poolCluster.Spec.Topology.Workers.MachinePools).To(ConsistOf(And(HaveField("Class", "default-worker-pool"),
		HaveField("Name", "mp-0"), HaveField("Replicas", HaveValue(BeEquivalentTo(3))))))

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
