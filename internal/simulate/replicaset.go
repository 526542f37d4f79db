package simulate

import (
	"context"
	"encoding/json"
	"sort"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// replicaSetController is kube-controller-manager's ReplicaSet controller: it keeps
// spec.replicas active pods of the template (adopting matching orphans, releasing pods that no
// longer match), creates at most burstReplicas per sync in slow-start batches, deletes the
// excess as upstream ranks pods, and reports the counts in status.
type replicaSetController struct {
	c   *cluster
	idx int
}

// burstReplicas bounds the pods one sync creates or deletes (kube-controller-manager's 500).
const burstReplicas = 500

func newReplicaSetController(c *cluster, idx int) *replicaSetController {
	return &replicaSetController{c: c, idx: idx}
}

func (r *replicaSetController) resources() []schema.GroupResource {
	return []schema.GroupResource{replicaSetsGR, podsGR}
}

func (r *replicaSetController) observe(ch store.Change) {
	if ch.Resource == replicaSetsGR {
		obj := ch.New
		if obj == nil {
			obj = ch.Old
		}
		r.c.enqueue(r.idx, keyOf(obj))
		return
	}
	// A pod change concerns its controller, and an orphan the sets that may adopt it.
	for _, obj := range []client.Object{ch.Old, ch.New} {
		pod, _ := obj.(*corev1.Pod)
		if pod == nil {
			continue
		}
		if ref := metav1.GetControllerOfNoCopy(pod); ref != nil {
			if ref.Kind == "ReplicaSet" {
				r.c.enqueue(r.idx, pod.Namespace+"/"+ref.Name)
			}
			continue
		}
		if pod.DeletionTimestamp != nil || ch.New == nil {
			continue
		}
		for _, obj := range r.c.cache.list(replicaSetsGR) {
			rs := obj.(*appsv1.ReplicaSet)
			if rs.Namespace == pod.Namespace && selects(rs.Spec.Selector, pod.Labels) {
				r.c.enqueue(r.idx, keyOf(rs))
			}
		}
	}
}

var replicaSetKind = appsv1.SchemeGroupVersion.WithKind("ReplicaSet")

// scaleReplicas is the replica managers' shared step: unless the owner is being deleted, it
// creates or deletes (as upstream ranks them) at most burstReplicas of its claimed pods towards
// replicas active ones.
func scaleReplicas(ctx context.Context, c *cluster, owner client.Object, gvk schema.GroupVersionKind, tmpl *corev1.PodTemplateSpec, replicas int32, pods []*corev1.Pod) error {
	if owner.GetDeletionTimestamp() != nil {
		return nil
	}
	var active []*corev1.Pod
	for _, p := range pods {
		if isActive(p) {
			active = append(active, p)
		}
	}
	switch diff := len(active) - int(replicas); {
	case diff < 0:
		return createPods(ctx, c, owner, tmpl, gvk, min(-diff, burstReplicas))
	case diff > 0:
		return deletePods(ctx, c, rankForDeletion(active, pods), min(diff, burstReplicas))
	}
	return nil
}

func selects(sel *metav1.LabelSelector, l map[string]string) bool {
	s, err := metav1.LabelSelectorAsSelector(sel)
	return err == nil && !s.Empty() && s.Matches(labels.Set(l))
}

func (r *replicaSetController) sync(ctx context.Context, key string) error {
	rs, _ := r.c.cache.get(replicaSetsGR, key).(*appsv1.ReplicaSet)
	if rs == nil {
		return nil
	}
	pods, err := claimPods(ctx, r.c, rs, replicaSetKind, rs.Spec.Selector)
	if err != nil {
		return err
	}
	err = scaleReplicas(ctx, r.c, rs, replicaSetKind, &rs.Spec.Template, ptr.Deref(rs.Spec.Replicas, 1), pods)
	now := time.Now()
	status := replicaSetStatus(rs, pods, now)
	if wait := nextAvailable(pods, rs.Spec.MinReadySeconds, now); wait > 0 {
		r.c.after(wait, r.idx, key)
	}
	if status.String() != rs.Status.String() {
		next := rs.DeepCopy()
		next.Status = status
		if uerr := r.c.client.Status().Update(ctx, next); uerr != nil && err == nil {
			err = uerr
		}
	}
	return err
}

// replicaSetStatus counts the set's pods as upstream's calculateStatus does.
func replicaSetStatus(rs *appsv1.ReplicaSet, pods []*corev1.Pod, now time.Time) appsv1.ReplicaSetStatus {
	st := appsv1.ReplicaSetStatus{ObservedGeneration: rs.Generation, Conditions: rs.Status.Conditions}
	tmpl := labels.Set(rs.Spec.Template.Labels)
	var terminating int32
	for _, p := range pods {
		if p.DeletionTimestamp != nil && !isTerminal(p) {
			terminating++
			continue
		}
		if !isActive(p) {
			continue
		}
		st.Replicas++
		if labels.SelectorFromSet(tmpl).Matches(labels.Set(p.Labels)) {
			st.FullyLabeledReplicas++
		}
		if isReady(p) {
			st.ReadyReplicas++
			if isAvailable(p, rs.Spec.MinReadySeconds, now) {
				st.AvailableReplicas++
			}
		}
	}
	st.TerminatingReplicas = &terminating
	return st
}

// nextAvailable is how long until the next ready pod becomes available (0: none waits).
func nextAvailable(pods []*corev1.Pod, minReadySeconds int32, now time.Time) time.Duration {
	if minReadySeconds == 0 {
		return 0
	}
	var wait time.Duration
	for _, p := range pods {
		if !isActive(p) || !isReady(p) || isAvailable(p, minReadySeconds, now) {
			continue
		}
		at := podCondition(p, corev1.PodReady).LastTransitionTime.Add(time.Duration(minReadySeconds)*time.Second + time.Second)
		if d := at.Sub(now); wait == 0 || d < wait {
			wait = max(d, time.Millisecond)
		}
	}
	return wait
}

// claimPods returns the pods owner controls, as upstream's PodControllerRefManager claims them:
// its own pods that still match, plus matching orphans it adopts; its pods that no longer match
// are released. An owner being deleted adopts nothing.
func claimPods(ctx context.Context, c *cluster, owner client.Object, gvk schema.GroupVersionKind, selector *metav1.LabelSelector) ([]*corev1.Pod, error) {
	sel, err := metav1.LabelSelectorAsSelector(selector)
	if err != nil || sel.Empty() {
		return nil, nil // validation keeps these out; a bad one selects nothing
	}
	var out []*corev1.Pod
	for _, p := range c.cache.podsIn(owner.GetNamespace()) {
		ref := metav1.GetControllerOfNoCopy(p)
		matches := sel.Matches(labels.Set(p.Labels))
		switch {
		case ref != nil && ref.UID == owner.GetUID():
			if matches {
				out = append(out, p)
				continue
			}
			if err := setController(ctx, c, p, nil); err != nil {
				return nil, err
			}
		case ref == nil && matches && p.DeletionTimestamp == nil && owner.GetDeletionTimestamp() == nil:
			ownerRef := metav1.NewControllerRef(owner, gvk)
			if err := setController(ctx, c, p, ownerRef); err != nil {
				return nil, err
			}
			if adopted, _ := c.cache.get(podsGR, keyOf(p)).(*corev1.Pod); adopted != nil {
				out = append(out, adopted)
			}
		}
	}
	return out, nil
}

// setController adopts (ref set) or releases (ref nil) a pod with a merge patch guarded by its
// UID and resourceVersion, as the ref manager's patches are.
func setController(ctx context.Context, c *cluster, p *corev1.Pod, ref *metav1.OwnerReference) error {
	var refs []metav1.OwnerReference
	for _, r := range p.OwnerReferences {
		if r.Controller == nil || !*r.Controller {
			refs = append(refs, r)
		}
	}
	if ref != nil {
		refs = append(refs, *ref)
	}
	body, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		"uid": p.UID, "resourceVersion": p.ResourceVersion, "ownerReferences": refs}})
	return c.client.Patch(ctx, p.DeepCopy(), client.RawPatch(types.MergePatchType, body))
}

// createPods creates n pods of the template, controlled by owner, in slow-start batches (1, 2,
// 4, ...): a batch that fails stops the rest, as upstream's slowStartBatch.
func createPods(ctx context.Context, c *cluster, owner client.Object, tmpl *corev1.PodTemplateSpec, gvk schema.GroupVersionKind, n int) error {
	created := 0
	for batch := 1; created < n; batch *= 2 {
		for range min(batch, n-created) {
			pod := podFromTemplate(owner, tmpl, gvk)
			if err := c.client.Create(ctx, pod); err != nil {
				return err
			}
			created++
		}
	}
	return nil
}

// podFromTemplate is upstream's GetPodFromTemplate: the template's labels, annotations,
// finalizers and spec, named after the owner.
func podFromTemplate(owner client.Object, tmpl *corev1.PodTemplateSpec, gvk schema.GroupVersionKind) *corev1.Pod {
	t := tmpl.DeepCopy()
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:       owner.GetNamespace(),
			GenerateName:    owner.GetName() + "-",
			Labels:          t.Labels,
			Annotations:     t.Annotations,
			Finalizers:      t.Finalizers,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(owner, gvk)},
		},
		Spec: t.Spec,
	}
}

// deletePods deletes the first n pods of ranked, each guarded by its UID.
func deletePods(ctx context.Context, c *cluster, ranked []*corev1.Pod, n int) error {
	for _, p := range ranked[:min(n, len(ranked))] {
		err := c.client.Delete(ctx, p, client.Preconditions{UID: &p.UID})
		if err != nil && !isGone(err) {
			return err
		}
	}
	return nil
}

// rankForDeletion orders active pods as upstream's ActivePodsWithRanks: unassigned, then
// pending, then not ready, then those doubled up on a node with more of the owner's pods, then
// ready for less time, then more restarts, then newer.
func rankForDeletion(active, all []*corev1.Pod) []*corev1.Pod {
	onNode := map[string]int{}
	for _, p := range all {
		if isActive(p) && p.Spec.NodeName != "" {
			onNode[p.Spec.NodeName]++
		}
	}
	phaseRank := map[corev1.PodPhase]int{corev1.PodPending: 0, corev1.PodUnknown: 1, corev1.PodRunning: 2}
	out := append([]*corev1.Pod(nil), active...)
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if (a.Spec.NodeName == "") != (b.Spec.NodeName == "") {
			return a.Spec.NodeName == ""
		}
		if phaseRank[a.Status.Phase] != phaseRank[b.Status.Phase] {
			return phaseRank[a.Status.Phase] < phaseRank[b.Status.Phase]
		}
		if isReady(a) != isReady(b) {
			return !isReady(a)
		}
		if onNode[a.Spec.NodeName] != onNode[b.Spec.NodeName] {
			return onNode[a.Spec.NodeName] > onNode[b.Spec.NodeName]
		}
		if isReady(a) && isReady(b) {
			ta, tb := podCondition(a, corev1.PodReady).LastTransitionTime, podCondition(b, corev1.PodReady).LastTransitionTime
			if !ta.Equal(&tb) {
				return tb.Before(&ta)
			}
		}
		if ra, rb := restarts(a), restarts(b); ra != rb {
			return ra > rb
		}
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return b.CreationTimestamp.Before(&a.CreationTimestamp)
		}
		return a.Name > b.Name
	})
	return out
}

func restarts(p *corev1.Pod) int32 {
	var n int32
	for _, cs := range p.Status.ContainerStatuses {
		n = max(n, cs.RestartCount)
	}
	return n
}
