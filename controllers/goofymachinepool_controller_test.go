package controllers

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/labels/format"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	infrav1 "github.com/goofy-capi/cluster-api-provider-goofy/api/v1alpha1"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/mux"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/testenv"
)

// The MachinePool tests create the MachinePool and its GoofyMachinePool as CAPI's MachinePool
// controller would, and play CAPI's part by hand (no CAPI controller runs in envtest): a Machine
// per instance GoofyMachine (MachinePool Machines), the Machine controller's controller reference
// on the instance, and the end of a Machine's deletion (the instance deleted, then the Machine's
// finalizer removed).

// poolFixture is one MachinePool with its GoofyMachinePool in a fixture's cluster.
type poolFixture struct {
	f    *fixture
	mp   *clusterv1.MachinePool
	pool *infrav1.GoofyMachinePool
	r    *GoofyMachinePoolReconciler
}

func newPool(t *testing.T, f *fixture, name string, replicas int32) *poolFixture {
	t.Helper()
	ctx := context.Background()
	mp := &clusterv1.MachinePool{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name, Labels: map[string]string{clusterv1.ClusterNameLabel: f.cluster.Name}},
		Spec: clusterv1.MachinePoolSpec{
			ClusterName: f.cluster.Name,
			Replicas:    ptr.To(replicas),
			Template: clusterv1.MachineTemplateSpec{Spec: clusterv1.MachineSpec{
				ClusterName: f.cluster.Name,
				Version:     kubernetesVersion,
				Bootstrap:   clusterv1.Bootstrap{DataSecretName: ptr.To(name + "-bootstrap")},
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{
					APIGroup: infrav1.GroupVersion.Group, Kind: "GoofyMachinePool", Name: name,
				},
			}},
		},
	}
	if err := k8sClient.Create(ctx, mp); err != nil {
		t.Fatal(err)
	}
	pool := &infrav1.GoofyMachinePool{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: f.ns, Name: name, Labels: map[string]string{clusterv1.ClusterNameLabel: f.cluster.Name},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(mp, clusterv1.GroupVersion.WithKind("MachinePool"))},
		},
	}
	if err := k8sClient.Create(ctx, pool); err != nil {
		t.Fatal(err)
	}
	return &poolFixture{f: f, mp: mp, pool: pool, r: &GoofyMachinePoolReconciler{Client: k8sClient}}
}

// reconcile reconciles the pool n times and reads it again (unless it is gone).
func (p *poolFixture) reconcile(t *testing.T, n int) {
	t.Helper()
	for range n {
		if _, err := p.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(p.pool)}); err != nil {
			t.Fatalf("reconciling GoofyMachinePool %s: %v", p.pool.Name, err)
		}
	}
	if err := k8sClient.Get(context.Background(), client.ObjectKeyFromObject(p.pool), p.pool); client.IgnoreNotFound(err) != nil {
		t.Fatal(err)
	}
}

func (p *poolFixture) setReplicas(t *testing.T, n int32) {
	t.Helper()
	get(t, p.mp)
	p.mp.Spec.Replicas = ptr.To(n)
	if err := k8sClient.Update(context.Background(), p.mp); err != nil {
		t.Fatal(err)
	}
}

// instances lists the GoofyMachines labelled as the pool's instances, by name.
func (p *poolFixture) instances(t *testing.T) []infrav1.GoofyMachine {
	t.Helper()
	list := &infrav1.GoofyMachineList{}
	if err := k8sClient.List(context.Background(), list, client.InNamespace(p.f.ns),
		client.MatchingLabels{infrav1.MachinePoolInstanceLabel: format.MustFormatValue(p.pool.Name)}); err != nil {
		t.Fatal(err)
	}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Name < list.Items[j].Name })
	return list.Items
}

func (p *poolFixture) machines(t *testing.T) []clusterv1.Machine {
	t.Helper()
	list := &clusterv1.MachineList{}
	if err := k8sClient.List(context.Background(), list, client.InNamespace(p.f.ns),
		client.MatchingLabels{clusterv1.MachinePoolNameLabel: format.MustFormatValue(p.mp.Name)}); err != nil {
		t.Fatal(err)
	}
	return list.Items
}

func names[T client.Object](objs []T) []string {
	var out []string
	for _, o := range objs {
		out = append(out, o.GetName())
	}
	sort.Strings(out)
	return out
}

func ptrs[T any](items []T) []*T {
	out := make([]*T, len(items))
	for i := range items {
		out[i] = &items[i]
	}
	return out
}

// playCAPI does what CAPI's controllers do with the pool's instances: the MachinePool controller
// creates a Machine named after each instance that has none (with the Machine finalizer, an empty
// bootstrap data secret name and no version, as CAPI does), the Machine controller makes the
// Machine the instance's controller, and a Machine being deleted loses its instance (after the
// GoofyMachine reconciler released it, when h is given) and then its finalizer.
func (p *poolFixture) playCAPI(t *testing.T, h *harness) {
	t.Helper()
	ctx := context.Background()
	for _, m := range ptrs(p.machines(t)) {
		if m.DeletionTimestamp.IsZero() {
			continue
		}
		gm := &infrav1.GoofyMachine{}
		err := k8sClient.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: m.Spec.InfrastructureRef.Name}, gm)
		if err == nil {
			if err := k8sClient.Delete(ctx, gm); err != nil {
				t.Fatal(err)
			}
			if h != nil && len(gm.Finalizers) > 0 {
				h.reconcileMachine(t, gm)
			}
		} else if !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		controllerutil.RemoveFinalizer(m, clusterv1.MachineFinalizer)
		if err := k8sClient.Update(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	for _, gm := range ptrs(p.instances(t)) {
		if ownerMachineRef(gm) != nil || !gm.DeletionTimestamp.IsZero() {
			continue
		}
		m := &clusterv1.Machine{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: gm.Namespace, Name: gm.Name,
				Labels: map[string]string{
					clusterv1.MachinePoolNameLabel: format.MustFormatValue(p.mp.Name), clusterv1.ClusterNameLabel: p.f.cluster.Name,
				},
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(p.mp, clusterv1.GroupVersion.WithKind("MachinePool"))},
				Finalizers:      []string{clusterv1.MachineFinalizer},
			},
			Spec: clusterv1.MachineSpec{
				ClusterName: p.f.cluster.Name,
				Bootstrap:   clusterv1.Bootstrap{DataSecretName: ptr.To("")},
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{
					APIGroup: infrav1.GroupVersion.Group, Kind: "GoofyMachine", Name: gm.Name,
				},
			},
		}
		if err := k8sClient.Create(ctx, m); err != nil {
			t.Fatal(err)
		}
		// CAPI's Machine controller sets itself as the instance's controller, which fails if
		// anything else (the pool) were the controller already.
		orig := gm.DeepCopy()
		if err := controllerutil.SetControllerReference(m, gm, testScheme); err != nil {
			t.Fatalf("CAPI's Machine controller cannot own instance %s: %v", gm.Name, err)
		}
		if err := k8sClient.Patch(ctx, gm, client.MergeFrom(orig)); err != nil {
			t.Fatal(err)
		}
	}
}

func providerIDs(gms []infrav1.GoofyMachine) []string {
	var ids []string
	for _, gm := range gms {
		ids = append(ids, gm.Spec.ProviderID)
	}
	sort.Strings(ids)
	return ids
}

func poolCondition(pool *infrav1.GoofyMachinePool, condType string) *metav1.Condition {
	for i := range pool.Status.Conditions {
		if pool.Status.Conditions[i].Type == condType {
			return &pool.Status.Conditions[i]
		}
	}
	return nil
}

// TestMachinePoolProvisionsOneInstancePerReplica: a MachinePool of 3 gets 3 instance GoofyMachines
// labelled and owned for CAPI's MachinePool Machines, a providerIDList of exactly their provider
// IDs, status.replicas 3 and provisioned; each instance, once CAPI made its Machine, is provisioned
// by the GoofyMachine reconciler into a Ready Node with the MachinePool's version, and the pool
// turns Ready.
func TestMachinePoolProvisionsOneInstancePerReplica(t *testing.T) {
	requireEnv(t)
	g := NewWithT(t)
	ctx := context.Background()
	h := newHarness(t)
	ns := newNamespace(t)
	f := newFixture(t, ns, "mp-cluster", nil)
	h.provisionCluster(t, f)
	get(t, f.cluster)
	f.cluster.Status.Initialization.ControlPlaneInitialized = ptr.To(true)
	g.Expect(k8sClient.Status().Update(ctx, f.cluster)).To(Succeed())

	p := newPool(t, f, "workers", 3)
	// A watch filter (sharded managers), the instance template.
	p.pool.Labels[clusterv1.WatchLabel] = "shard-a"
	p.pool.Spec.Template = infrav1.GoofyMachinePoolInstanceTemplate{
		ObjectMeta: clusterv1.ObjectMeta{Labels: map[string]string{"tier": "batch"}},
		Spec:       infrav1.GoofyMachinePoolInstanceSpec{Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4")}},
	}
	g.Expect(k8sClient.Update(ctx, p.pool)).To(Succeed())
	p.reconcile(t, 2) // the finalizer, then the instances
	g.Expect(p.pool.Finalizers).To(ContainElement(infrav1.MachinePoolFinalizer))
	instances := p.instances(t)
	g.Expect(instances).To(HaveLen(3))
	for _, gm := range instances {
		g.Expect(gm.Labels).To(HaveKeyWithValue(clusterv1.MachinePoolNameLabel, "workers"))
		g.Expect(gm.Labels).To(HaveKeyWithValue(clusterv1.ClusterNameLabel, "mp-cluster"))
		g.Expect(gm.Labels).To(HaveKeyWithValue(clusterv1.WatchLabel, "shard-a"))
		g.Expect(gm.Labels).To(HaveKeyWithValue("tier", "batch"))
		g.Expect(gm.Spec.Capacity.Cpu().String()).To(Equal("4"))
		g.Expect(gm.OwnerReferences).To(ConsistOf(And(
			HaveField("Kind", "GoofyMachinePool"), HaveField("Name", "workers"), HaveField("UID", p.pool.UID),
			HaveField("Controller", BeNil()))), "owned by the pool, which leaves the controller reference to CAPI's Machine")
		g.Expect(gm.Spec.ProviderID).To(Equal(fmt.Sprintf("goofy://%s/mp-cluster/%s", ns, gm.Name)))
		g.Expect(gm.Annotations).To(HaveKeyWithValue(infrav1.InstanceBootstrapDataAnnotation, "workers-bootstrap"))
	}
	g.Expect(p.pool.Spec.ProviderIDList).To(Equal(providerIDs(instances)))
	g.Expect(p.pool.Status.Replicas).To(Equal(ptr.To[int32](3)))
	g.Expect(p.pool.Status.Initialization.Provisioned).To(Equal(ptr.To(true)))
	g.Expect(p.pool.Status.Ready).To(BeTrue(), "status.ready, which CAPI v1.14's MachinePool controller reads")
	g.Expect(p.pool.Status.InfrastructureMachineKind).To(Equal("GoofyMachine"))
	g.Expect(p.pool.Status.Conditions).To(haveCondition(infrav1.InstancesReadyCondition, metav1.ConditionFalse, infrav1.InstancesNotReadyReason))
	g.Expect(p.pool.Status.Conditions).To(haveCondition(infrav1.ProviderIDsUniqueCondition, metav1.ConditionTrue, infrav1.NoProviderIDCollisionReason))

	// CAPI makes a Machine per instance; the GoofyMachine reconciler provisions each as a
	// worker bootstrapped by the pool, with the MachinePool's version (CAPI's Machine has none).
	p.playCAPI(t, h)
	// The store's own client: a cluster of workers alone serves no API server yet.
	wc, err := mustListener(t, h, f).GetClient()
	g.Expect(err).NotTo(HaveOccurred())
	for _, gm := range ptrs(p.instances(t)) {
		h.reconcileUntilReady(t, gm)
		node := &corev1.Node{}
		g.Expect(wc.Get(ctx, client.ObjectKey{Name: gm.Name}, node)).To(Succeed())
		g.Expect(node.Spec.ProviderID).To(Equal(gm.Spec.ProviderID))
		g.Expect(node.Status.NodeInfo.KubeletVersion).To(Equal(kubernetesVersion))
		g.Expect(node.Status.Capacity.Cpu().String()).To(Equal("4"))
	}
	p.reconcile(t, 1)
	g.Expect(p.pool.Status.ReadyReplicas).To(Equal(ptr.To[int32](3)))
	g.Expect(p.pool.Status.Conditions).To(haveCondition(infrav1.InstancesReadyCondition, metav1.ConditionTrue, infrav1.ReadyReason))
	g.Expect(p.pool.Status.Conditions).To(haveCondition(infrav1.ReadyCondition, metav1.ConditionTrue, infrav1.ReadyReason))
	// Nothing changes on a settled pool: no instance is created or deleted.
	g.Expect(names(ptrs(p.instances(t)))).To(Equal(names(ptrs(instances))))
}

// TestMachinePoolScalesUpAndDownThroughMachines: 3 → 5 creates two instances; 5 → 2 deletes the
// Machines of three (never the instances themselves): the one whose Machine has the
// delete-machine annotation (one of the newest) first, then the oldest. Until CAPI has deleted
// them, the pool deletes and creates nothing more; then providerIDList is the two left.
func TestMachinePoolScalesUpAndDownThroughMachines(t *testing.T) {
	requireEnv(t)
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	f := newFixture(t, ns, "scale", nil)
	p := newPool(t, f, "pool", 3)
	p.reconcile(t, 2)
	p.playCAPI(t, nil)
	// The first three, oldest first (their creation may straddle a second; then by name).
	firstGMs := p.instances(t)
	g.Expect(firstGMs).To(HaveLen(3))
	sort.SliceStable(firstGMs, func(i, j int) bool {
		return firstGMs[i].CreationTimestamp.Before(&firstGMs[j].CreationTimestamp)
	})
	var first []string
	for _, gm := range firstGMs {
		first = append(first, gm.Name)
	}

	time.Sleep(1100 * time.Millisecond) // creation timestamps have a resolution of a second
	p.setReplicas(t, 5)
	p.reconcile(t, 1)
	all := p.instances(t)
	g.Expect(all).To(HaveLen(5))
	g.Expect(p.pool.Spec.ProviderIDList).To(Equal(providerIDs(all)))
	g.Expect(p.pool.Status.Replicas).To(Equal(ptr.To[int32](5)))
	p.playCAPI(t, nil)
	var added []string
	for _, n := range names(ptrs(all)) { // by name
		if !slices.Contains(first, n) {
			added = append(added, n)
		}
	}
	g.Expect(added).To(HaveLen(2))

	// The cluster autoscaler (or a user) marks one of the newest for deletion.
	marked := &clusterv1.Machine{}
	g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: added[1]}, marked)).To(Succeed())
	marked.Annotations = map[string]string{clusterv1.DeleteMachineAnnotation: ""}
	g.Expect(k8sClient.Update(ctx, marked)).To(Succeed())

	p.setReplicas(t, 2)
	p.reconcile(t, 1)
	deleting := func() []string {
		var out []string
		for _, m := range p.machines(t) {
			if !m.DeletionTimestamp.IsZero() {
				out = append(out, m.Name)
			}
		}
		sort.Strings(out)
		return out
	}
	want := []string{first[0], first[1], added[1]} // the marked one, then the two oldest
	sort.Strings(want)
	g.Expect(deleting()).To(Equal(want))
	g.Expect(p.instances(t)).To(HaveLen(5), "the provider deletes Machines, not instances")
	g.Expect(p.pool.Status.Conditions).To(haveCondition(infrav1.InstancesReadyCondition, metav1.ConditionFalse, infrav1.ScalingDownReason))

	// While CAPI drains and deletes, the pool waits.
	p.reconcile(t, 2)
	g.Expect(deleting()).To(Equal(want))
	g.Expect(p.instances(t)).To(HaveLen(5))

	p.playCAPI(t, nil)
	p.reconcile(t, 1)
	left := p.instances(t)
	kept := []string{first[2], added[0]}
	sort.Strings(kept)
	g.Expect(names(ptrs(left))).To(Equal(kept))
	g.Expect(p.pool.Spec.ProviderIDList).To(Equal(providerIDs(left)))
	g.Expect(p.pool.Status.Replicas).To(Equal(ptr.To[int32](2)))
	g.Expect(p.machines(t)).To(HaveLen(2))
}

// TestMachinePoolDeletionDeletesInstances: deleting the pool deletes its instances' Machines
// (an instance CAPI made no Machine for yet goes directly) and keeps the finalizer until the last
// instance is gone.
func TestMachinePoolDeletionDeletesInstances(t *testing.T) {
	requireEnv(t)
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	f := newFixture(t, ns, "delete", nil)
	p := newPool(t, f, "pool", 3)
	p.reconcile(t, 2)
	p.playCAPI(t, nil)
	p.setReplicas(t, 4)
	p.reconcile(t, 1)
	g.Expect(p.instances(t)).To(HaveLen(4)) // one without a Machine yet

	g.Expect(k8sClient.Delete(ctx, p.pool)).To(Succeed())
	p.reconcile(t, 1)
	g.Expect(p.pool.Finalizers).To(ContainElement(infrav1.MachinePoolFinalizer))
	g.Expect(p.instances(t)).To(HaveLen(3))
	for _, m := range p.machines(t) {
		g.Expect(m.DeletionTimestamp.IsZero()).To(BeFalse(), "Machine %s not deleted", m.Name)
	}

	p.playCAPI(t, nil)
	g.Expect(p.instances(t)).To(BeEmpty())
	p.reconcile(t, 1)
	err := k8sClient.Get(ctx, client.ObjectKeyFromObject(p.pool), &infrav1.GoofyMachinePool{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the pool is gone once its instances are: %v", err)
}

// TestMachinePoolBadInput: a negative replica count, a provider ID another GoofyMachine claims and
// the Azure backend are reported in conditions; the pool does nothing it should not.
func TestMachinePoolBadInput(t *testing.T) {
	requireEnv(t)
	ctx := context.Background()

	t.Run("negative replicas", func(t *testing.T) {
		g := NewWithT(t)
		ns := newNamespace(t)
		f := newFixture(t, ns, "negative", nil)
		// CAPI's MachinePool schema refuses a negative replica count...
		p := newPool(t, f, "pool", 0)
		p.setReplicas(t, 0)
		p.mp.Spec.Replicas = ptr.To[int32](-1)
		err := k8sClient.Update(ctx, p.mp)
		g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		// ...and should one be read anyway (an older CAPI, a conversion), the pool neither
		// creates nor deletes anything and says why.
		w, err := client.NewWithWatch(cfg, client.Options{Scheme: testScheme})
		g.Expect(err).NotTo(HaveOccurred())
		p.r.Client = interceptor.NewClient(w, interceptor.Funcs{
			Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				err := c.Get(ctx, key, obj, opts...)
				if mp, ok := obj.(*clusterv1.MachinePool); ok && err == nil {
					mp.Spec.Replicas = ptr.To[int32](-1)
				}
				return err
			},
		})
		p.reconcile(t, 2)
		g.Expect(p.instances(t)).To(BeEmpty())
		g.Expect(p.pool.Status.Conditions).To(haveCondition(infrav1.InstancesReadyCondition, metav1.ConditionFalse, infrav1.InvalidReplicasReason))
		g.Expect(p.pool.Status.Conditions).To(haveCondition(infrav1.ReadyCondition, metav1.ConditionFalse, infrav1.InvalidReplicasReason))
		g.Expect(p.pool.Status.Initialization.Provisioned).To(BeNil())
	})

	t.Run("provider ID collision", func(t *testing.T) {
		g := NewWithT(t)
		ns := newNamespace(t)
		f := newFixture(t, ns, "collision", nil)
		p := newPool(t, f, "pool", 1)
		p.reconcile(t, 2)
		instance := p.instances(t)[0]
		g.Expect(p.pool.Spec.ProviderIDList).To(Equal([]string{instance.Spec.ProviderID}))

		decoy := &infrav1.GoofyMachine{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "decoy", Labels: map[string]string{clusterv1.ClusterNameLabel: "collision"}},
			Spec:       infrav1.GoofyMachineSpec{ProviderID: instance.Spec.ProviderID},
		}
		g.Expect(k8sClient.Create(ctx, decoy)).To(Succeed())
		p.reconcile(t, 1)
		g.Expect(p.pool.Spec.ProviderIDList).To(BeEmpty())
		g.Expect(p.pool.Status.Conditions).To(haveCondition(infrav1.ProviderIDsUniqueCondition, metav1.ConditionFalse, infrav1.ProviderIDCollisionReason))
		g.Expect(p.pool.Status.Conditions).To(haveCondition(infrav1.ReadyCondition, metav1.ConditionFalse, infrav1.ProviderIDCollisionReason))
		g.Expect(poolCondition(p.pool, infrav1.ProviderIDsUniqueCondition).Message).To(And(
			ContainSubstring(instance.Spec.ProviderID), ContainSubstring("decoy"), ContainSubstring(instance.Name)))
		g.Expect(p.instances(t)).To(HaveLen(1), "a collision creates no instance")

		g.Expect(k8sClient.Delete(ctx, decoy)).To(Succeed())
		p.reconcile(t, 1)
		g.Expect(p.pool.Spec.ProviderIDList).To(Equal([]string{instance.Spec.ProviderID}))
		g.Expect(p.pool.Status.Conditions).To(haveCondition(infrav1.ProviderIDsUniqueCondition, metav1.ConditionTrue, infrav1.NoProviderIDCollisionReason))
	})

	t.Run("Azure backend", func(t *testing.T) {
		g := NewWithT(t)
		ns := newNamespace(t)
		f := newFixture(t, ns, "azure", nil)
		get(t, f.gc)
		f.gc.Spec.Backend.Azure = &infrav1.AzureClusterBackend{SubscriptionID: "00000000-0000-0000-0000-000000000001", ResourceGroup: "rg", ClusterUID: "u"}
		f.gc.Spec.Backend.InMemory = nil
		g.Expect(k8sClient.Update(ctx, f.gc)).To(Succeed())
		p := newPool(t, f, "pool", 2)
		p.reconcile(t, 2)
		g.Expect(p.instances(t)).To(BeEmpty())
		g.Expect(p.pool.Status.Conditions).To(haveCondition(infrav1.InstancesReadyCondition, metav1.ConditionFalse, infrav1.BackendNotSupportedReason))
		g.Expect(p.pool.Status.Conditions).To(haveCondition(infrav1.ReadyCondition, metav1.ConditionFalse, infrav1.BackendNotSupportedReason))
	})
}

// TestPoolWatchesItsInstances: an instance's events reach its pool (owner reference), including
// its Ready transitions, which are status-only; other status writes of instances do not.
func TestPoolWatchesItsInstances(t *testing.T) {
	g := NewWithT(t)
	gm := &infrav1.GoofyMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pool-abcde", ResourceVersion: "1",
		OwnerReferences: []metav1.OwnerReference{
			{APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine", Name: "pool-abcde"},
			{APIVersion: infrav1.GroupVersion.String(), Kind: "GoofyMachinePool", Name: "pool"},
		}}}
	g.Expect(instanceToPool(context.Background(), gm)).To(ConsistOf(HaveField("NamespacedName", client.ObjectKey{Namespace: "ns", Name: "pool"})))
	g.Expect(instanceToPool(context.Background(), &infrav1.GoofyMachine{})).To(BeEmpty())

	update := func(mutate func(*infrav1.GoofyMachine)) bool {
		n := gm.DeepCopy()
		n.ResourceVersion = "2"
		mutate(n)
		return instanceChanged().Update(event.UpdateEvent{ObjectOld: gm, ObjectNew: n})
	}
	g.Expect(update(func(n *infrav1.GoofyMachine) {
		n.Status.Conditions = []metav1.Condition{{Type: infrav1.ReadyCondition, Status: metav1.ConditionTrue, Reason: infrav1.ReadyReason}}
	})).To(BeTrue(), "Ready transition")
	g.Expect(update(func(n *infrav1.GoofyMachine) {
		n.Status.Conditions = []metav1.Condition{{Type: infrav1.VMProvisionedCondition, Status: metav1.ConditionTrue, Reason: infrav1.ProvisionedReason}}
	})).To(BeFalse(), "other status writes")
	g.Expect(update(func(n *infrav1.GoofyMachine) { n.Finalizers = []string{infrav1.MachineFinalizer} })).To(BeTrue(), "metadata")
}

// TestMachinePoolWatches runs the pool and machine reconcilers in a manager (default sync period:
// 10 h, so only watch events move them): a new pool gets its instances, the instances' Ready
// transitions (status only) make the pool Ready, a change of the MachinePool's replicas
// scales it and a change of its version rolls it.
func TestMachinePoolWatches(t *testing.T) {
	requireEnv(t)
	g := NewWithT(t)
	ctx := context.Background()
	h := newHarness(t)
	ns := newNamespace(t)
	f := newFixture(t, ns, "watched", nil)
	h.provisionCluster(t, f)
	get(t, f.cluster)
	f.cluster.Status.Initialization.ControlPlaneInitialized = ptr.To(true)
	g.Expect(k8sClient.Status().Update(ctx, f.cluster)).To(Succeed())

	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 testScheme,
		Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}},
		Client:                 client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}},
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
	g.Expect(err).NotTo(HaveOccurred())
	poolR := &GoofyMachinePoolReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader()}
	g.Expect(poolR.SetupWithManager(ctx, mgr, controller.Options{})).To(Succeed())
	machineR := &GoofyMachineReconciler{Client: mgr.GetClient(), Mux: h.mux}
	g.Expect(machineR.SetupWithManager(ctx, mgr, controller.Options{})).To(Succeed())
	testenv.Go(t, mgr.Start)

	p := newPool(t, f, "pool", 2)
	p.r = poolR
	g.Eventually(func() []infrav1.GoofyMachine { return p.instances(t) }, wakeTimeout, 50*time.Millisecond).Should(HaveLen(2))
	p.playCAPI(t, nil)
	g.Eventually(func() *metav1.Condition {
		get(t, p.pool)
		return poolCondition(p.pool, infrav1.ReadyCondition)
	}, wakeTimeout, 50*time.Millisecond).Should(And(Not(BeNil()), HaveField("Status", metav1.ConditionTrue)))
	g.Expect(p.pool.Status.ReadyReplicas).To(Equal(ptr.To[int32](2)))

	p.setReplicas(t, 3)
	g.Eventually(func() []infrav1.GoofyMachine { return p.instances(t) }, wakeTimeout, 50*time.Millisecond).Should(HaveLen(3))
	g.Expect(p.instances(t)).To(HaveLen(3), "no more than the replicas, whatever the cache saw")

	// A version bump rolls the pool on watch events alone: the MachinePool's update, then each
	// instance's Ready transition and deletion (CAPI's part played by hand).
	before := names(ptrs(p.instances(t)))
	get(t, p.mp)
	p.mp.Spec.Template.Spec.Version = "v1.36.4"
	g.Expect(k8sClient.Update(ctx, p.mp)).To(Succeed())
	g.Eventually(func(g Gomega) {
		p.playCAPI(t, nil)
		instances := p.instances(t)
		g.Expect(instances).To(HaveLen(3))
		for _, gm := range instances {
			g.Expect(before).NotTo(ContainElement(gm.Name))
			g.Expect(gm.Annotations).To(HaveKeyWithValue(infrav1.InstanceKubernetesVersionAnnotation, "v1.36.4"))
		}
		get(t, p.pool)
		g.Expect(p.pool.Status.Conditions).To(haveCondition(infrav1.RollingOutCondition, metav1.ConditionFalse, infrav1.NotRollingOutReason))
		g.Expect(p.pool.Status.Conditions).To(haveCondition(infrav1.ReadyCondition, metav1.ConditionTrue, infrav1.ReadyReason))
	}, wakeTimeout, 50*time.Millisecond).Should(Succeed())
}

// markReady sets the Ready condition of the pool's instances (all those not Ready yet), as the
// GoofyMachine reconciler does once their nodes are Ready.
func (p *poolFixture) markReady(t *testing.T) {
	t.Helper()
	for _, gm := range ptrs(p.instances(t)) {
		if !gm.DeletionTimestamp.IsZero() || instanceIs(gm, infrav1.ReadyCondition) {
			continue
		}
		gm.Status.Conditions = append(gm.Status.Conditions, metav1.Condition{Type: infrav1.ReadyCondition, Status: metav1.ConditionTrue,
			Reason: infrav1.ReadyReason, LastTransitionTime: metav1.Now()})
		if err := k8sClient.Status().Update(context.Background(), gm); err != nil {
			t.Fatal(err)
		}
	}
}

func instanceIs(gm *infrav1.GoofyMachine, condType string) bool {
	c := condition(gm, condType)
	return c != nil && c.Status == metav1.ConditionTrue
}

// poolCount is what the pool has: instances not leaving (neither they nor their Machine being
// deleted), of them those Ready, those made from the old template hash and the others.
type poolCount struct{ active, ready, old, new int }

func (p *poolFixture) count(t *testing.T, old string) poolCount {
	t.Helper()
	machines := map[string]clusterv1.Machine{}
	for _, m := range p.machines(t) {
		machines[m.Name] = m
	}
	var c poolCount
	for _, gm := range ptrs(p.instances(t)) {
		m, hasMachine := machines[gm.Name]
		if !gm.DeletionTimestamp.IsZero() || (hasMachine && !m.DeletionTimestamp.IsZero()) {
			continue
		}
		c.active++
		if instanceIs(gm, infrav1.ReadyCondition) {
			c.ready++
		}
		if gm.Annotations[infrav1.InstanceTemplateHashAnnotation] == old {
			c.old++
		} else {
			c.new++
		}
	}
	return c
}

// hashOf is the template hash the pool's instances carry now (all the same: a settled pool).
func (p *poolFixture) hashOf(t *testing.T) string {
	t.Helper()
	hashes := map[string]bool{}
	for _, gm := range p.instances(t) {
		hashes[gm.Annotations[infrav1.InstanceTemplateHashAnnotation]] = true
	}
	if len(hashes) != 1 {
		t.Fatalf("the pool's instances carry %d template hashes: %v", len(hashes), hashes)
	}
	for h := range hashes {
		return h
	}
	return ""
}

// settledPool is a pool of n Ready instances with their Machines.
func settledPool(t *testing.T, name string, n int32, mutate func(*infrav1.GoofyMachinePool)) *poolFixture {
	t.Helper()
	f := newFixture(t, newNamespace(t), name, nil)
	p := newPool(t, f, "pool", n)
	if mutate != nil {
		mutate(p.pool)
		if err := k8sClient.Update(context.Background(), p.pool); err != nil {
			t.Fatal(err)
		}
	}
	p.reconcile(t, 2)
	p.playCAPI(t, nil)
	p.markReady(t)
	p.reconcile(t, 1)
	return p
}

// rollUntilDone plays CAPI (Machines for new instances, deletions finished) and the GoofyMachine
// reconciler (new instances Ready) between reconciles of the pool until no instance is out of
// date, checking after every reconcile that the pool has at most desired+maxSurge instances and
// at least desired-maxUnavailable Ready ones. It returns the number of reconciles.
func (p *poolFixture) rollUntilDone(t *testing.T, desired, surge, unavailable int, old string) int {
	t.Helper()
	g := NewWithT(t)
	for i := 1; i <= 20; i++ {
		p.reconcile(t, 1)
		c := p.count(t, old)
		total := c.active
		g.Expect(total).To(BeNumerically("<=", desired+surge), "reconcile %d: more instances than replicas + maxSurge", i)
		g.Expect(c.ready).To(BeNumerically(">=", desired-unavailable), "reconcile %d: fewer Ready instances than replicas - maxUnavailable", i)
		p.playCAPI(t, nil)
		if c.old == 0 && total == desired { // no instance with the old hash is left
			return i
		}
		p.markReady(t)
	}
	t.Fatalf("instances of the old template are left after 20 reconciles: %+v", p.count(t, old))
	return 0
}

// TestMachinePoolRollingUpdate: a version bump of the MachinePool makes every instance out of
// date. With the default strategy (maxSurge 1, maxUnavailable 0) the pool first adds one new
// instance and deletes no Machine until it is Ready; then it deletes the Machine marked
// cluster.x-k8s.io/delete-machine first (not the oldest), and so on, never above 4 instances nor
// below 3 Ready ones, until the 3 instances are new: their version annotation and hash are the
// current ones, RollingOut is False and upToDateReplicas 3.
func TestMachinePoolRollingUpdate(t *testing.T) {
	requireEnv(t)
	g := NewWithT(t)
	ctx := context.Background()
	p := settledPool(t, "roll", 3, nil)
	g.Expect(p.pool.Status.Conditions).To(haveCondition(infrav1.RollingOutCondition, metav1.ConditionFalse, infrav1.NotRollingOutReason))
	g.Expect(p.pool.Status.UpToDateReplicas).To(Equal(ptr.To[int32](3)))
	old := p.hashOf(t)
	first := p.instances(t)
	sort.SliceStable(first, func(i, j int) bool { return first[i].CreationTimestamp.Before(&first[j].CreationTimestamp) })
	// The newest of the old instances is marked for deletion.
	marked := &clusterv1.Machine{}
	g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: p.f.ns, Name: first[2].Name}, marked)).To(Succeed())
	marked.Annotations = map[string]string{clusterv1.DeleteMachineAnnotation: ""}
	g.Expect(k8sClient.Update(ctx, marked)).To(Succeed())

	// Nothing changed: nothing rolls.
	p.reconcile(t, 1)
	g.Expect(p.count(t, old)).To(Equal(poolCount{active: 3, ready: 3, old: 3}))

	get(t, p.mp)
	p.mp.Spec.Template.Spec.Version = "v1.36.4"
	g.Expect(k8sClient.Update(ctx, p.mp)).To(Succeed())
	p.reconcile(t, 1)
	g.Expect(p.count(t, old)).To(Equal(poolCount{active: 4, ready: 3, old: 3, new: 1}), "one new instance (maxSurge 1), no Machine deleted")
	g.Expect(p.pool.Status.Conditions).To(haveCondition(infrav1.RollingOutCondition, metav1.ConditionTrue, infrav1.RollingUpdateInProgressReason))
	g.Expect(p.pool.Status.Conditions).To(haveCondition(infrav1.InstancesReadyCondition, metav1.ConditionFalse, infrav1.RollingUpdateInProgressReason))
	g.Expect(p.pool.Status.Conditions).To(haveCondition(infrav1.ReadyCondition, metav1.ConditionFalse, infrav1.RollingUpdateInProgressReason))
	g.Expect(p.pool.Status.UpToDateReplicas).To(Equal(ptr.To[int32](1)))
	g.Expect(p.pool.Status.Replicas).To(Equal(ptr.To[int32](4)))
	// While the new instance is not Ready, no old one goes and no other comes.
	p.playCAPI(t, nil)
	p.reconcile(t, 2)
	g.Expect(p.count(t, old)).To(Equal(poolCount{active: 4, ready: 3, old: 3, new: 1}))
	for _, m := range p.machines(t) {
		g.Expect(m.DeletionTimestamp.IsZero()).To(BeTrue(), "Machine %s deleted before the new instance was Ready", m.Name)
	}

	p.markReady(t)
	p.reconcile(t, 1)
	var deleting []string
	for _, m := range p.machines(t) {
		if !m.DeletionTimestamp.IsZero() {
			deleting = append(deleting, m.Name)
		}
	}
	g.Expect(deleting).To(Equal([]string{marked.Name}), "the Machine marked for deletion goes first")
	g.Expect(p.count(t, old)).To(Equal(poolCount{active: 4, ready: 3, old: 2, new: 2}), "and the next new instance comes")

	p.rollUntilDone(t, 3, 1, 0, old)
	p.markReady(t)
	p.reconcile(t, 1)
	instances := p.instances(t)
	g.Expect(instances).To(HaveLen(3))
	for _, gm := range instances {
		g.Expect(names(ptrs(first))).NotTo(ContainElement(gm.Name))
		g.Expect(gm.Annotations).To(HaveKeyWithValue(infrav1.InstanceKubernetesVersionAnnotation, "v1.36.4"))
		g.Expect(gm.Annotations[infrav1.InstanceTemplateHashAnnotation]).NotTo(Equal(old))
	}
	g.Expect(p.pool.Status.UpToDateReplicas).To(Equal(ptr.To[int32](3)))
	g.Expect(p.pool.Status.ReadyReplicas).To(Equal(ptr.To[int32](3)))
	g.Expect(p.pool.Spec.ProviderIDList).To(Equal(providerIDs(instances)))
	g.Expect(p.pool.Status.Conditions).To(haveCondition(infrav1.RollingOutCondition, metav1.ConditionFalse, infrav1.NotRollingOutReason))
	g.Expect(p.pool.Status.Conditions).To(haveCondition(infrav1.ReadyCondition, metav1.ConditionTrue, infrav1.ReadyReason))
}

// TestMachinePoolRollingUpdateBounds: the strategy's bounds hold for other values and for
// percentages, and a change of the instance template, of the bootstrap data or of the bootstrap
// config reference rolls as a version bump does; spec.simulation (faults) does not.
func TestMachinePoolRollingUpdateBounds(t *testing.T) {
	requireEnv(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name                  string
		replicas              int32
		surge, unavailable    intstr.IntOrString
		wantSurge, wantUnav   int
		change                func(*poolFixture)
		firstActive, firstOld int // after the first reconcile of the change
	}{
		{name: "surge-0-unavailable-50pct", replicas: 2, surge: intstr.FromInt32(0), unavailable: intstr.FromString("50%"), wantSurge: 0, wantUnav: 1,
			change: func(p *poolFixture) {
				get(t, p.pool)
				p.pool.Spec.Template.Spec.Capacity = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8")}
				if err := k8sClient.Update(ctx, p.pool); err != nil {
					t.Fatal(err)
				}
			},
			firstActive: 2, firstOld: 1},
		{name: "surge-100pct", replicas: 2, surge: intstr.FromString("100%"), unavailable: intstr.FromInt32(0), wantSurge: 2, wantUnav: 0,
			change: func(p *poolFixture) {
				get(t, p.mp)
				p.mp.Spec.Template.Spec.Bootstrap.DataSecretName = ptr.To("pool-bootstrap-2")
				if err := k8sClient.Update(ctx, p.mp); err != nil {
					t.Fatal(err)
				}
			},
			firstActive: 4, firstOld: 2},
		{name: "surge-1-unavailable-1-of-4", replicas: 4, surge: intstr.FromInt32(1), unavailable: intstr.FromInt32(1), wantSurge: 1, wantUnav: 1,
			change: func(p *poolFixture) {
				get(t, p.mp)
				p.mp.Spec.Template.Spec.Bootstrap.ConfigRef = clusterv1.ContractVersionedObjectReference{
					APIGroup: "bootstrap.cluster.x-k8s.io", Kind: "KubeadmConfig", Name: "pool-2"}
				if err := k8sClient.Update(ctx, p.mp); err != nil {
					t.Fatal(err)
				}
			},
			firstActive: 5, firstOld: 3}, // one Machine deleted, two created
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			p := settledPool(t, "bounds", tc.replicas, func(pool *infrav1.GoofyMachinePool) {
				pool.Spec.Strategy.RollingUpdate = &infrav1.MachinePoolRollingUpdate{MaxSurge: &tc.surge, MaxUnavailable: &tc.unavailable}
			})
			old := p.hashOf(t)

			// Faults are not the template: no instance is replaced.
			get(t, p.pool)
			p.pool.Spec.Simulation = &infrav1.MachineSimulation{NodeNotReady: true}
			g.Expect(k8sClient.Update(ctx, p.pool)).To(Succeed())
			p.reconcile(t, 1)
			g.Expect(p.count(t, old)).To(Equal(poolCount{active: int(tc.replicas), ready: int(tc.replicas), old: int(tc.replicas)}))

			tc.change(p)
			p.reconcile(t, 1)
			c := p.count(t, old)
			g.Expect(c.active).To(Equal(tc.firstActive), "%+v", c)
			g.Expect(c.old).To(Equal(tc.firstOld), "old instances left: %+v", c)
			p.playCAPI(t, nil)
			p.markReady(t)
			p.rollUntilDone(t, int(tc.replicas), tc.wantSurge, tc.wantUnav, old)
			g.Expect(p.count(t, old).active).To(Equal(int(tc.replicas)))
		})
	}
}

// TestMachinePoolRollingUpdateAfterRestart: what an instance was made from is on the instance,
// so a reconciler that starts afresh (a manager restart) finds the same instances up to date
// (it replaces none) and, after a change made while no manager ran, the same ones out of date.
func TestMachinePoolRollingUpdateAfterRestart(t *testing.T) {
	requireEnv(t)
	g := NewWithT(t)
	ctx := context.Background()
	p := settledPool(t, "restart", 2, nil)
	old := p.hashOf(t)
	before := names(ptrs(p.instances(t)))

	p.r = &GoofyMachinePoolReconciler{Client: k8sClient} // a new process
	p.reconcile(t, 2)
	g.Expect(names(ptrs(p.instances(t)))).To(Equal(before), "a restart replaces nothing")
	g.Expect(p.pool.Status.Conditions).To(haveCondition(infrav1.RollingOutCondition, metav1.ConditionFalse, infrav1.NotRollingOutReason))

	get(t, p.pool)
	p.pool.Spec.Template.ObjectMeta.Labels = map[string]string{"generation": "2"}
	g.Expect(k8sClient.Update(ctx, p.pool)).To(Succeed())
	p.r = &GoofyMachinePoolReconciler{Client: k8sClient} // started after the change
	p.reconcile(t, 1)
	g.Expect(p.count(t, old)).To(Equal(poolCount{active: 3, ready: 2, old: 2, new: 1}))
	g.Expect(p.pool.Status.Conditions).To(haveCondition(infrav1.RollingOutCondition, metav1.ConditionTrue, infrav1.RollingUpdateInProgressReason))
	p.playCAPI(t, nil)
	p.markReady(t)
	p.r = &GoofyMachinePoolReconciler{Client: k8sClient} // and again in the middle of the update
	p.rollUntilDone(t, 2, 1, 0, old)
	for _, gm := range p.instances(t) {
		g.Expect(gm.Labels).To(HaveKeyWithValue("generation", "2"))
	}
}

// TestMachinePoolInvalidStrategy: a maxSurge that is no percentage replaces nothing and says so.
func TestMachinePoolInvalidStrategy(t *testing.T) {
	requireEnv(t)
	g := NewWithT(t)
	ctx := context.Background()
	p := settledPool(t, "invalid", 2, nil)
	old := p.hashOf(t)
	get(t, p.pool)
	p.pool.Spec.Strategy.RollingUpdate = &infrav1.MachinePoolRollingUpdate{MaxSurge: ptr.To(intstr.FromString("lots"))}
	g.Expect(k8sClient.Update(ctx, p.pool)).To(Succeed())
	get(t, p.mp)
	p.mp.Spec.Template.Spec.Version = "v1.36.4"
	g.Expect(k8sClient.Update(ctx, p.mp)).To(Succeed())
	p.reconcile(t, 2)
	g.Expect(p.count(t, old)).To(Equal(poolCount{active: 2, ready: 2, old: 2}))
	g.Expect(p.pool.Status.Conditions).To(haveCondition(infrav1.RollingOutCondition, metav1.ConditionFalse, infrav1.InvalidStrategyReason))
	g.Expect(p.pool.Status.Conditions).To(haveCondition(infrav1.InstancesReadyCondition, metav1.ConditionFalse, infrav1.InvalidStrategyReason))
	g.Expect(poolCondition(p.pool, infrav1.RollingOutCondition).Message).To(ContainSubstring(`maxSurge "lots"`))
}

// TestMachinePoolFaults: a pool's spec.simulation applies to every instance that has no
// spec.simulation of its own (their Nodes NotReady, FaultsInjected naming the pool, counted per
// instance in goofy_faults_active); an instance's own spec.simulation overrides it (simulation: {}
// exempts it); the pool reports its faults in FaultsInjected and events, is reconciled again when
// the first ends, and changing them replaces no instance.
func TestMachinePoolFaults(t *testing.T) {
	requireEnv(t)
	g := NewWithT(t)
	ctx := context.Background()
	h := newHarness(t)
	rec := events.NewFakeRecorder(50)
	h.machineR.recorder = rec
	f := newFixture(t, newNamespace(t), "faulty-pool", nil)
	h.provisionCluster(t, f)
	get(t, f.cluster)
	f.cluster.Status.Initialization.ControlPlaneInitialized = ptr.To(true)
	g.Expect(k8sClient.Status().Update(ctx, f.cluster)).To(Succeed())
	p := newPool(t, f, "pool", 2)
	p.r.Clock, p.r.recorder = h.clock, rec
	p.reconcile(t, 2)
	p.playCAPI(t, h)
	instances := ptrs(p.instances(t))
	for _, gm := range instances {
		h.reconcileUntilReady(t, gm)
	}
	p.reconcile(t, 1)
	g.Expect(conditions.Get(p.pool, infrav1.FaultsInjectedCondition)).To(BeNil(), "no condition on a pool that never had a fault")
	drain(rec)
	wc, err := mustListener(t, h, f).GetClient()
	g.Expect(err).NotTo(HaveOccurred())
	nodeReady := func(gm *infrav1.GoofyMachine) corev1.ConditionStatus {
		node := &corev1.Node{}
		g.Expect(wc.Get(ctx, client.ObjectKey{Name: gm.Name}, node)).To(Succeed())
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status
			}
		}
		return ""
	}
	reconcileAll := func() {
		for _, gm := range instances {
			h.reconcileMachine(t, gm)
			get(t, gm)
		}
	}
	before := names(instances)
	gauge := faultGauge(mux.KindNodeNotReady)

	until := metav1.NewTime(h.clock.Now().Add(time.Minute))
	get(t, p.pool)
	p.pool.Spec.Simulation = &infrav1.MachineSimulation{NodeNotReady: true, NodeNotReadyUntil: &until}
	g.Expect(k8sClient.Update(ctx, p.pool)).To(Succeed())
	res, err := p.r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(p.pool)})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.RequeueAfter).To(BeNumerically("~", time.Minute, time.Second), "reconciled again when the fault ends")
	get(t, p.pool)
	g.Expect(p.pool.Status.Conditions).To(haveCondition(infrav1.FaultsInjectedCondition, metav1.ConditionTrue, infrav1.FaultsActiveReason))
	g.Expect(conditions.Get(p.pool, infrav1.FaultsInjectedCondition).Message).To(Equal("nodeNotReady"))
	g.Expect(drain(rec)).To(ConsistOf(And(ContainSubstring("FaultsInjected"), ContainSubstring("nodeNotReady"))))
	g.Expect(faultGauge(mux.KindNodeNotReady)).To(Equal(gauge), "the pool itself is not counted, its instances are")

	reconcileAll()
	for _, gm := range instances {
		g.Expect(nodeReady(gm)).To(Equal(corev1.ConditionFalse), gm.Name)
		g.Expect(gm.Status.Conditions).To(haveCondition(infrav1.FaultsInjectedCondition, metav1.ConditionTrue, infrav1.FaultsActiveReason))
		g.Expect(conditions.Get(gm, infrav1.FaultsInjectedCondition).Message).To(Equal("nodeNotReady (GoofyMachinePool pool)"))
	}
	g.Expect(faultGauge(mux.KindNodeNotReady)).To(Equal(gauge + 2))
	g.Expect(drain(rec)).To(HaveLen(2))

	// One instance is exempted by its own (empty) spec.simulation.
	get(t, instances[1])
	instances[1].Spec.Simulation = &infrav1.MachineSimulation{}
	g.Expect(k8sClient.Update(ctx, instances[1])).To(Succeed())
	reconcileAll()
	g.Expect(nodeReady(instances[0])).To(Equal(corev1.ConditionFalse))
	g.Expect(nodeReady(instances[1])).To(Equal(corev1.ConditionTrue))
	g.Expect(instances[1].Status.Conditions).To(haveCondition(infrav1.FaultsInjectedCondition, metav1.ConditionFalse, infrav1.NoFaultsReason))
	g.Expect(faultGauge(mux.KindNodeNotReady)).To(Equal(gauge + 1))

	// The fault ends by itself.
	h.clock.Step(time.Minute + time.Second)
	reconcileAll()
	p.reconcile(t, 1)
	g.Expect(nodeReady(instances[0])).To(Equal(corev1.ConditionTrue))
	g.Expect(instances[0].Status.Conditions).To(haveCondition(infrav1.FaultsInjectedCondition, metav1.ConditionFalse, infrav1.NoFaultsReason))
	g.Expect(p.pool.Status.Conditions).To(haveCondition(infrav1.FaultsInjectedCondition, metav1.ConditionFalse, infrav1.NoFaultsReason))
	g.Expect(drain(rec)).To(ContainElement(ContainSubstring("FaultsCleared")))
	g.Expect(faultGauge(mux.KindNodeNotReady)).To(Equal(gauge))
	g.Expect(names(ptrs(p.instances(t)))).To(Equal(before), "faults replace no instance")
	g.Expect(p.pool.Status.Conditions).To(haveCondition(infrav1.RollingOutCondition, metav1.ConditionFalse, infrav1.NotRollingOutReason))
}

// TestPoolFaultsReachInstances: a change of a pool's spec.simulation, and nothing else of it,
// wakes the GoofyMachine reconciler for each of the pool's instances (not another pool's).
func TestPoolFaultsReachInstances(t *testing.T) {
	requireEnv(t)
	g := NewWithT(t)
	f := newFixture(t, newNamespace(t), "fault-watch", nil)
	p := newPool(t, f, "pool", 2)
	p.reconcile(t, 2)
	other := newPool(t, f, "other", 1)
	other.reconcile(t, 2)
	var want []string
	for _, gm := range p.instances(t) {
		want = append(want, gm.Name)
	}
	var got []string
	for _, req := range poolToInstances(k8sClient)(context.Background(), p.pool) {
		got = append(got, req.Name)
	}
	sort.Strings(got)
	g.Expect(got).To(Equal(want))

	update := func(mutate func(*infrav1.GoofyMachinePool)) bool {
		n := p.pool.DeepCopy()
		mutate(n)
		return poolSimulationChanged().Update(event.UpdateEvent{ObjectOld: p.pool, ObjectNew: n})
	}
	g.Expect(update(func(n *infrav1.GoofyMachinePool) { n.Spec.Simulation = &infrav1.MachineSimulation{VMFailed: true} })).To(BeTrue())
	g.Expect(update(func(n *infrav1.GoofyMachinePool) { n.Spec.DeletePolicy = infrav1.DeletePolicyNewest })).To(BeFalse())
	g.Expect(update(func(n *infrav1.GoofyMachinePool) { n.Status.Replicas = ptr.To[int32](7) })).To(BeFalse())
}

// TestMachinePoolConfigRefChangeRollsOnce: after a change of the MachinePool's bootstrap
// configRef, CAPI keeps the old config's dataSecretName until the new config's secret exists. The
// pool waits (RollingOut True, saying why; no instance made or removed) while the data secret is,
// by its owner reference, the old KubeadmConfig's, and rolls once, to the new data, when CAPI
// names the new secret: every instance is replaced exactly once.
func TestMachinePoolConfigRefChangeRollsOnce(t *testing.T) {
	requireEnv(t)
	g := NewWithT(t)
	ctx := context.Background()
	const surge = 2
	p := settledPool(t, "cfgref", 2, func(pool *infrav1.GoofyMachinePool) {
		pool.Spec.Strategy.RollingUpdate = &infrav1.MachinePoolRollingUpdate{MaxSurge: ptr.To(intstr.FromInt32(surge))}
	})
	configSecret := func(config string) string {
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: p.f.ns, Name: config,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "bootstrap.cluster.x-k8s.io/v1beta2", Kind: "KubeadmConfig",
				Name: config, UID: types.UID("uid-" + config), Controller: ptr.To(true)}}},
			Data: map[string][]byte{"value": []byte("#cloud-config\n"), "format": []byte("cloud-config")}}
		g.Expect(k8sClient.Create(ctx, secret)).To(Succeed())
		return config
	}
	setBootstrap := func(config string, secret *string) {
		get(t, p.mp)
		p.mp.Spec.Template.Spec.Bootstrap.ConfigRef = clusterv1.ContractVersionedObjectReference{
			APIGroup: "bootstrap.cluster.x-k8s.io", Kind: "KubeadmConfig", Name: config}
		if secret != nil {
			p.mp.Spec.Template.Spec.Bootstrap.DataSecretName = secret
		}
		g.Expect(k8sClient.Update(ctx, p.mp)).To(Succeed())
	}

	// The pool on KubeadmConfig cfg-a, its secret named: one roll to it, as any bootstrap change.
	setBootstrap("cfg-a", ptr.To(configSecret("cfg-a")))
	p.rollUntilDone(t, 2, surge, 0, p.hashOf(t))
	onA := p.hashOf(t)
	created := map[string]bool{}
	for _, gm := range p.instances(t) {
		created[gm.Name] = true
	}

	// configRef to cfg-b; CAPI still names cfg-a's secret: nothing is replaced, for a while.
	setBootstrap("cfg-b", nil)
	for range 3 {
		p.reconcile(t, 1)
		g.Expect(p.count(t, onA)).To(Equal(poolCount{active: 2, ready: 2, old: 2}), "instances while cfg-b has no secret")
	}
	rolling := conditions.Get(p.pool, infrav1.RollingOutCondition)
	g.Expect(rolling).NotTo(BeNil())
	g.Expect(rolling.Status).To(Equal(metav1.ConditionTrue))
	g.Expect(rolling.Message).To(ContainSubstring("waiting for the bootstrap data of KubeadmConfig cfg-b"))
	g.Expect(rolling.Message).To(ContainSubstring("KubeadmConfig cfg-a's"))

	// CABPK made cfg-b's secret and CAPI names it: one roll.
	setBootstrap("cfg-b", ptr.To(configSecret("cfg-b")))
	p.rollUntilDone(t, 2, surge, 0, onA)
	onB := p.hashOf(t)
	for _, gm := range p.instances(t) {
		g.Expect(created).NotTo(HaveKey(gm.Name), "instance %s is one made before the change", gm.Name)
		created[gm.Name] = true
	}
	g.Expect(created).To(HaveLen(4), "two instances on cfg-a, two on cfg-b, none in between")
	p.reconcile(t, 2)
	g.Expect(p.count(t, onB)).To(Equal(poolCount{active: 2, ready: 2, old: 2}), "the pool is settled on cfg-b")
	g.Expect(p.pool.Status.Conditions).To(haveCondition(infrav1.RollingOutCondition, metav1.ConditionFalse, infrav1.NotRollingOutReason))
}
