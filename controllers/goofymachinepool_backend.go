package controllers

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/labels/format"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/goofy-capi/cluster-api-provider-goofy/api/v1alpha1"
)

// machinePoolScope is what one reconcile knows about a GoofyMachinePool.
type machinePoolScope struct {
	cluster     *clusterv1.Cluster
	machinePool *clusterv1.MachinePool
	pool        *infrav1.GoofyMachinePool
	gc          *infrav1.GoofyCluster // nil when gone
	patcher     *objectPatcher
}

// machinePoolBackend chooses the backend of the pool in s, once per reconcile: that of its
// GoofyCluster (simulated when that is gone).
func (r *GoofyMachinePoolReconciler) machinePoolBackend(s *machinePoolScope) MachinePoolBackend {
	if r.chooseBackend != nil {
		return r.chooseBackend(s)
	}
	if s.gc != nil && s.gc.Spec.Backend.Azure != nil {
		return newAzureMachinePoolBackend(r.Client, r.reader(), r.Azure)
	}
	return &simulatedMachinePoolBackend{client: r.Client, live: r.reader()}
}

// simulatedMachinePoolBackend keeps one instance GoofyMachine per MachinePool replica. CAPI
// creates a Machine for each (MachinePool Machines) and the GoofyMachine reconciler provisions its
// simulated node, bootstrapped with the MachinePool's data secret (poolInstanceMachine). To scale
// down it deletes the Machines of the chosen instances: CAPI drains their Nodes and then deletes
// the instances, whose GoofyMachine reconciler tears the nodes down.
type simulatedMachinePoolBackend struct {
	client client.Client
	live   client.Reader // uncached reads before creating or deleting
}

// poolInstance is one instance GoofyMachine of a pool and its Machine (nil until CAPI made it).
type poolInstance struct {
	gm      *infrav1.GoofyMachine
	machine *clusterv1.Machine
	// leaving: the instance or its Machine is being deleted, or its Machine is gone.
	leaving bool
}

func (b *simulatedMachinePoolBackend) ReconcileNormal(ctx context.Context, s *machinePoolScope) (ctrl.Result, error) {
	pool, mp := s.pool, s.machinePool
	if pool.Spec.ProviderID == "" {
		pool.Spec.ProviderID = fmt.Sprintf("goofy://%s/%s/machinepools/%s", pool.Namespace, s.cluster.Name, pool.Name)
	}
	instances, others, err := b.instances(ctx, b.client, s)
	if err != nil {
		return ctrl.Result{}, err
	}
	desired := ptr.Deref(mp.Spec.Replicas, 1)
	switch {
	case desired < 0:
		report(s, instances, others, desired)
		conditions.Set(pool, metav1.Condition{Type: infrav1.InstancesReadyCondition, Status: metav1.ConditionFalse, Reason: infrav1.InvalidReplicasReason,
			Message: fmt.Sprintf("MachinePool %s has spec.replicas %d: no instances are created or deleted until it is at least 0", klogRef(mp), desired)})
		return ctrl.Result{}, nil
	case ptr.Deref(mp.Spec.Template.Spec.Bootstrap.DataSecretName, "") == "":
		report(s, instances, others, desired)
		conditions.Set(pool, metav1.Condition{Type: infrav1.InstancesReadyCondition, Status: metav1.ConditionFalse, Reason: infrav1.WaitingForBootstrapDataReason,
			Message: fmt.Sprintf("waiting for MachinePool %s's bootstrap data secret", klogRef(mp))})
		return ctrl.Result{}, nil
	}
	hash, err := instanceTemplateHash(s)
	if err != nil {
		return ctrl.Result{}, err
	}
	bounds, strategyErr := rollingBounds(pool, desired)
	var held string
	if anyOutOfDate(instances, hash) {
		if held, err = bootstrapDataBehind(ctx, b.live, s); err != nil {
			return ctrl.Result{}, err
		}
	}
	canRoll := strategyErr == nil && held == ""
	plan := planInstances(instances, hash, int(desired), bounds, canRoll, deletePolicyOf(pool))
	if !plan.empty() {
		// Creating or deleting on a stale cache would create or delete too many: read the
		// instances and their Machines again, uncached, and plan again.
		if instances, others, err = b.instances(ctx, b.live, s); err != nil {
			return ctrl.Result{}, err
		}
		plan = planInstances(instances, hash, int(desired), bounds, canRoll, deletePolicyOf(pool))
	}
	if err := b.deleteMachines(ctx, instances, plan.remove, plan.rolling); err != nil {
		return ctrl.Result{}, err
	}
	for range plan.create {
		gm, err := b.createInstance(ctx, s, hash)
		if err != nil {
			return ctrl.Result{}, err
		}
		instances = append(instances, poolInstance{gm: gm})
	}
	report(s, instances, others, desired)
	reportRollout(s, instances, hash, desired, strategyErr, held)
	return ctrl.Result{}, nil
}

func (b *simulatedMachinePoolBackend) ReconcileDelete(ctx context.Context, s *machinePoolScope) (bool, error) {
	return deletePoolInstances(ctx, b.client, s.pool)
}

// instances reads the pool's instances (GoofyMachines with its instance label and owner
// reference, with their Machines) and the cluster's other GoofyMachines (for provider ID
// collisions) through r. From the cache they are not copied (a pool of 500 instances is
// reconciled at each of their Ready transitions): the objects read are never modified.
func (b *simulatedMachinePoolBackend) instances(ctx context.Context, r client.Reader, s *machinePoolScope) ([]poolInstance, []infrav1.GoofyMachine, error) {
	gms := &infrav1.GoofyMachineList{}
	if err := r.List(ctx, gms, client.InNamespace(s.pool.Namespace), client.MatchingLabels{clusterv1.ClusterNameLabel: s.cluster.Name},
		client.UnsafeDisableDeepCopy); err != nil {
		return nil, nil, err
	}
	machines := &clusterv1.MachineList{}
	if err := r.List(ctx, machines, client.InNamespace(s.pool.Namespace), client.MatchingLabels{
		clusterv1.ClusterNameLabel: s.cluster.Name, clusterv1.MachinePoolNameLabel: format.MustFormatValue(s.machinePool.Name),
	}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, nil, err
	}
	byName := make(map[string]*clusterv1.Machine, len(machines.Items))
	for i := range machines.Items {
		byName[machines.Items[i].Name] = &machines.Items[i]
	}
	var instances []poolInstance
	var others []infrav1.GoofyMachine
	for i := range gms.Items {
		gm := &gms.Items[i]
		if !isPoolInstance(gm, s.pool) {
			others = append(others, *gm)
			continue
		}
		in := poolInstance{gm: gm, leaving: !gm.DeletionTimestamp.IsZero()}
		if ref := ownerMachineRef(gm); ref != nil {
			m, ok := byName[ref.Name]
			switch {
			case !ok || m.UID != ref.UID:
				in.leaving = true // its Machine is gone: CAPI deletes the instance
			default:
				in.machine = m
				in.leaving = in.leaving || !m.DeletionTimestamp.IsZero()
			}
		}
		instances = append(instances, in)
	}
	return instances, others, nil
}

// isPoolInstance reports whether gm is one of pool's instances: its label and owner reference.
func isPoolInstance(gm *infrav1.GoofyMachine, pool *infrav1.GoofyMachinePool) bool {
	ref := poolOwnerRef(gm)
	return ref != nil && ref.UID == pool.UID && gm.Labels[infrav1.MachinePoolInstanceLabel] == format.MustFormatValue(pool.Name)
}

// ownerMachineRef is gm's Machine owner reference, if any.
func ownerMachineRef(gm *infrav1.GoofyMachine) *metav1.OwnerReference {
	for i, ref := range gm.OwnerReferences {
		if ref.Kind == "Machine" && strings.HasPrefix(ref.APIVersion, clusterv1.GroupVersion.Group+"/") {
			return &gm.OwnerReferences[i]
		}
	}
	return nil
}

func countActive(instances []poolInstance) int {
	n := 0
	for _, in := range instances {
		if !in.leaving {
			n++
		}
	}
	return n
}

// instanceNamePrefix bounds the pool name in an instance's name, so that the instance, its Machine
// and its Node have names of at most 63 characters (a host name).
const instanceNamePrefix = 57

// createInstance creates one instance GoofyMachine: labelled for CAPI's MachinePool controller
// (pool and cluster names), owned by the pool (not as controller: the Machine CAPI creates for it
// becomes its controller), with its provider ID, the MachinePool's Kubernetes version and
// bootstrap data secret, the pool's instance template, and the hash of all these (hash).
func (b *simulatedMachinePoolBackend) createInstance(ctx context.Context, s *machinePoolScope, hash string) (*infrav1.GoofyMachine, error) {
	gm, err := createPoolInstance(ctx, b.client, s, func(gm *infrav1.GoofyMachine) {
		gm.Spec.ProviderID = fmt.Sprintf("goofy://%s/%s/%s", gm.Namespace, s.cluster.Name, gm.Name)
		gm.Annotations[infrav1.InstanceTemplateHashAnnotation] = hash
		if tmpl := s.pool.Spec.Template; tmpl.Spec.InMemory != nil {
			gm.Spec.Backend.InMemory = tmpl.Spec.InMemory.DeepCopy()
		}
	})
	if err != nil {
		return nil, fmt.Errorf("creating an instance of GoofyMachinePool %s: %w", klogRef(s.pool), err)
	}
	ctrl.LoggerFrom(ctx).Info("Created a pool instance", "GoofyMachine", klogRef(gm))
	return gm, nil
}

// createPoolInstance creates an instance GoofyMachine of the pool in s, whatever its backend:
// named after the pool, owned by it (not as controller), labelled for CAPI's MachinePool
// Machines, with the pool template's labels, annotations and capacity and the MachinePool's
// bootstrap data and version recorded; backend adds what is its own (provider ID, backend).
func createPoolInstance(ctx context.Context, c client.Client, s *machinePoolScope, backend func(gm *infrav1.GoofyMachine)) (*infrav1.GoofyMachine, error) {
	pool, mp := s.pool, s.machinePool
	prefix := pool.Name
	if len(prefix) > instanceNamePrefix {
		prefix = strings.TrimRight(prefix[:instanceNamePrefix], "-.")
	}
	tmpl := pool.Spec.Template
	for attempt := 0; ; attempt++ {
		gm := &infrav1.GoofyMachine{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: pool.Namespace, Name: prefix + "-" + utilrand.String(5),
				Labels: map[string]string{}, Annotations: map[string]string{},
				OwnerReferences: []metav1.OwnerReference{{
					APIVersion: infrav1.GroupVersion.String(), Kind: "GoofyMachinePool", Name: pool.Name, UID: pool.UID,
				}},
			},
		}
		for k, v := range tmpl.ObjectMeta.Labels {
			gm.Labels[k] = v
		}
		for k, v := range tmpl.ObjectMeta.Annotations {
			gm.Annotations[k] = v
		}
		if v, ok := pool.Labels[clusterv1.WatchLabel]; ok {
			// The manager (shard) that reconciles the pool reconciles its instances.
			gm.Labels[clusterv1.WatchLabel] = v
		}
		gm.Labels[clusterv1.ClusterNameLabel] = s.cluster.Name
		gm.Labels[clusterv1.MachinePoolNameLabel] = format.MustFormatValue(mp.Name)
		gm.Labels[infrav1.MachinePoolInstanceLabel] = format.MustFormatValue(pool.Name)
		gm.Annotations[infrav1.InstanceBootstrapDataAnnotation] = *mp.Spec.Template.Spec.Bootstrap.DataSecretName
		if v := mp.Spec.Template.Spec.Version; v != "" {
			gm.Annotations[infrav1.InstanceKubernetesVersionAnnotation] = v
		}
		if len(tmpl.Spec.Capacity) > 0 {
			gm.Spec.Capacity = tmpl.Spec.Capacity.DeepCopy()
		}
		backend(gm)
		err := c.Create(ctx, gm)
		if apierrors.IsAlreadyExists(err) && attempt < 3 {
			continue // a random name taken: draw another
		}
		if err != nil {
			return nil, err
		}
		return gm, nil
	}
}

// deleteMachines deletes the Machines of the chosen instances (CAPI drains their Nodes, then
// deletes the instances) and marks them leaving in instances.
func (b *simulatedMachinePoolBackend) deleteMachines(ctx context.Context, instances []poolInstance, chosen []*clusterv1.Machine, rolling bool) error {
	msg := "Scaling down: deleting the Machine of a pool instance"
	if rolling {
		msg = "Rolling update: deleting the Machine of an out-of-date pool instance"
	}
	deleted := map[*clusterv1.Machine]bool{}
	for _, m := range chosen {
		ctrl.LoggerFrom(ctx).Info(msg, "Machine", klogRef(m))
		// A copy: the Machine read may be the cache's own object.
		if err := b.client.Delete(ctx, m.DeepCopy(), client.Preconditions{UID: &m.UID}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting Machine %s of a pool instance: %w", klogRef(m), err)
		}
		deleted[m] = true
	}
	for i := range instances {
		if deleted[instances[i].machine] {
			instances[i].leaving = true
		}
	}
	return nil
}

func hasDeleteAnnotation(m *clusterv1.Machine) bool {
	_, ok := m.Annotations[clusterv1.DeleteMachineAnnotation]
	return ok
}

// report writes what the pool observed of its instances: spec.providerIDList (every instance's
// provider ID that no other GoofyMachine of the cluster claims), status.replicas and
// readyReplicas, status.initialization.provisioned, InstancesReady and ProviderIDsUnique.
func report(s *machinePoolScope, instances []poolInstance, others []infrav1.GoofyMachine, desired int32) {
	pool := s.pool
	claims := map[string][]string{} // provider ID → the GoofyMachines claiming it
	for _, o := range others {
		if o.Spec.ProviderID != "" {
			claims[o.Spec.ProviderID] = append(claims[o.Spec.ProviderID], o.Name)
		}
	}
	for _, in := range instances {
		if id := in.gm.Spec.ProviderID; id != "" {
			claims[id] = append(claims[id], in.gm.Name)
		}
	}
	ids := []string{}
	var collisions []string
	ready := int32(0)
	for _, in := range instances {
		if conditions.IsTrue(in.gm, infrav1.ReadyCondition) {
			ready++
		}
		id := in.gm.Spec.ProviderID
		switch {
		case id == "":
		case len(claims[id]) > 1:
			names := slices.Clone(claims[id])
			slices.Sort(names)
			collisions = append(collisions, fmt.Sprintf("%s (GoofyMachines %s)", id, strings.Join(names, ", ")))
		default:
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	pool.Spec.ProviderIDList = ids
	if len(ids) == 0 {
		pool.Spec.ProviderIDList = nil
	}
	pool.Status.Replicas = ptr.To(int32(len(instances)))
	pool.Status.ReadyReplicas = ptr.To(ready)

	if len(collisions) > 0 {
		slices.Sort(collisions)
		collisions = slices.Compact(collisions)
		conditions.Set(pool, metav1.Condition{Type: infrav1.ProviderIDsUniqueCondition, Status: metav1.ConditionFalse, Reason: infrav1.ProviderIDCollisionReason,
			Message: "provider IDs claimed by more than one GoofyMachine, left out of spec.providerIDList: " + strings.Join(collisions, "; ")})
	} else {
		conditions.Set(pool, metav1.Condition{Type: infrav1.ProviderIDsUniqueCondition, Status: metav1.ConditionTrue, Reason: infrav1.NoProviderIDCollisionReason})
	}

	if desired < 0 {
		return
	}
	active, leaving := countActive(instances), len(instances)-countActive(instances)
	if active == int(desired) && len(collisions) == 0 && allHaveProviderIDs(instances) {
		pool.Status.Initialization.Provisioned = ptr.To(true)
	}
	pool.Status.Ready = ptr.Deref(pool.Status.Initialization.Provisioned, false)
	c := metav1.Condition{Type: infrav1.InstancesReadyCondition, Status: metav1.ConditionTrue, Reason: infrav1.ReadyReason,
		Message: fmt.Sprintf("%d of %d instances Ready", ready, desired)}
	switch {
	case active < int(desired):
		c.Status, c.Reason = metav1.ConditionFalse, infrav1.ScalingUpReason
		c.Message = fmt.Sprintf("scaling up: %d of %d instances", active, desired)
	case active > int(desired) || leaving > 0:
		c.Status, c.Reason = metav1.ConditionFalse, infrav1.ScalingDownReason
		c.Message = fmt.Sprintf("scaling down to %d instances: %d leaving (their Machines are deleted first)", desired, len(instances)-int(desired))
	case ready < desired:
		c.Status, c.Reason = metav1.ConditionFalse, infrav1.InstancesNotReadyReason
	}
	conditions.Set(pool, c)
}

func allHaveProviderIDs(instances []poolInstance) bool {
	for _, in := range instances {
		if in.gm.Spec.ProviderID == "" {
			return false
		}
	}
	return true
}

// deletePoolInstances deletes pool's instances: through their Machines (CAPI drains their Nodes
// and then deletes the instances), or directly when an instance has no Machine (yet, or any
// more). It reports whether none is left.
func deletePoolInstances(ctx context.Context, c client.Client, pool *infrav1.GoofyMachinePool) (bool, error) {
	gms := &infrav1.GoofyMachineList{}
	if err := c.List(ctx, gms, client.InNamespace(pool.Namespace), client.MatchingLabels{infrav1.MachinePoolInstanceLabel: format.MustFormatValue(pool.Name)}); err != nil {
		return false, err
	}
	left := 0
	for i := range gms.Items {
		gm := &gms.Items[i]
		if !isPoolInstance(gm, pool) {
			continue
		}
		left++
		if ref := ownerMachineRef(gm); ref != nil {
			m := &clusterv1.Machine{}
			err := c.Get(ctx, client.ObjectKey{Namespace: gm.Namespace, Name: ref.Name}, m)
			switch {
			case err == nil && m.UID == ref.UID:
				if m.DeletionTimestamp.IsZero() {
					if err := c.Delete(ctx, m, client.Preconditions{UID: &m.UID}); client.IgnoreNotFound(err) != nil {
						return false, fmt.Errorf("deleting Machine %s of pool instance %s: %w", klogRef(m), gm.Name, err)
					}
				}
				continue
			case err != nil && !apierrors.IsNotFound(err):
				return false, err
			}
		}
		// No Machine (yet, or any more): the instance goes directly.
		if gm.DeletionTimestamp.IsZero() {
			if err := c.Delete(ctx, gm, client.Preconditions{UID: &gm.UID}); client.IgnoreNotFound(err) != nil {
				return false, fmt.Errorf("deleting pool instance %s: %w", klogRef(gm), err)
			}
		}
	}
	return left == 0, nil
}
