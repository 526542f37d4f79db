package simulate

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// disruptionController is kube-controller-manager's disruption controller: it keeps every
// PodDisruptionBudget's status current (observedGeneration, currentHealthy, desiredHealthy,
// expectedPods, disruptionsAllowed, disruptedPods and the DisruptionAllowed condition), which the
// eviction subresource reads and consumes.
type disruptionController struct {
	c   *cluster
	idx int
}

// deletionTimeout is how long an eviction's entry in disruptedPods stands for a pod that has
// not begun terminating (upstream's DeletionTimeout).
const deletionTimeout = 2 * time.Minute

func newDisruptionController(c *cluster, idx int) *disruptionController {
	return &disruptionController{c: c, idx: idx}
}

func (d *disruptionController) resources() []schema.GroupResource {
	return []schema.GroupResource{pdbsGR, podsGR, replicaSetsGR, deploymentsGR}
}

func (d *disruptionController) observe(ch store.Change) {
	obj := changedObject(ch)
	if ch.Resource == pdbsGR {
		d.c.enqueue(d.idx, keyOf(obj))
		return
	}
	if ch.Resource != podsGR {
		// A controller's scale changes the expected pods of the budgets over its pods.
		if old, cur := ch.Old, ch.New; old != nil && cur != nil && specReplicas(old) == specReplicas(cur) {
			return
		}
	}
	for _, o := range d.c.cache.list(pdbsGR) {
		pdb := o.(*policyv1.PodDisruptionBudget)
		if pdb.Namespace != obj.GetNamespace() {
			continue
		}
		for _, x := range []client.Object{ch.Old, ch.New} {
			if x != nil && pdbSelects(pdb, x.GetLabels()) {
				d.c.enqueue(d.idx, keyOf(pdb))
				break
			}
		}
	}
}

func specReplicas(obj client.Object) int32 {
	switch o := obj.(type) {
	case *appsv1.ReplicaSet:
		return ptr.Deref(o.Spec.Replicas, 1)
	case *appsv1.Deployment:
		return ptr.Deref(o.Spec.Replicas, 1)
	}
	return 0
}

// pdbSelects: in policy/v1 an empty selector selects every pod of the namespace, a nil one none.
func pdbSelects(pdb *policyv1.PodDisruptionBudget, l map[string]string) bool {
	if pdb.Spec.Selector == nil {
		return false
	}
	sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	return err == nil && sel.Matches(labels.Set(l))
}

func (d *disruptionController) sync(ctx context.Context, key string) error {
	pdb, _ := d.c.cache.get(pdbsGR, key).(*policyv1.PodDisruptionBudget)
	if pdb == nil || pdb.DeletionTimestamp != nil {
		return nil
	}
	var pods []*corev1.Pod
	for _, p := range d.c.cache.podsIn(pdb.Namespace) {
		if pdbSelects(pdb, p.Labels) {
			pods = append(pods, p)
		}
	}
	now := time.Now()
	st := pdb.Status.DeepCopy()
	st.ObservedGeneration = pdb.Generation
	expected, desired, err := d.expectations(ctx, pdb, pods)
	disrupted, recheck := disruptedPods(pdb, pods, now)
	st.DisruptedPods = disrupted
	if err != nil {
		// As upstream's failSafe: nothing may be disrupted while the budget cannot be computed.
		st.DisruptionsAllowed = 0
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: policyv1.DisruptionAllowedCondition, Status: metav1.ConditionFalse,
			Reason: policyv1.SyncFailedReason, Message: err.Error(), ObservedGeneration: pdb.Generation})
	} else {
		var healthy int32
		for _, p := range pods {
			if p.DeletionTimestamp == nil && isReady(p) && !hasKey(disrupted, p.Name) {
				healthy++
			}
		}
		st.CurrentHealthy, st.DesiredHealthy, st.ExpectedPods = healthy, desired, expected
		st.DisruptionsAllowed = max(0, healthy-desired)
		if expected <= 0 {
			st.DisruptionsAllowed = 0
		}
		cond := metav1.Condition{Type: policyv1.DisruptionAllowedCondition, Status: metav1.ConditionTrue, Reason: policyv1.SufficientPodsReason, ObservedGeneration: pdb.Generation}
		if st.DisruptionsAllowed == 0 {
			cond.Status, cond.Reason = metav1.ConditionFalse, policyv1.InsufficientPodsReason
		}
		meta.SetStatusCondition(&st.Conditions, cond)
	}
	if recheck > 0 {
		d.c.after(recheck, d.idx, key)
	}
	if apiequality.Semantic.DeepEqual(st, &pdb.Status) {
		return nil
	}
	next := pdb.DeepCopy()
	next.Status = *st
	return d.c.client.Status().Update(ctx, next)
}

func hasKey(m map[string]metav1.Time, k string) bool { _, ok := m[k]; return ok }

// disruptedPods keeps the evictions still under way: pods that exist, have not begun
// terminating, and were evicted less than deletionTimeout ago.
func disruptedPods(pdb *policyv1.PodDisruptionBudget, pods []*corev1.Pod, now time.Time) (map[string]metav1.Time, time.Duration) {
	if len(pdb.Status.DisruptedPods) == 0 {
		return nil, 0
	}
	byName := map[string]*corev1.Pod{}
	for _, p := range pods {
		byName[p.Name] = p
	}
	out := map[string]metav1.Time{}
	var recheck time.Duration
	for name, at := range pdb.Status.DisruptedPods {
		p := byName[name]
		expires := at.Add(deletionTimeout)
		if p == nil || p.DeletionTimestamp != nil || !expires.After(now) {
			continue
		}
		out[name] = at
		if d := expires.Sub(now); recheck == 0 || d < recheck {
			recheck = d
		}
	}
	if len(out) == 0 {
		return nil, recheck
	}
	return out, recheck
}

// expectations are the pods the budget expects and how many must stay healthy, as upstream's
// getExpectedPodCount: minAvailable as a number counts the selected pods; a percentage or
// maxUnavailable counts the scale of the pods' controllers.
func (d *disruptionController) expectations(ctx context.Context, pdb *policyv1.PodDisruptionBudget, pods []*corev1.Pod) (expected, desired int32, err error) {
	if pdb.Spec.MaxUnavailable == nil && pdb.Spec.MinAvailable != nil && pdb.Spec.MinAvailable.Type == intstr.Int {
		return int32(len(pods)), pdb.Spec.MinAvailable.IntVal, nil
	}
	if expected, err = d.controllersScale(ctx, pods); err != nil {
		return 0, 0, err
	}
	if pdb.Spec.MaxUnavailable != nil {
		u, err := intstr.GetScaledValueFromIntOrPercent(pdb.Spec.MaxUnavailable, int(expected), true)
		if err != nil {
			return 0, 0, err
		}
		return expected, max(0, expected-int32(u)), nil
	}
	if pdb.Spec.MinAvailable != nil {
		m, err := intstr.GetScaledValueFromIntOrPercent(pdb.Spec.MinAvailable, int(expected), true)
		if err != nil {
			return 0, 0, err
		}
		return expected, int32(m), nil
	}
	return expected, 0, nil
}

// controllersScale sums the desired replicas of the controllers of the pods (a ReplicaSet's
// Deployment when it has one), each counted once.
func (d *disruptionController) controllersScale(ctx context.Context, pods []*corev1.Pod) (int32, error) {
	seen := map[types.UID]bool{}
	var total int32
	for _, p := range pods {
		ref := metav1.GetControllerOfNoCopy(p)
		if ref == nil {
			return 0, fmt.Errorf("found no controller ref for pod %q", p.Name)
		}
		if seen[ref.UID] {
			continue
		}
		seen[ref.UID] = true
		n, err := d.scaleOf(ctx, p.Namespace, ref)
		if err != nil {
			return 0, err
		}
		total += n
	}
	return total, nil
}

func (d *disruptionController) scaleOf(ctx context.Context, namespace string, ref *metav1.OwnerReference) (int32, error) {
	switch ref.Kind {
	case "ReplicaSet":
		rs, _ := d.c.cache.get(replicaSetsGR, namespace+"/"+ref.Name).(*appsv1.ReplicaSet)
		if rs == nil || rs.UID != ref.UID {
			return 0, fmt.Errorf("replicasets.apps %q not found", ref.Name)
		}
		if owner := metav1.GetControllerOfNoCopy(rs); owner != nil && owner.Kind == "Deployment" {
			if dep, _ := d.c.cache.get(deploymentsGR, namespace+"/"+owner.Name).(*appsv1.Deployment); dep != nil && dep.UID == owner.UID {
				return ptr.Deref(dep.Spec.Replicas, 1), nil
			}
		}
		return ptr.Deref(rs.Spec.Replicas, 1), nil
	case "StatefulSet":
		ss := &appsv1.StatefulSet{}
		if err := d.c.client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: ref.Name}, ss); err != nil {
			return 0, err
		}
		return ptr.Deref(ss.Spec.Replicas, 1), nil
	case "ReplicationController":
		rc := &corev1.ReplicationController{}
		if err := d.c.client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: ref.Name}, rc); err != nil {
			return 0, err
		}
		return ptr.Deref(rc.Spec.Replicas, 1), nil
	}
	return 0, fmt.Errorf("found no controllers for pod with controller %s %q", ref.Kind, ref.Name)
}
