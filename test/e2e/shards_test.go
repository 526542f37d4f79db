package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/goofy-capi/cluster-api-provider-goofy/test/e2e/harness"
)

// TestShards runs two Goofy managers with their own --watch-filter values and port ranges, as
// docs/scaling.md describes: each cluster, labelled for one shard, is served by that shard's
// manager only; killing one manager leaves the other's cluster Available; the killed manager,
// started again, brings its cluster back.
func TestShards(t *testing.T) {
	ctx, g := begin(t, 14*time.Minute)
	g.Expect(plane.EnsureNamespace(ctx, stressNamespace)).To(Succeed())
	first, err := freeConsecutivePorts(4, stressPorts)
	g.Expect(err).NotTo(HaveOccurred())
	shards := []struct {
		name, filter, ports string
		lo, hi              int
	}{
		{"goofy-shard-a", "shard-a", fmt.Sprintf("%d-%d", first, first+1), first, first + 1},
		{"goofy-shard-b", "shard-b", fmt.Sprintf("%d-%d", first+2, first+3), first + 2, first + 3},
	}
	start := func(i int) *harness.Process {
		mgr, err := plane.StartGoofyManager(ctx, harness.GoofyManagerSpec{
			Name: shards[i].name, ListenerPortRange: shards[i].ports,
			Args: []string{"--namespace=" + stressNamespace, "--watch-filter=" + shards[i].filter},
		})
		g.Expect(err).NotTo(HaveOccurred())
		return mgr
	}
	managers := []*harness.Process{start(0), start(1)}
	t.Cleanup(func() {
		if err := deleteStressClusters(context.Background()); err != nil {
			t.Logf("cleaning up the shard clusters: %v", err)
		}
		for _, m := range managers {
			m.Stop(10 * time.Second)
		}
	})

	template, err := os.ReadFile(filepath.Join(repoRoot, "templates", "cluster-template.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	names := []string{"sharded-a", "sharded-b"}
	manifests := make([][]byte, 2)
	for i := range names {
		rendered, err := harness.RenderTemplate(template, map[string]string{
			"CLUSTER_NAME": names[i], "NAMESPACE": stressNamespace, "CONTROL_PLANE_MACHINE_COUNT": "1", "WORKER_MACHINE_COUNT": "1",
			"GOOFY_VM_STARTUP_DURATION": stressPhase, "GOOFY_NODE_STARTUP_DURATION": stressPhase,
			"GOOFY_ETCD_STARTUP_DURATION": stressPhase, "GOOFY_APISERVER_STARTUP_DURATION": stressPhase,
		})
		g.Expect(err).NotTo(HaveOccurred())
		manifests[i], err = harness.WithWatchFilter(rendered, shards[i].filter)
		g.Expect(err).NotTo(HaveOccurred())
	}
	begun := time.Now()
	applyAll(ctx, g, manifests, names)
	waitStressAvailable(ctx, t, g, names, begun)
	t.Logf("both sharded clusters Available %.1fs after the apply", time.Since(begun).Seconds())

	// Each cluster's endpoint is on its shard's ports: its manager, and only it, serves it.
	for i, name := range names {
		c := &clusterv1.Cluster{}
		g.Expect(plane.Client.Get(ctx, client.ObjectKey{Namespace: stressNamespace, Name: name}, c)).To(Succeed())
		port := int(c.Spec.ControlPlaneEndpoint.Port)
		g.Expect(port).To(BeNumerically(">=", shards[i].lo), name)
		g.Expect(port).To(BeNumerically("<=", shards[i].hi), name)
		other, err := os.ReadFile(managers[1-i].LogFile)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(string(other)).NotTo(ContainSubstring(name), "the other shard's manager logged %s", name)
	}

	// Kill shard a's manager: shard b's cluster stays Available and reachable.
	managers[0].Kill()
	g.Consistently(func() bool {
		c := &clusterv1.Cluster{}
		g.Expect(plane.Client.Get(ctx, client.ObjectKey{Namespace: stressNamespace, Name: names[1]}, c)).To(Succeed())
		return meta.IsStatusConditionTrue(c.Status.Conditions, clusterv1.AvailableCondition)
	}, 40*time.Second, 2*time.Second).Should(BeTrue(), "shard b's cluster while shard a's manager is down")
	g.Expect(dial(clusterEndpoint(ctx, g, names[1]))).To(Succeed())
	g.Expect(dial(clusterEndpoint(ctx, g, names[0]))).NotTo(Succeed(), "shard a's endpoint went with its manager")

	// Started again (same state directory), shard a's manager serves its cluster again.
	managers[0] = start(0)
	g.Eventually(func() error { return dial(clusterEndpoint(ctx, g, names[0])) }, 2*time.Minute, 2*time.Second).Should(Succeed())
}

func clusterEndpoint(ctx context.Context, g Gomega, name string) clusterv1.APIEndpoint {
	c := &clusterv1.Cluster{}
	g.Expect(plane.Client.Get(ctx, client.ObjectKey{Namespace: stressNamespace, Name: name}, c)).To(Succeed())
	return c.Spec.ControlPlaneEndpoint
}
