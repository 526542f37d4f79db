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

// phase is one provisioning step of a machine. Its ensure step is idempotent: it runs when the
// phase completes and again on every later reconcile, which rebuilds the workload objects after a
// restart.
type phase struct {
	condition string
	settings  func(*infrav1.InMemoryMachineBackend) infrav1.ProvisioningSpec
}

var (
	vmPhase = phase{infrav1.VMProvisionedCondition,
		func(b *infrav1.InMemoryMachineBackend) infrav1.ProvisioningSpec { return b.VM.Provisioning }}
	nodePhase = phase{infrav1.NodeProvisionedCondition,
		func(b *infrav1.InMemoryMachineBackend) infrav1.ProvisioningSpec { return b.Node.Provisioning }}
	etcdPhase = phase{infrav1.EtcdProvisionedCondition,
		func(b *infrav1.InMemoryMachineBackend) infrav1.ProvisioningSpec { return b.Etcd.Provisioning }}
	apiServerPhase = phase{infrav1.APIServerProvisionedCondition,
		func(b *infrav1.InMemoryMachineBackend) infrav1.ProvisioningSpec { return b.APIServer.Provisioning }}
)

// phasesFor lists the phases of a machine in order: control-plane machines also get an etcd
// member and an API server.
func phasesFor(s *machineScope) []phase {
	if s.controlPlane() {
		return []phase{vmPhase, nodePhase, etcdPhase, apiServerPhase}
	}
	return []phase{vmPhase, nodePhase}
}

// machineSteps are what a backend does itself in the phases: store the finalizer (with whatever
// the object gained so far) before anything is provisioned, and provide the VM. The node unit
// does the rest.
type machineSteps struct {
	persist func(ctx context.Context, s *machineScope) error
	vm      func(ctx context.Context, s *machineScope) error
}

// ensure runs the ensure step of phase p.
func (e *machineEnv) ensure(ctx context.Context, s *machineScope, l *mux.WorkloadClusterListener, steps machineSteps, p phase) error {
	// The finalizer is stored before the first phase changes anything outside the GoofyMachine
	// (the VM's address, then workload objects): deletion must undo it. Until then there is
	// nothing to release, and the finalizer rides on a patch the machine needs anyway (its
	// provider ID).
	if err := steps.persist(ctx, s); err != nil {
		return err
	}
	switch p.condition {
	case infrav1.VMProvisionedCondition:
		return steps.vm(ctx, s)
	case infrav1.NodeProvisionedCondition:
		return e.nodes.ensureNode(ctx, s.node(), l)
	case infrav1.EtcdProvisionedCondition:
		return e.nodes.ensureEtcd(ctx, s.node(), l)
	case infrav1.APIServerProvisionedCondition:
		return e.nodes.ensureAPIServer(ctx, s.node(), l)
	}
	return fmt.Errorf("unknown phase %s", p.condition)
}

// runPhases advances the machine through its phases. A phase starts when the previous one ends
// (its condition turns False/Provisioning, lastTransitionTime = start) and completes once its
// duration has elapsed; the reconciler then requeues at exactly the remaining time. Phases with no
// duration complete in the same reconcile, so a zero-delay machine provisions in one pass.
func (e *machineEnv) runPhases(ctx context.Context, s *machineScope, l *mux.WorkloadClusterListener, steps machineSteps) (ctrl.Result, error) {
	backend := s.gm.Spec.Backend.InMemory
	if backend == nil {
		backend = &infrav1.InMemoryMachineBackend{}
	}
	for _, p := range phasesFor(s) {
		c := conditions.Get(s.gm, p.condition)
		if c != nil && c.Status == metav1.ConditionTrue {
			if err := e.ensure(ctx, s, l, steps, p); err != nil {
				return ctrl.Result{}, fmt.Errorf("%s: %w", p.condition, err)
			}
			continue
		}
		now := e.clock.Now()
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
		if err := e.ensure(ctx, s, l, steps, p); err != nil {
			conditions.Set(s.gm, metav1.Condition{Type: p.condition, Status: metav1.ConditionFalse, Reason: infrav1.ProvisioningReason, Message: err.Error()})
			return ctrl.Result{}, fmt.Errorf("%s: %w", p.condition, err)
		}
		conditions.Set(s.gm, metav1.Condition{Type: p.condition, Status: metav1.ConditionTrue, Reason: infrav1.ProvisionedReason,
			LastTransitionTime: metav1.NewTime(e.clock.Now())})
		ctrl.LoggerFrom(ctx).V(2).Info("Phase completed", "phase", p.condition)
	}
	return ctrl.Result{}, nil
}

// setSummary sets Ready from the phase conditions that apply to this machine.
func setSummary(s *machineScope) {
	if s.faults.vmFailed {
		// A terminal failure, reported as CAPI's v1beta2 contract lets an infrastructure machine
		// report one: a condition with a documented reason (docs/faults.md).
		conditions.Set(s.gm, metav1.Condition{Type: infrav1.ReadyCondition, Status: metav1.ConditionFalse, Reason: infrav1.VMFailedReason,
			Message: "the VM failed for good (spec.simulation.vmFailed): the machine has to be replaced"})
		return
	}
	if s.vmGone != "" {
		conditions.Set(s.gm, metav1.Condition{Type: infrav1.ReadyCondition, Status: metav1.ConditionFalse, Reason: infrav1.InstanceGoneReason,
			Message: s.vmGone})
		return
	}
	for _, p := range phasesFor(s) {
		c := conditions.Get(s.gm, p.condition)
		if c == nil || c.Status != metav1.ConditionTrue {
			reason, msg := infrav1.ProvisioningReason, fmt.Sprintf("%s is not yet true", p.condition)
			if c != nil {
				reason = c.Reason
				if c.Message != "" {
					msg = c.Message
				}
			}
			conditions.Set(s.gm, metav1.Condition{Type: infrav1.ReadyCondition, Status: metav1.ConditionFalse, Reason: reason, Message: msg})
			return
		}
	}
	conditions.Set(s.gm, metav1.Condition{Type: infrav1.ReadyCondition, Status: metav1.ConditionTrue, Reason: infrav1.ReadyReason})
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
