package v1alpha1

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	infrav1 "github.com/goofy-capi/cluster-api-provider-goofy/api/v1alpha1"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/mux"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/testenv"
)

// Listener ports of this package's tests: apart from the other packages' ranges and from `make
// bench`'s and `make soak`'s (17000-19999, which may run beside the tests), below the
// ephemeral range. Nothing listens on them: the mux only reserves and records.
const testPortMin, testPortMax = 16900, 16909

// TestGoofyClusterWebhook: with the webhook registered in a real API server (envtest's
// WebhookInstallOptions over config/webhook, the manifests `make manifests` generates), a
// GoofyCluster whose endpoint port is outside the manager's --listener-port-range, or is another
// workload cluster's, is refused with 422 Invalid on spec.controlPlaneEndpoint.port; a free port
// in the range is allowed, and so are the manager's own write of a reserved port and updates that
// leave the port alone.
func TestGoofyClusterWebhook(t *testing.T) {
	if !testenv.HaveAPIServer() {
		t.Skipf("envtest binaries not built (run 'make envtest'); looked in %s", testenv.AssetsDir())
	}
	g := NewWithT(t)
	ctx := context.Background()
	log.SetLogger(logr.Discard())
	env, err := testenv.Environment()
	g.Expect(err).NotTo(HaveOccurred())
	env.WebhookInstallOptions = envtest.WebhookInstallOptions{
		Paths: []string{filepath.Join(testenv.RepoRoot(), "config", "webhook", "manifests.yaml")},
	}
	cfg, err := env.Start()
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = env.Stop() })

	scheme := runtime.NewScheme()
	g.Expect(clientgoscheme.AddToScheme(scheme)).To(Succeed())
	g.Expect(clusterv1.AddToScheme(scheme)).To(Succeed())
	g.Expect(infrav1.AddToScheme(scheme)).To(Succeed())
	wo := env.WebhookInstallOptions
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:     scheme,
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
		WebhookServer: webhook.NewServer(webhook.Options{
			Host: wo.LocalServingHost, Port: wo.LocalServingPort, CertDir: wo.LocalServingCertDir,
		}),
	})
	g.Expect(err).NotTo(HaveOccurred())
	m, err := mux.NewWorkloadClustersMux(store.NewManager(), "127.0.0.1", mux.WithPortRange(testPortMin, testPortMax))
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = m.Shutdown(context.Background()) })
	g.Expect((&GoofyCluster{Client: mgr.GetClient(), Ports: m}).SetupWebhookWithManager(mgr)).To(Succeed())
	testenv.Go(t, mgr.Start)
	// The webhook server answers once it serves TLS on its port (no sleep: a bounded dial loop).
	addr := net.JoinHostPort(wo.LocalServingHost, strconv.Itoa(wo.LocalServingPort))
	g.Eventually(func() error {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err
	}, 30*time.Second, 50*time.Millisecond).Should(Succeed())
	g.Expect(mgr.GetCache().WaitForCacheSync(ctx)).To(BeTrue())

	// A real client-go client of the API server, as a user's kubectl.
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	g.Expect(err).NotTo(HaveOccurred())
	ns := "webhook-" + strconv.Itoa(os.Getpid())
	g.Expect(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	gc := func(name string, port int) *infrav1.GoofyCluster {
		return &infrav1.GoofyCluster{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{clusterv1.ClusterNameLabel: name}},
			Spec:       infrav1.GoofyClusterSpec{ControlPlaneEndpoint: clusterv1.APIEndpoint{Host: "127.0.0.1", Port: int32(port)}},
		}
	}
	refused := func(err error, want string) {
		t.Helper()
		g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want 422 Invalid, got %v", err)
		status := err.(apierrors.APIStatus).Status()
		g.Expect(status.Code).To(BeEquivalentTo(422))
		g.Expect(status.Details).NotTo(BeNil())
		g.Expect(status.Details.Causes).To(ContainElement(HaveField("Field", "spec.controlPlaneEndpoint.port")))
		g.Expect(err.Error()).To(ContainSubstring(want))
	}

	// Outside the range.
	refused(c.Create(ctx, gc("outside", testPortMax+1)), fmt.Sprintf("listener port range %d-%d", testPortMin, testPortMax))
	refused(c.Create(ctx, gc("privileged", 443)), "listener port range")

	// In the range and free: allowed; its port is recorded, so another cluster cannot have it.
	owner := gc("owner", testPortMin+1)
	g.Expect(c.Create(ctx, owner)).To(Succeed())
	// The cached client of the webhook sees the owner once its watch event arrived (bounded).
	g.Eventually(func() error {
		return mgr.GetClient().Get(ctx, client.ObjectKeyFromObject(owner), &infrav1.GoofyCluster{})
	}, 30*time.Second, 50*time.Millisecond).Should(Succeed())
	refused(c.Create(ctx, gc("thief", testPortMin+1)), "another workload cluster")

	// Another cluster's port held by the mux (a listener), even with no GoofyCluster recording it.
	held, err := m.ClaimWorkloadClusterListener(mux.ClusterKey("elsewhere", "held"), testPortMin+2, "uid-held")
	g.Expect(err).NotTo(HaveOccurred())
	refused(c.Create(ctx, gc("thief-2", held.Port())), "held by another workload cluster")

	// A copy of the owner's GoofyCluster (same workload cluster) may record the same endpoint.
	cp := gc("owner-copy", testPortMin+1)
	cp.Labels[clusterv1.ClusterNameLabel] = "owner"
	g.Expect(c.Create(ctx, cp)).To(Succeed())

	// Moving an existing GoofyCluster onto another cluster's port is refused too; an update that
	// leaves the port alone passes.
	victimless := gc("mover", testPortMin+3)
	g.Expect(c.Create(ctx, victimless)).To(Succeed())
	orig := victimless.DeepCopy()
	victimless.Spec.ControlPlaneEndpoint.Port = int32(held.Port())
	refused(c.Patch(ctx, victimless, client.MergeFrom(orig)), "held by another workload cluster")
	victimless = orig.DeepCopy()
	victimless.Labels["unrelated"] = "change"
	g.Expect(c.Patch(ctx, victimless, client.MergeFrom(orig))).To(Succeed())

	// The manager's own write: a GoofyCluster without an endpoint gets the port the mux reserved
	// for it, in one patch with its finalizer, as persistFinalizerAndEndpoint does.
	fresh := gc("fresh", 0)
	fresh.Spec.ControlPlaneEndpoint = clusterv1.APIEndpoint{}
	g.Expect(c.Create(ctx, fresh)).To(Succeed())
	port, err := m.ReserveWorkloadClusterPort(mux.ClusterKey(ns, "fresh"), fresh.UID)
	g.Expect(err).NotTo(HaveOccurred())
	orig = fresh.DeepCopy()
	fresh.Finalizers = []string{infrav1.ClusterFinalizer}
	fresh.Spec.ControlPlaneEndpoint = clusterv1.APIEndpoint{Host: m.Host(), Port: int32(port)}
	g.Expect(c.Patch(ctx, fresh, client.MergeFrom(orig))).To(Succeed())
	// Another GoofyCluster asking for that reserved port is refused.
	refused(c.Create(ctx, gc("thief-3", port)), "held by another workload cluster")
	orig = fresh.DeepCopy()
	fresh.Finalizers = nil
	g.Expect(c.Patch(ctx, fresh, client.MergeFrom(orig))).To(Succeed())
}
