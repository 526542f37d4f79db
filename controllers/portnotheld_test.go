package controllers

import (
	"context"
	"fmt"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/goofy-capi/cluster-api-provider-goofy/api/v1alpha1"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/mux"
)

// TestRestartKeepsPortFromThief (issue 27, endpoint port theft): a GoofyCluster whose
// spec.controlPlaneEndpoint.port is edited to another cluster's port (no webhook here to refuse
// it) does not get that port at the next restart, although HotRestart meets it first (its name
// sorts first): the victim keeps its port and serves, and the thief's conditions say why it is
// not served (PortNotHeld), also on the reconciles after the restart.
func TestRestartKeepsPortFromThief(t *testing.T) {
	requireEnv(t)
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	h := newDurableHarness(t, ns)
	thief := newFixture(t, ns, "pt-a-thief", nil) // listed, and so restored, before the victim
	victim := newFixture(t, ns, "pt-b-victim", nil)
	h.provisionCluster(t, thief)
	h.provisionCluster(t, victim)
	_, cp := newMachine(t, victim, "pt-b-victim-cp-0", machineOpts{controlPlane: true})
	h.reconcileUntilReady(t, cp)
	victimPort := int(victim.gc.Spec.ControlPlaneEndpoint.Port)
	thiefPort := int(thief.gc.Spec.ControlPlaneEndpoint.Port)
	g.Expect(victimPort).NotTo(Equal(thiefPort))
	serving := func() {
		t.Helper()
		l := mustListener(t, h.harness, victim)
		g.Expect(l.Port()).To(Equal(victimPort))
		_, err := workloadClient(t, l).CoreV1().Nodes().Get(ctx, "pt-b-victim-cp-0", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred(), "the victim must keep serving its own store on its port")
	}
	serving()

	// The thief's spec is edited to the victim's port, straight at the API server.
	orig := thief.gc.DeepCopy()
	thief.gc.Spec.ControlPlaneEndpoint.Port = int32(victimPort)
	g.Expect(k8sClient.Patch(ctx, thief.gc, client.MergeFrom(orig))).To(Succeed())
	// While the process runs, the claim fails: the thief listens on its own port.
	h.reconcileCluster(t, thief.gc)
	get(t, thief.gc)
	g.Expect(thief.gc.Status.Conditions).To(haveCondition(infrav1.LoadBalancerReadyCondition, metav1.ConditionFalse, infrav1.PortNotHeldReason))
	serving()

	h.restart(t)
	thiefKey := mux.ClusterKey(ns, "pt-a-thief")
	_, ok := h.mux.Listener(thiefKey)
	g.Expect(ok).To(BeFalse(), "the thief must get no listener at the restart")
	g.Expect(ownerOf(h.mux, mux.ClusterKey(ns, "pt-b-victim"))).To(Equal(victim.gc.UID))
	h.reconcileCluster(t, victim.gc)
	h.reconcileMachine(t, cp) // re-adds the API server
	serving()

	for range 2 { // the refusal holds on the reconciles after the restart
		h.reconcileCluster(t, thief.gc)
		get(t, thief.gc)
		for _, c := range []string{infrav1.ReadyCondition, infrav1.LoadBalancerReadyCondition} {
			g.Expect(thief.gc.Status.Conditions).To(haveCondition(c, metav1.ConditionFalse, infrav1.PortNotHeldReason), c)
		}
		g.Expect(thief.gc.Status.Conditions).To(ContainElement(HaveField("Message",
			ContainSubstring(fmt.Sprintf("held port %d, not %d", thiefPort, victimPort)))))
		_, ok = h.mux.Listener(thiefKey)
		g.Expect(ok).To(BeFalse())
		serving()
	}

	// Set back to its own port, the thief is served again.
	orig = thief.gc.DeepCopy()
	thief.gc.Spec.ControlPlaneEndpoint.Port = int32(thiefPort)
	g.Expect(k8sClient.Patch(ctx, thief.gc, client.MergeFrom(orig))).To(Succeed())
	h.reconcileCluster(t, thief.gc)
	get(t, thief.gc)
	g.Expect(thief.gc.Status.Conditions).To(haveCondition(infrav1.ReadyCondition, metav1.ConditionTrue, infrav1.ReadyReason))
	l, ok := h.mux.Listener(thiefKey)
	g.Expect(ok).To(BeTrue())
	g.Expect(l.Port()).To(Equal(thiefPort))
	serving()
}
