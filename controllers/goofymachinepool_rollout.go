package controllers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/goofy-capi/cluster-api-provider-goofy/api/v1alpha1"
)

// Rolling replacement of a pool's instances. An instance records what it was made from in
// InstanceTemplateHashAnnotation; an instance whose hash is not the current one is out of date.
// The plan of a reconcile is computed from what it read alone (no memory between reconciles), so a
// manager restart goes on where the last one stopped.

// instanceTemplateHash is the hash of what a new instance of the pool in s is made from: the
// pool's spec.template, the MachinePool's Kubernetes version, bootstrap config reference and
// bootstrap data secret name (a new config's secret replaces the old one once CABPK made it).
func instanceTemplateHash(s *machinePoolScope) (string, error) {
	spec := &s.machinePool.Spec.Template.Spec
	b, err := json.Marshal(struct {
		Template       *infrav1.GoofyMachinePoolInstanceTemplate   `json:"template"`
		Version        string                                      `json:"version"`
		ConfigRef      *clusterv1.ContractVersionedObjectReference `json:"configRef"`
		DataSecretName string                                      `json:"dataSecretName"`
	}{&s.pool.Spec.Template, spec.Version, &spec.Bootstrap.ConfigRef, ptr.Deref(spec.Bootstrap.DataSecretName, "")})
	if err != nil {
		return "", fmt.Errorf("hashing the instance template of GoofyMachinePool %s: %w", klogRef(s.pool), err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8]), nil
}

// anyOutOfDate reports whether an instance was made from another template than hash's.
func anyOutOfDate(instances []poolInstance, hash string) bool {
	for _, in := range instances {
		if !isUpToDate(in.gm, hash) {
			return true
		}
	}
	return false
}

// isUpToDate reports whether gm was made from the current instance template (hash).
func isUpToDate(gm *infrav1.GoofyMachine, hash string) bool {
	return gm.Annotations[infrav1.InstanceTemplateHashAnnotation] == hash
}

// poolBounds are a rolling update's maxSurge and maxUnavailable, resolved against the replicas.
type poolBounds struct{ surge, unavailable int }

// rollingBounds resolves the pool's strategy (defaults: maxSurge 1, maxUnavailable 0) against
// desired replicas as a Deployment does: a percentage of maxSurge rounds up, of maxUnavailable
// down, and when both are 0 maxUnavailable counts as 1.
func rollingBounds(pool *infrav1.GoofyMachinePool, desired int32) (poolBounds, error) {
	surge, unavailable := intstr.FromInt32(1), intstr.FromInt32(0)
	if ru := pool.Spec.Strategy.RollingUpdate; ru != nil {
		if ru.MaxSurge != nil {
			surge = *ru.MaxSurge
		}
		if ru.MaxUnavailable != nil {
			unavailable = *ru.MaxUnavailable
		}
	}
	s, err := intstr.GetScaledValueFromIntOrPercent(&surge, int(desired), true)
	if err != nil || s < 0 {
		return poolBounds{}, fmt.Errorf("spec.strategy.rollingUpdate.maxSurge %q is neither a non-negative integer nor a percentage", surge.String())
	}
	u, err := intstr.GetScaledValueFromIntOrPercent(&unavailable, int(desired), false)
	if err != nil || u < 0 {
		return poolBounds{}, fmt.Errorf("spec.strategy.rollingUpdate.maxUnavailable %q is neither a non-negative integer nor a percentage", unavailable.String())
	}
	if s == 0 && u == 0 {
		u = 1
	}
	return poolBounds{surge: s, unavailable: u}, nil
}

// deletePolicyOf is the policy that orders the instances to remove: the rolling update's, else
// spec.deletePolicy.
func deletePolicyOf(pool *infrav1.GoofyMachinePool) infrav1.MachinePoolDeletePolicy {
	if ru := pool.Spec.Strategy.RollingUpdate; ru != nil && ru.DeletePolicy != "" {
		return ru.DeletePolicy
	}
	return pool.Spec.DeletePolicy
}

// instancePlan is what one reconcile does to a pool's instances.
type instancePlan struct {
	create int
	remove []*clusterv1.Machine // Machines to delete
	// rolling: some instances are out of date and the removals replace them.
	rolling bool
}

func (p instancePlan) empty() bool { return p.create == 0 && len(p.remove) == 0 }

// planInstances decides what to create and which Machines to delete so that the pool moves
// towards desired up-to-date instances. Without out-of-date instances (or with an invalid
// strategy) it scales: it creates the missing instances or removes the surplus. With some, it
// rolls, as a Deployment's rolling update does: at most desired+surge instances (not being
// deleted) exist at any time, and an out-of-date instance is removed only while more than
// desired-unavailable instances would be left, and, for a Ready one, more than desired-unavailable
// Ready ones. Instances whose Machine CAPI has not made yet are never removed.
func planInstances(instances []poolInstance, hash string, desired int, b poolBounds, canRoll bool, policy infrav1.MachinePoolDeletePolicy) instancePlan {
	var active, upToDate, outdated []poolInstance
	for _, in := range instances {
		if in.leaving {
			continue
		}
		active = append(active, in)
		if isUpToDate(in.gm, hash) {
			upToDate = append(upToDate, in)
		} else {
			outdated = append(outdated, in)
		}
	}
	var p instancePlan
	if len(outdated) == 0 || !canRoll {
		switch n := len(active); {
		case n < desired:
			p.create = desired - n
		case n > desired:
			p.remove = machinesToRemove(active, n-desired, policy)
		}
		return p
	}
	p.rolling = true
	remaining, ready := len(active), countReady(active)
	// Up-to-date instances beyond the replicas (the pool shrank meanwhile) go as in a scale-down.
	if extra := len(upToDate) - desired; extra > 0 {
		p.remove = machinesToRemove(upToDate, extra, policy)
		for _, in := range upToDate {
			if in.machine != nil && containsMachine(p.remove, in.machine) {
				remaining--
				if conditions.IsTrue(in.gm, infrav1.ReadyCondition) {
					ready--
				}
			}
		}
	}
	keepUpToDate := len(upToDate) - len(p.remove)
	minAvailable := desired - b.unavailable
	for _, in := range orderForRemoval(outdated, policy) {
		if remaining <= minAvailable {
			break
		}
		isReady := conditions.IsTrue(in.gm, infrav1.ReadyCondition)
		if isReady && ready <= minAvailable {
			continue // a Ready one may not go yet; one not Ready further on may
		}
		p.remove = append(p.remove, in.machine)
		remaining--
		if isReady {
			ready--
		}
	}
	p.create = max(0, min(desired+b.surge-remaining, desired-keepUpToDate))
	return p
}

func containsMachine(ms []*clusterv1.Machine, m *clusterv1.Machine) bool {
	for _, x := range ms {
		if x == m {
			return true
		}
	}
	return false
}

func countReady(instances []poolInstance) int {
	n := 0
	for _, in := range instances {
		if conditions.IsTrue(in.gm, infrav1.ReadyCondition) {
			n++
		}
	}
	return n
}

// machinesToRemove are the Machines of the first n instances in removal order.
func machinesToRemove(instances []poolInstance, n int, policy infrav1.MachinePoolDeletePolicy) []*clusterv1.Machine {
	ordered := orderForRemoval(instances, policy)
	out := make([]*clusterv1.Machine, 0, min(n, len(ordered)))
	for _, in := range ordered[:min(n, len(ordered))] {
		out = append(out, in.machine)
	}
	return out
}

// orderForRemoval orders the instances that have a Machine (the others are left alone: their
// Machine is on its way): first those whose Machine has the cluster.x-k8s.io/delete-machine
// annotation, then those not Ready, then the oldest (with policy Newest, the newest), then by name.
func orderForRemoval(instances []poolInstance, policy infrav1.MachinePoolDeletePolicy) []poolInstance {
	var candidates []poolInstance
	for _, in := range instances {
		if !in.leaving && in.machine != nil {
			candidates = append(candidates, in)
		}
	}
	newest := policy == infrav1.DeletePolicyNewest
	sort.SliceStable(candidates, func(i, j int) bool {
		a, b := candidates[i], candidates[j]
		if ma, mb := hasDeleteAnnotation(a.machine), hasDeleteAnnotation(b.machine); ma != mb {
			return ma
		}
		if ra, rb := conditions.IsTrue(a.gm, infrav1.ReadyCondition), conditions.IsTrue(b.gm, infrav1.ReadyCondition); ra != rb {
			return !ra
		}
		ta, tb := a.gm.CreationTimestamp, b.gm.CreationTimestamp
		if !ta.Equal(&tb) {
			if newest {
				return tb.Before(&ta)
			}
			return ta.Before(&tb)
		}
		return a.gm.Name < b.gm.Name
	})
	return candidates
}

// bootstrapDataBehind says why the pool must not roll yet, or "" (read uncached, and only while
// instances are out of date): after a change of the
// MachinePool's bootstrap configRef, CAPI keeps the old config's dataSecretName until the new
// config's secret exists. Rolling on that would make instances from the old data and roll them
// again once the name changes, so the pool waits while the data secret is, by its owner
// reference, another config's of the configRef's kind. A secret with no such owner (a user's
// secret, a bootstrap provider that owns none) cannot tell, and never holds the rollout.
func bootstrapDataBehind(ctx context.Context, c client.Reader, s *machinePoolScope) (string, error) {
	b := s.machinePool.Spec.Template.Spec.Bootstrap
	if !b.ConfigRef.IsDefined() || ptr.Deref(b.DataSecretName, "") == "" {
		return "", nil
	}
	secret := &metav1.PartialObjectMetadata{}
	secret.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	if err := c.Get(ctx, client.ObjectKey{Namespace: s.machinePool.Namespace, Name: *b.DataSecretName}, secret); err != nil {
		if apierrors.IsNotFound(err) {
			return "", nil
		}
		return "", fmt.Errorf("reading MachinePool %s's bootstrap data secret: %w", klogRef(s.machinePool), err)
	}
	for _, o := range secret.OwnerReferences {
		gv, err := schema.ParseGroupVersion(o.APIVersion)
		if err != nil || gv.Group != b.ConfigRef.APIGroup || o.Kind != b.ConfigRef.Kind || o.Name == b.ConfigRef.Name {
			continue
		}
		return fmt.Sprintf("waiting for the bootstrap data of %s %s: the MachinePool's data secret %s is still %s %s's",
			b.ConfigRef.Kind, b.ConfigRef.Name, *b.DataSecretName, o.Kind, o.Name), nil
	}
	return "", nil
}

// reportRollout writes status.upToDateReplicas and the RollingOut condition, and, while instances
// are out of date, InstancesReady False with RollingUpdateInProgress (or InvalidStrategy); held
// is why the rollout waits (bootstrapDataBehind), if it does.
func reportRollout(s *machinePoolScope, instances []poolInstance, hash string, desired int32, strategyErr error, held string) {
	pool := s.pool
	upToDate, outdated, outdatedLeaving := int32(0), 0, 0
	for _, in := range instances {
		switch {
		case !isUpToDate(in.gm, hash) && in.leaving:
			outdatedLeaving++
		case !isUpToDate(in.gm, hash):
			outdated++
		case !in.leaving:
			upToDate++
		}
	}
	pool.Status.UpToDateReplicas = ptr.To(upToDate)
	if outdated+outdatedLeaving == 0 {
		conditions.Set(pool, metav1.Condition{Type: infrav1.RollingOutCondition, Status: metav1.ConditionFalse, Reason: infrav1.NotRollingOutReason})
		return
	}
	if strategyErr != nil {
		msg := fmt.Sprintf("%d instances are out of date and are not replaced: %v", outdated, strategyErr)
		conditions.Set(pool, metav1.Condition{Type: infrav1.RollingOutCondition, Status: metav1.ConditionFalse, Reason: infrav1.InvalidStrategyReason, Message: msg})
		conditions.Set(pool, metav1.Condition{Type: infrav1.InstancesReadyCondition, Status: metav1.ConditionFalse, Reason: infrav1.InvalidStrategyReason, Message: msg})
		return
	}
	msg := fmt.Sprintf("rolling out: %d of %d instances up to date, %d out of date, %d out of date being deleted", upToDate, desired, outdated, outdatedLeaving)
	if held != "" {
		msg = fmt.Sprintf("%d instances out of date, none replaced yet: %s", outdated, held)
	}
	conditions.Set(pool, metav1.Condition{Type: infrav1.RollingOutCondition, Status: metav1.ConditionTrue, Reason: infrav1.RollingUpdateInProgressReason, Message: msg})
	conditions.Set(pool, metav1.Condition{Type: infrav1.InstancesReadyCondition, Status: metav1.ConditionFalse, Reason: infrav1.RollingUpdateInProgressReason, Message: msg})
}
