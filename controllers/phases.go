package controllers

import (
	"context"
	"fmt"
	"hash/fnv"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"

	infrav1 "github.com/goofy-capi/cluster-api-provider-goofy/api/v1alpha1"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/mux"
)

// phase is one simulated provisioning step. ensure is idempotent: it runs when the phase completes
// and again on every later reconcile, which rebuilds the workload objects after a restart.
type phase struct {
	condition string
	settings  func(*infrav1.InMemoryMachineBackend) infrav1.ProvisioningSpec
	ensure    func(r *GoofyMachineReconciler, ctx context.Context, s *machineScope, l *mux.WorkloadClusterListener) error
}

var (
	vmPhase = phase{infrav1.VMProvisionedCondition,
		func(b *infrav1.InMemoryMachineBackend) infrav1.ProvisioningSpec { return b.VM.Provisioning },
		(*GoofyMachineReconciler).ensureVM}
	nodePhase = phase{infrav1.NodeProvisionedCondition,
		func(b *infrav1.InMemoryMachineBackend) infrav1.ProvisioningSpec { return b.Node.Provisioning },
		(*GoofyMachineReconciler).ensureNode}
	etcdPhase = phase{infrav1.EtcdProvisionedCondition,
		func(b *infrav1.InMemoryMachineBackend) infrav1.ProvisioningSpec { return b.Etcd.Provisioning },
		(*GoofyMachineReconciler).ensureEtcd}
	apiServerPhase = phase{infrav1.APIServerProvisionedCondition,
		func(b *infrav1.InMemoryMachineBackend) infrav1.ProvisioningSpec { return b.APIServer.Provisioning },
		(*GoofyMachineReconciler).ensureAPIServer}
)

// phasesFor lists the phases of a machine in order: control-plane machines also get an etcd
// member and an API server.
func phasesFor(s *machineScope) []phase {
	if s.controlPlane() {
		return []phase{vmPhase, nodePhase, etcdPhase, apiServerPhase}
	}
	return []phase{vmPhase, nodePhase}
}

// runPhases advances the machine through its phases. A phase starts when the previous one ends
// (its condition turns False/Provisioning, lastTransitionTime = start) and completes once its
// duration has elapsed; the reconciler then requeues at exactly the remaining time. Phases with no
// duration complete in the same reconcile, so a zero-delay machine provisions in one pass.
func (r *GoofyMachineReconciler) runPhases(ctx context.Context, s *machineScope, l *mux.WorkloadClusterListener) (ctrl.Result, error) {
	backend := s.gm.Spec.Backend.InMemory
	if backend == nil {
		backend = &infrav1.InMemoryMachineBackend{}
	}
	// The finalizer is stored before the first phase changes anything outside the GoofyMachine
	// (the VM's address, then workload objects): deletion must undo it. Until then there is
	// nothing to release, and the finalizer rides on a patch the machine needs anyway (its
	// provider ID).
	ensure := func(p phase) error {
		if err := s.persistFinalizer(ctx); err != nil {
			return err
		}
		return p.ensure(r, ctx, s, l)
	}
	for _, p := range phasesFor(s) {
		c := conditions.Get(s.gm, p.condition)
		if c != nil && c.Status == metav1.ConditionTrue {
			if err := ensure(p); err != nil {
				return ctrl.Result{}, fmt.Errorf("%s: %w", p.condition, err)
			}
			continue
		}
		now := r.Clock.Now()
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != infrav1.ProvisioningReason {
			// The phase starts now. Drop the old condition first: a False one (an Azure machine
			// that waited with NoFreeInstance) would otherwise keep its lastTransitionTime, and
			// the phase would count the wait as elapsed provisioning time.
			conditions.Delete(s.gm, p.condition)
			conditions.Set(s.gm, metav1.Condition{Type: p.condition, Status: metav1.ConditionFalse, Reason: infrav1.ProvisioningReason,
				LastTransitionTime: metav1.NewTime(now)})
			c = conditions.Get(s.gm, p.condition)
		}
		d := phaseDuration(p.settings(backend), string(s.gm.UID)+"/"+p.condition)
		if remaining := c.LastTransitionTime.Add(d).Sub(now); remaining > 0 {
			return ctrl.Result{RequeueAfter: remaining}, nil
		}
		if err := ensure(p); err != nil {
			conditions.Set(s.gm, metav1.Condition{Type: p.condition, Status: metav1.ConditionFalse, Reason: infrav1.ProvisioningReason, Message: err.Error()})
			return ctrl.Result{}, fmt.Errorf("%s: %w", p.condition, err)
		}
		conditions.Set(s.gm, metav1.Condition{Type: p.condition, Status: metav1.ConditionTrue, Reason: infrav1.ProvisionedReason,
			LastTransitionTime: metav1.NewTime(r.Clock.Now())})
		ctrl.LoggerFrom(ctx).V(2).Info("Phase completed", "phase", p.condition)
	}
	return ctrl.Result{}, nil
}

// phaseDuration is startupDuration plus a uniform share of it up to startupJitter. The share is
// derived from seed (machine UID and phase), so it stays the same across reconciles and restarts
// while being uniformly spread over machines.
func phaseDuration(p infrav1.ProvisioningSpec, seed string) time.Duration {
	d := p.StartupDuration.Duration
	if d <= 0 {
		return 0
	}
	jitter, err := strconv.ParseFloat(p.StartupJitter, 64)
	if err != nil || jitter <= 0 {
		return d
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(seed))
	u := float64(h.Sum64()>>11) / float64(1<<53) // uniform in [0,1)
	return d + time.Duration(float64(d)*jitter*u)
}
