// Package capie2e runs Cluster API's own end-to-end specs (sigs.k8s.io/cluster-api/test/e2e, called
// as library functions) against Goofy. The management cluster is the harness's local plane (etcd,
// kube-apiserver, kube-controller-manager, CAPI core/CABPK/KCP and Goofy as processes), handed to
// the framework as an existing cluster: no kind cluster, no clusterctl init, no images.
//
// It lives in its own module so that the main module does not depend on Ginkgo, kind and moby.
// Run it with `make e2e-upstream` (E2E_FOCUS=<regexp> runs the matching specs only).
package capie2e

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
	"sigs.k8s.io/cluster-api/test/framework"
	"sigs.k8s.io/cluster-api/test/framework/clusterctl"
	ctrl "sigs.k8s.io/controller-runtime"

	infrav1 "github.com/goofy-capi/cluster-api-provider-goofy/api/v1alpha1"
	"github.com/goofy-capi/cluster-api-provider-goofy/test/e2e/harness"
)

// listenerPortRange is the capi-e2e plane's Goofy listener range: below the kernel's ephemeral
// range and used by nothing else in the repository (the lifecycle suite has 20000-32767, the
// scale benchmark 17000-19999).
const listenerPortRange = "1100-1999"

var (
	artifactFolder string
	skipCleanup    bool

	ctx = ctrl.SetupSignalHandler()

	plane                 *harness.Plane
	e2eConfig             *clusterctl.E2EConfig
	clusterctlConfigPath  string
	bootstrapClusterProxy framework.ClusterProxy
	repoRoot              string
)

func init() {
	flag.StringVar(&artifactFolder, "e2e.artifacts-folder", "", "folder for the plane's logs and the specs' artifacts (default: <repo>/out/capi-e2e/run-<timestamp>)")
	flag.BoolVar(&skipCleanup, "e2e.skip-resource-cleanup", false, "keep each spec's cluster and namespace")
}

func TestE2E(t *testing.T) {
	if testing.Short() {
		t.Skip("CAPI's e2e specs need the local management plane (-short given)")
	}
	ctrl.SetLogger(klog.Background())
	RegisterFailHandler(Fail)
	RunSpecs(t, "capi-e2e against Goofy")
}

var _ = BeforeSuite(func() {
	var err error
	repoRoot, err = filepath.Abs(filepath.Join("..", ".."))
	Expect(err).NotTo(HaveOccurred())
	if artifactFolder == "" {
		artifactFolder = filepath.Join(repoRoot, "out", "capi-e2e", "run-"+time.Now().Format("20060102-150405"))
	}
	Expect(os.MkdirAll(artifactFolder, 0o755)).To(Succeed())

	By("Building the plane's binaries (cached) and the Goofy manager")
	bctx, cancel := context.WithTimeout(ctx, 60*time.Minute)
	defer cancel()
	bins, err := harness.EnsureBinaries(bctx, repoRoot, GinkgoWriter)
	Expect(err).NotTo(HaveOccurred())

	By("Building the providers' components for the clusterctl repository")
	sources := filepath.Join(artifactFolder, "clusterctl-sources")
	_, err = harness.BuildClusterctlRepository(bctx, repoRoot, bins.CAPIModule, sources, GinkgoWriter)
	Expect(err).NotTo(HaveOccurred())

	generated := filepath.Join(artifactFolder, "flavors")
	Expect(writeGeneratedFlavors(repoRoot, generated)).To(Succeed())

	By("Loading the e2e config")
	e2eConfig = loadE2EConfig(map[string]string{"CLUSTERCTL_SOURCES": sources, "GENERATED_FLAVORS": generated})

	By("Creating the clusterctl local repository the specs read templates from")
	clusterctlConfigPath = clusterctl.CreateRepository(ctx, clusterctl.CreateRepositoryInput{
		E2EConfig:        e2eConfig,
		RepositoryFolder: filepath.Join(artifactFolder, "repository"),
	})

	By("Starting the management plane (the specs' existing bootstrap cluster)")
	// The alpha feature CAPI's e2e configuration enables and the rollout specs use.
	harness.EnableCAPIFeatureGates("MachineTaintPropagation")
	// The plane's own ports are free ports the kernel picked and released again: on a machine
	// shared with other test runs one can be taken before its manager binds it, so a failed start
	// is tried again (on a fresh output directory).
	for attempt := 1; ; attempt++ {
		plane, err = harness.Start(bctx, harness.Options{
			RepoRoot:          repoRoot,
			OutputDir:         filepath.Join(artifactFolder, fmt.Sprintf("plane-%d", attempt)),
			Binaries:          bins,
			Progress:          GinkgoWriter,
			ListenerPortRange: listenerPortRange,
		})
		if err == nil || attempt == 3 {
			break
		}
		fmt.Fprintf(GinkgoWriter, "starting the plane (attempt %d): %v\n", attempt, err)
	}
	Expect(err).NotTo(HaveOccurred())
	By("Recording the plane's providers as clusterctl init would")
	Expect(registerClusterctlInventory(ctx, plane.Kubeconfig, clusterctlConfigPath, plane.Client)).To(Succeed())
	bootstrapClusterProxy = framework.NewClusterProxy("bootstrap", plane.Kubeconfig, scheme(),
		framework.WithMachineLogCollector(goofyLogCollector{}))
})

var _ = AfterSuite(func() {
	if bootstrapClusterProxy != nil {
		bootstrapClusterProxy.Dispose(ctx)
	}
	if plane != nil {
		if CurrentSpecReport().Failed() {
			harness.DumpLogs(GinkgoWriter, plane.LogFiles(), 40)
		}
		plane.Stop()
	}
})

// loadE2EConfig writes data/e2e-config.yaml with the directories the suite made filled in next to
// the original (relative paths in it are relative to data/) and loads it with the framework.
func loadE2EConfig(dirs map[string]string) *clusterctl.E2EConfig {
	data, err := os.ReadFile(filepath.Join("data", "e2e-config.yaml"))
	Expect(err).NotTo(HaveOccurred())
	resolved := string(data)
	for name, dir := range dirs {
		resolved = strings.ReplaceAll(resolved, "${"+name+"}", dir)
	}
	dir, err := filepath.Abs("data")
	Expect(err).NotTo(HaveOccurred())
	f, err := os.CreateTemp(dir, ".e2e-config-*.yaml")
	Expect(err).NotTo(HaveOccurred())
	defer os.Remove(f.Name())
	_, err = f.WriteString(resolved)
	Expect(err).NotTo(HaveOccurred())
	Expect(f.Close()).To(Succeed())
	cfg := clusterctl.LoadE2EConfig(ctx, clusterctl.LoadE2EConfigInput{ConfigPath: f.Name()})
	Expect(cfg).NotTo(BeNil())
	return cfg
}

// scheme is the framework's default schemes plus Goofy's kinds.
func scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	framework.TryAddDefaultSchemes(s)
	Expect(infrav1.AddToScheme(s)).To(Succeed())
	return s
}
