package v1alpha1_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/testenv"
)

// These tests install the generated CRDs into a real kube-apiserver (envtest) with the real kubectl
// binary, then prove that the schema (OpenAPI + CEL) rejects every invalid shape with its field named.

var (
	cfg        *rest.Config
	kubeconfig string
	installErr error
	installed  sync.Once
)

func TestMain(m *testing.M) {
	if !testenv.HaveAPIServer() {
		fmt.Fprintf(os.Stderr, "SKIP envtest tests: kube-apiserver/etcd not found in %s (run 'make envtest')\n", testenv.AssetsDir())
		os.Exit(m.Run())
	}
	env := &envtest.Environment{BinaryAssetsDirectory: testenv.AssetsDir()}
	var err error
	cfg, err = env.Start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "starting envtest: %v\n", err)
		os.Exit(1)
	}
	user, err := env.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, nil)
	if err == nil {
		var data []byte
		data, err = user.KubeConfig()
		if err == nil {
			kubeconfig = filepath.Join(os.TempDir(), fmt.Sprintf("goofy-api-test-%d.kubeconfig", os.Getpid()))
			err = os.WriteFile(kubeconfig, data, 0o600)
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "kubeconfig for kubectl: %v\n", err)
		_ = env.Stop()
		os.Exit(1)
	}
	code := m.Run()
	_ = os.Remove(kubeconfig)
	if err := env.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "stopping envtest: %v\n", err)
	}
	os.Exit(code)
}

func requireEnv(t *testing.T) client.Client {
	t.Helper()
	if cfg == nil {
		t.Skipf("envtest binaries not built (run 'make envtest'); looked in %s", testenv.AssetsDir())
	}
	installed.Do(func() { installErr = installCRDsWithKubectl() })
	if installErr != nil {
		t.Fatalf("installing CRDs with kubectl: %v", installErr)
	}
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func kubectl(args ...string) (string, error) {
	bin, ok := testenv.Binary("kubectl")
	if !ok {
		return "", fmt.Errorf("kubectl not found at %s", bin)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"--kubeconfig", kubeconfig}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func installCRDsWithKubectl() error {
	root := testenv.RepoRoot()
	if out, err := kubectl("apply", "-f", filepath.Join(root, "config", "crd", "bases")); err != nil {
		return fmt.Errorf("%v: %s", err, out)
	}
	if out, err := kubectl("wait", "--for=condition=Established", "--timeout=30s", "crd", "--all"); err != nil {
		return fmt.Errorf("%v: %s", err, out)
	}
	return nil
}

func TestKubectlAppliesCRDsAndSamples(t *testing.T) {
	requireEnv(t)
	g := NewWithT(t)
	root := testenv.RepoRoot()
	out, err := kubectl("apply", "-f", filepath.Join(root, "config", "samples"))
	g.Expect(err).NotTo(HaveOccurred(), out)
	for _, want := range []string{"goofycluster.infrastructure.cluster.x-k8s.io/sample created", "goofymachine.infrastructure.cluster.x-k8s.io/sample-cp-0 created",
		"goofymachinetemplate.infrastructure.cluster.x-k8s.io/sample-md-0 created", "goofyclustertemplate.infrastructure.cluster.x-k8s.io/sample-class created",
		"goofyazureclusteridentity.infrastructure.cluster.x-k8s.io/sample created",
		"goofymachinepool.infrastructure.cluster.x-k8s.io/sample-mp-0 created", "goofymachinepooltemplate.infrastructure.cluster.x-k8s.io/sample-mp-class created"} {
		g.Expect(out).To(ContainSubstring(want))
	}

	// The defaulted backend shows up, and the printer columns are served.
	out, err = kubectl("get", "goofyclusters", "sample", "-o", "jsonpath={.spec.backend}")
	g.Expect(err).NotTo(HaveOccurred(), out)
	g.Expect(out).To(Equal(`{"inMemory":{}}`))

	out, err = kubectl("get", "goofyclusters")
	g.Expect(err).NotTo(HaveOccurred(), out)
	g.Expect(strings.Fields(strings.SplitN(out, "\n", 2)[0])).To(Equal([]string{"NAME", "CLUSTER", "HOST", "PORT", "PROVISIONED", "READY", "AGE"}))

	out, err = kubectl("get", "gfmp")
	g.Expect(err).NotTo(HaveOccurred(), out)
	g.Expect(strings.Fields(strings.SplitN(out, "\n", 2)[0])).To(Equal([]string{"NAME", "CLUSTER", "MACHINEPOOL", "REPLICAS", "READY", "UP-TO-DATE", "PROVISIONED", "AGE"}))

	out, err = kubectl("get", "gfm")
	g.Expect(err).NotTo(HaveOccurred(), out)
	g.Expect(strings.Fields(strings.SplitN(out, "\n", 2)[0])).To(Equal([]string{"NAME", "CLUSTER", "MACHINE", "PROVIDERID", "PROVISIONED", "READY", "AGE"}))

	// The cluster-api category lists every kind.
	out, err = kubectl("get", "cluster-api", "-o", "name")
	g.Expect(err).NotTo(HaveOccurred(), out)
	for _, want := range []string{"goofycluster.infrastructure.cluster.x-k8s.io/sample", "goofymachine.infrastructure.cluster.x-k8s.io/sample-cp-0",
		"goofymachinetemplate.infrastructure.cluster.x-k8s.io/sample-md-0", "goofyclustertemplate.infrastructure.cluster.x-k8s.io/sample-class",
		"goofymachinepool.infrastructure.cluster.x-k8s.io/sample-mp-0", "goofymachinepooltemplate.infrastructure.cluster.x-k8s.io/sample-mp-class"} {
		g.Expect(out).To(ContainSubstring(want))
	}

	// Every CRD carries the CAPI contract label once built with kustomize; the bases are checked in TestContractLabel.
	out, err = kubectl("delete", "-f", filepath.Join(root, "config", "samples"), "--wait=true")
	g.Expect(err).NotTo(HaveOccurred(), out)
}

func TestSchemaRejectsInvalidObjects(t *testing.T) {
	c := requireEnv(t)
	ctx := context.Background()

	cases := []struct {
		name      string
		obj       string
		wantField string // the field path the API server must name
		wantText  string
	}{
		{"cluster both backends", `kind: GoofyCluster
spec: {backend: {inMemory: {}, azure: {subscriptionID: 00000000-0000-0000-0000-000000000001, resourceGroup: rg, clusterUID: u}}}`,
			"spec.backend", "set exactly one of inMemory or azure"},
		{"azure subscription not a UUID", `kind: GoofyCluster
spec: {backend: {azure: {subscriptionID: not-a-uuid, resourceGroup: rg, clusterUID: u}}}`,
			"spec.backend.azure.subscriptionID", "should match"},
		{"azure subscription missing", `kind: GoofyCluster
spec: {backend: {azure: {resourceGroup: rg, clusterUID: u}}}`,
			"spec.backend.azure.subscriptionID", "Required value"},
		{"azure resource group ends with a period", `kind: GoofyCluster
spec: {backend: {azure: {subscriptionID: 00000000-0000-0000-0000-000000000001, resourceGroup: "rg.", clusterUID: u}}}`,
			"spec.backend.azure.resourceGroup", "should match"},
		{"azure resource group too long", `kind: GoofyCluster
spec: {backend: {azure: {subscriptionID: 00000000-0000-0000-0000-000000000001, resourceGroup: "` + strings.Repeat("r", 91) + `", clusterUID: u}}}`,
			"spec.backend.azure.resourceGroup", "Too long"},
		{"azure empty cluster UID", `kind: GoofyCluster
spec: {backend: {azure: {subscriptionID: 00000000-0000-0000-0000-000000000001, resourceGroup: rg, clusterUID: ""}}}`,
			"spec.backend.azure.clusterUID", "at least 1"},
		{"azure unknown cloud", `kind: GoofyCluster
spec: {backend: {azure: {subscriptionID: 00000000-0000-0000-0000-000000000001, resourceGroup: rg, clusterUID: u, cloud: {name: Mars}}}}`,
			"spec.backend.azure.cloud.name", "Unsupported value"},
		{"azure custom cloud without endpoint", `kind: GoofyCluster
spec: {backend: {azure: {subscriptionID: 00000000-0000-0000-0000-000000000001, resourceGroup: rg, clusterUID: u, cloud: {name: Custom}}}}`,
			"spec.backend.azure.cloud", "name Custom requires resourceManagerEndpoint"},
		{"azure endpoint not a URL", `kind: GoofyCluster
spec: {backend: {azure: {subscriptionID: 00000000-0000-0000-0000-000000000001, resourceGroup: rg, clusterUID: u, cloud: {name: Custom, resourceManagerEndpoint: "ftp://x", resourceManagerAudience: a, activeDirectoryAuthorityHost: "https://l"}}}}`,
			"spec.backend.azure.cloud.resourceManagerEndpoint", "should match"},
		{"azure identity and cloud", `kind: GoofyCluster
spec: {backend: {azure: {subscriptionID: 00000000-0000-0000-0000-000000000001, resourceGroup: rg, clusterUID: u, identityRef: {name: i}, cloud: {name: AzureChinaCloud}}}}`,
			"spec.backend.azure", "the cloud comes from the identity when identityRef is set"},
		{"azure identity without name", `kind: GoofyCluster
spec: {backend: {azure: {subscriptionID: 00000000-0000-0000-0000-000000000001, resourceGroup: rg, clusterUID: u, identityRef: {name: ""}}}}`,
			"spec.backend.azure.identityRef.name", "at least 1"},
		{"failure domain without name", `kind: GoofyCluster
spec: {failureDomains: [{controlPlane: true}]}`,
			"spec.failureDomains[0].name", "Required value"},
		{"duplicate failure domain", `kind: GoofyCluster
spec: {failureDomains: [{name: a}, {name: a}]}`,
			"spec.failureDomains[1]", "Duplicate value"},
		{"machine both backends", `kind: GoofyMachine
spec: {backend: {inMemory: {}, azure: {}}}`,
			"spec.backend", "set exactly one of inMemory or azure"},
		{"machine negative duration", `kind: GoofyMachine
spec: {backend: {inMemory: {vm: {provisioning: {startupDuration: "-1s"}}}}}`,
			"spec.backend.inMemory.vm.provisioning.startupDuration", "startupDuration must be a duration >= 0"},
		{"machine jitter above one", `kind: GoofyMachine
spec: {backend: {inMemory: {etcd: {provisioning: {startupJitter: "1.5"}}}}}`,
			"spec.backend.inMemory.etcd.provisioning.startupJitter", "should match"},
		{"machine jitter not a number", `kind: GoofyMachine
spec: {backend: {inMemory: {node: {provisioning: {startupJitter: "abc"}}}}}`,
			"spec.backend.inMemory.node.provisioning.startupJitter", "should match"},
		{"machine empty provider ID", `kind: GoofyMachine
spec: {providerID: ""}`,
			"spec.providerID", "at least 1"},
		{"machine template bad jitter", `kind: GoofyMachineTemplate
spec: {template: {spec: {backend: {inMemory: {apiServer: {provisioning: {startupJitter: "2"}}}}}}}`,
			"spec.template.spec.backend.inMemory.apiServer.provisioning.startupJitter", "should match"},
		{"machine capacity not a quantity", `kind: GoofyMachine
spec: {capacity: {cpu: lots}}`,
			"spec.capacity.cpu", "should match"},
		{"machine template capacity not a quantity", `kind: GoofyMachineTemplate
spec: {template: {spec: {capacity: {memory: "8 GiB"}}}}`,
			"spec.template.spec.capacity.memory", "should match"},
		{"machine template without template", `kind: GoofyMachineTemplate
spec: {}`,
			"spec.template", "Required value"},
		{"fault error code not offered", `kind: GoofyCluster
spec: {simulation: {apiServer: {errors: [{code: 418, ratio: "0.1"}]}}}`,
			"spec.simulation.apiServer.errors[0].code", "Unsupported value"},
		{"fault ratio above one", `kind: GoofyCluster
spec: {simulation: {apiServer: {errors: [{code: 503, ratio: "1.5"}]}}}`,
			"spec.simulation.apiServer.errors[0].ratio", "should match"},
		{"fault without ratio", `kind: GoofyCluster
spec: {simulation: {apiServer: {errors: [{code: 503}]}}}`,
			"spec.simulation.apiServer.errors[0].ratio", "Required value"},
		{"fault unknown verb", `kind: GoofyCluster
spec: {simulation: {apiServer: {errors: [{code: 500, ratio: "1", verbs: [frobnicate]}]}}}`,
			"spec.simulation.apiServer.errors[0].verbs[0]", "Unsupported value"},
		{"fault negative latency", `kind: GoofyCluster
spec: {simulation: {apiServer: {latency: {base: "-1s"}}}}`,
			"spec.simulation.apiServer.latency.base", "base must be a duration between 0s and 60s"},
		{"fault latency jitter above one", `kind: GoofyCluster
spec: {simulation: {etcd: {latency: {base: 10ms, jitter: "3"}}}}`,
			"spec.simulation.etcd.latency.jitter", "should match"},
		{"fault unknown etcd alarm", `kind: GoofyCluster
spec: {simulation: {etcd: {alarm: NOSPAC}}}`,
			"spec.simulation.etcd.alarm", "Unsupported value"},
		{"fault until not a time", `kind: GoofyCluster
spec: {simulation: {unreachable: true, unreachableUntil: tomorrow}}`,
			"spec.simulation.unreachableUntil", "must be of type date-time"},
		{"machine template fault until not a time", `kind: GoofyMachineTemplate
spec: {template: {spec: {simulation: {vmFailed: true, vmFailedUntil: soon}}}}`,
			"spec.template.spec.simulation.vmFailedUntil", "date-time"},
		{"workloads unknown mode", `kind: GoofyCluster
spec: {simulation: {workloads: {mode: Off}}}`,
			"spec.simulation.workloads.mode", "Unsupported value"},
		{"workloads zero pod start delay", `kind: GoofyCluster
spec: {simulation: {workloads: {podStartDelay: 0s}}}`,
			"spec.simulation.workloads.podStartDelay", "podStartDelay must be a duration above 0s and at most 1h"},
		{"workloads job run time above a day", `kind: GoofyCluster
spec: {simulation: {workloads: {jobRunTime: 25h}}}`,
			"spec.simulation.workloads.jobRunTime", "jobRunTime must be a duration above 0s and at most 24h"},
		{"machine pool unknown delete policy", `kind: GoofyMachinePool
spec: {deletePolicy: Random}`,
			"spec.deletePolicy", "Unsupported value"},
		{"machine pool empty provider ID in list", `kind: GoofyMachinePool
spec: {providerIDList: [""]}`,
			"spec.providerIDList[0]", "at least 1"},
		{"machine pool instance capacity not a quantity", `kind: GoofyMachinePool
spec: {template: {spec: {capacity: {cpu: lots}}}}`,
			"spec.template.spec.capacity.cpu", "should match"},
		{"machine pool template without template", `kind: GoofyMachinePoolTemplate
spec: {}`,
			"spec.template", "Required value"},
		{"machine pool template bad jitter", `kind: GoofyMachinePoolTemplate
spec: {template: {spec: {template: {spec: {inMemory: {vm: {provisioning: {startupJitter: "2"}}}}}}}}`,
			"spec.template.spec.template.spec.inMemory.vm.provisioning.startupJitter", "should match"},
		{"cluster template both backends", `kind: GoofyClusterTemplate
spec: {template: {spec: {backend: {inMemory: {}, azure: {subscriptionID: 00000000-0000-0000-0000-000000000001, resourceGroup: rg, clusterUID: u}}}}}`,
			"spec.template.spec.backend", "set exactly one of inMemory or azure"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			obj := parse(t, tc.obj, fmt.Sprintf("invalid-%d", i))
			err := c.Create(ctx, obj)
			g.Expect(err).To(HaveOccurred(), "the API server accepted an invalid object")
			g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want 422 Invalid, got %v", err)
			g.Expect(err.Error()).To(ContainSubstring(tc.wantField))
			g.Expect(err.Error()).To(ContainSubstring(tc.wantText))
		})
	}
}

func TestProviderIDIsImmutableOnceSet(t *testing.T) {
	c := requireEnv(t)
	g := NewWithT(t)
	ctx := context.Background()

	obj := parse(t, "kind: GoofyMachine\nspec: {}", "immutable")
	g.Expect(c.Create(ctx, obj)).To(Succeed())
	defer func() { _ = c.Delete(ctx, obj) }()

	// Setting it the first time is allowed.
	g.Expect(c.Patch(ctx, obj, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"providerID":"goofy://default/c/m"}}`)))).To(Succeed())
	// Changing it is not.
	err := c.Patch(ctx, obj, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"providerID":"goofy://default/c/other"}}`)))
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
	g.Expect(err.Error()).To(ContainSubstring("spec.providerID"))
	g.Expect(err.Error()).To(ContainSubstring("providerID is immutable once set"))
	// Nor is removing it.
	err = c.Patch(ctx, obj, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"providerID":null}}`)))
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
}

// TestPoolReplicasAreNeverNegative: a GoofyMachinePool's status cannot report a negative number of
// instances (CAPI copies status.replicas into the MachinePool's).
func TestPoolReplicasAreNeverNegative(t *testing.T) {
	c := requireEnv(t)
	g := NewWithT(t)
	ctx := context.Background()

	obj := parse(t, "kind: GoofyMachinePool\nspec: {}", "negative-replicas")
	g.Expect(c.Create(ctx, obj)).To(Succeed())
	defer func() { _ = c.Delete(ctx, obj) }()

	g.Expect(c.Status().Patch(ctx, obj, client.RawPatch(types.MergePatchType, []byte(`{"status":{"replicas":3,"readyReplicas":0}}`)))).To(Succeed())
	for _, field := range []string{"replicas", "readyReplicas"} {
		err := c.Status().Patch(ctx, obj, client.RawPatch(types.MergePatchType, []byte(`{"status":{"`+field+`":-1}}`)))
		g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%s: %v", field, err)
		g.Expect(err.Error()).To(ContainSubstring("status." + field))
		g.Expect(err.Error()).To(ContainSubstring("greater than or equal to 0"))
	}
}

// TestContractLabel checks that the kustomize build of config/crd carries the CAPI contract label
// and that it agrees with metadata.yaml.
func TestContractLabel(t *testing.T) {
	g := NewWithT(t)
	root := testenv.RepoRoot()
	data, err := os.ReadFile(filepath.Join(root, "config", "crd", "kustomization.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	var k struct {
		Labels []struct {
			Pairs map[string]string `json:"pairs"`
		} `json:"labels"`
		Resources []string `json:"resources"`
	}
	g.Expect(yaml.Unmarshal(data, &k)).To(Succeed())
	g.Expect(k.Labels).NotTo(BeEmpty())
	g.Expect(k.Labels[0].Pairs).To(HaveKeyWithValue("cluster.x-k8s.io/v1beta2", "v1alpha1"))
	bases, err := filepath.Glob(filepath.Join(root, "config", "crd", "bases", "*.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(bases).To(HaveLen(7))
	for _, b := range bases {
		g.Expect(k.Resources).To(ContainElement("bases/" + filepath.Base(b)))
	}

	meta, err := os.ReadFile(filepath.Join(root, "metadata.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	var m struct {
		APIVersion    string `json:"apiVersion"`
		Kind          string `json:"kind"`
		ReleaseSeries []struct {
			Contract string `json:"contract"`
		} `json:"releaseSeries"`
	}
	g.Expect(yaml.Unmarshal(meta, &m)).To(Succeed())
	g.Expect(m.APIVersion).To(Equal("clusterctl.cluster.x-k8s.io/v1alpha3"))
	g.Expect(m.Kind).To(Equal("Metadata"))
	g.Expect(m.ReleaseSeries).NotTo(BeEmpty())
	for _, rs := range m.ReleaseSeries {
		g.Expect(rs.Contract).To(Equal("v1beta2"))
	}
}

func parse(t *testing.T, doc, name string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
		t.Fatalf("bad test YAML: %v", err)
	}
	u.SetAPIVersion("infrastructure.cluster.x-k8s.io/v1alpha1")
	u.SetName(name)
	u.SetNamespace("default")
	return u
}
