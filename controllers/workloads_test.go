package controllers

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/goofy-capi/cluster-api-provider-goofy/api/v1alpha1"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/simulate"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// TestClusterWorkloadsSwitch: a GoofyCluster's spec.simulation.workloads reaches its cluster's
// simulator: Disabled, kubeadm's CoreDNS Deployment gets no pod; Enabled again, its pods run.
func TestClusterWorkloadsSwitch(t *testing.T) {
	requireEnv(t)
	g := NewWithT(t)
	ctx := context.Background()
	sim := simulate.New(simulate.Options{Workloads: true, PodStartDelay: 100 * time.Millisecond})
	h := newHarnessWith(t, store.NewManager(store.WithSimulator(sim)))
	h.clusterR.Simulator = sim
	f := newFixture(t, newNamespace(t), "switch", nil)
	h.provisionCluster(t, f)

	get(t, f.gc)
	f.gc.Spec.Simulation = &infrav1.ClusterSimulation{Workloads: &infrav1.WorkloadSimulation{Mode: infrav1.WorkloadsDisabled}}
	g.Expect(k8sClient.Update(ctx, f.gc)).To(Succeed())
	h.reconcileCluster(t, f.gc)
	_, gm := newMachine(t, f, "switch-cp-0", machineOpts{controlPlane: true})
	h.reconcileUntilReady(t, gm)

	cs := workloadClient(t, mustListener(t, h, f))
	coreDNSPods := func(g Gomega) int {
		list, err := cs.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-dns"})
		g.Expect(err).NotTo(HaveOccurred())
		return len(list.Items)
	}
	_, err := cs.AppsV1().Deployments("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred(), "kubeadm's CoreDNS is there")
	g.Consistently(coreDNSPods, time.Second, 100*time.Millisecond).Should(BeZero())

	get(t, f.gc)
	f.gc.Spec.Simulation.Workloads.Mode = infrav1.WorkloadsEnabled
	g.Expect(k8sClient.Update(ctx, f.gc)).To(Succeed())
	h.reconcileCluster(t, f.gc)
	g.Eventually(coreDNSPods, 20*time.Second, 100*time.Millisecond).Should(Equal(2), "CoreDNS's two replicas")
}
