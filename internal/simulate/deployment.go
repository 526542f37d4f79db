package simulate

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"sort"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/dump"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// deploymentController is kube-controller-manager's Deployment controller: a ReplicaSet per
// pod template (named with the template's pod-template-hash, carrying revision annotations),
// RollingUpdate within maxSurge/maxUnavailable and Recreate, pause, progressDeadlineSeconds,
// revisionHistoryLimit, and the status and conditions upstream reports. `kubectl rollout undo`
// writes an old ReplicaSet's template back: that set becomes the new one again.
type deploymentController struct {
	c   *cluster
	idx int
}

const (
	revisionAnnotation        = "deployment.kubernetes.io/revision"
	desiredReplicasAnnotation = "deployment.kubernetes.io/desired-replicas"
	maxReplicasAnnotation     = "deployment.kubernetes.io/max-replicas"
	revisionHistoryAnnotation = "deployment.kubernetes.io/revision-history"
)

var deploymentKind = appsv1.SchemeGroupVersion.WithKind("Deployment")

func newDeploymentController(c *cluster, idx int) *deploymentController {
	return &deploymentController{c: c, idx: idx}
}

func (d *deploymentController) resources() []schema.GroupResource {
	return []schema.GroupResource{deploymentsGR, replicaSetsGR, podsGR}
}

func (d *deploymentController) observe(ch store.Change) {
	obj := changedObject(ch)
	switch ch.Resource {
	case deploymentsGR:
		d.c.enqueue(d.idx, keyOf(obj))
	case replicaSetsGR:
		if ref := metav1.GetControllerOfNoCopy(obj); ref != nil {
			if ref.Kind == "Deployment" {
				d.c.enqueue(d.idx, obj.GetNamespace()+"/"+ref.Name)
			}
			return
		}
		for _, o := range d.c.cache.list(deploymentsGR) {
			if o.GetNamespace() == obj.GetNamespace() && selects(o.(*appsv1.Deployment).Spec.Selector, obj.GetLabels()) {
				d.c.enqueue(d.idx, keyOf(o))
			}
		}
	case podsGR:
		// Recreate waits for the old pods to be gone.
		if ch.New != nil {
			return
		}
		if ref := metav1.GetControllerOfNoCopy(obj); ref != nil && ref.Kind == "ReplicaSet" {
			if rs := d.c.cache.get(replicaSetsGR, obj.GetNamespace()+"/"+ref.Name); rs != nil {
				if owner := metav1.GetControllerOfNoCopy(rs); owner != nil && owner.Kind == "Deployment" {
					d.c.enqueue(d.idx, obj.GetNamespace()+"/"+owner.Name)
				}
			}
		}
	}
}

// rollout is one sync's view of a Deployment.
type rollout struct {
	d      *appsv1.Deployment
	newRS  *appsv1.ReplicaSet
	oldRSs []*appsv1.ReplicaSet // sorted oldest first
	// created: the new ReplicaSet was created by this sync.
	created bool
}

func (r *rollout) all() []*appsv1.ReplicaSet {
	if r.newRS == nil {
		return r.oldRSs
	}
	return append(append([]*appsv1.ReplicaSet(nil), r.oldRSs...), r.newRS)
}

func (d *deploymentController) sync(ctx context.Context, key string) error {
	dep, _ := d.c.cache.get(deploymentsGR, key).(*appsv1.Deployment)
	if dep == nil {
		return nil
	}
	sel, err := metav1.LabelSelectorAsSelector(dep.Spec.Selector)
	if err != nil || sel.Empty() {
		return nil // validation refuses these; upstream only records observedGeneration
	}
	rsList, err := d.claimReplicaSets(ctx, dep, sel)
	if err != nil {
		return err
	}
	// The rollout updates its ReplicaSets in place as it scales them: its own copies, never the
	// cache's objects, which the store shares with its readers.
	for i := range rsList {
		rsList[i] = rsList[i].DeepCopy()
	}
	r := &rollout{d: dep}
	if dep.DeletionTimestamp != nil {
		r.split(rsList)
		return d.syncStatus(ctx, r)
	}
	recreate := dep.Spec.Strategy.Type == appsv1.RecreateDeploymentStrategyType
	r.split(rsList)
	if dep.Spec.Paused {
		if err := d.scalePaused(ctx, r); err != nil {
			return err
		}
		return d.syncStatus(ctx, r)
	}
	if r.newRS == nil && !recreate {
		if err := d.createNewRS(ctx, r); err != nil {
			return err
		}
	} else if r.newRS != nil {
		if err := d.syncRevision(ctx, r); err != nil {
			return err
		}
	}
	dep = r.d
	var changed bool
	if recreate {
		changed, err = d.rolloutRecreate(ctx, r)
	} else {
		changed, err = d.rolloutRolling(ctx, r)
	}
	if err != nil {
		return err
	}
	if !changed && complete(dep, d.calculateStatus(r)) {
		if err := d.cleanup(ctx, r); err != nil {
			return err
		}
	}
	return d.syncStatus(ctx, r)
}

// claimReplicaSets returns the sets the Deployment controls, adopting matching orphans and
// releasing its sets that no longer match, as upstream's ReplicaSetControllerRefManager.
func (d *deploymentController) claimReplicaSets(ctx context.Context, dep *appsv1.Deployment, sel labels.Selector) ([]*appsv1.ReplicaSet, error) {
	var out []*appsv1.ReplicaSet
	for _, obj := range d.c.cache.list(replicaSetsGR) {
		rs := obj.(*appsv1.ReplicaSet)
		if rs.Namespace != dep.Namespace {
			continue
		}
		ref := metav1.GetControllerOfNoCopy(rs)
		matches := sel.Matches(labels.Set(rs.Labels))
		switch {
		case ref != nil && ref.UID == dep.UID:
			if matches {
				out = append(out, rs)
				continue
			}
			if err := d.setRSController(ctx, rs, nil); err != nil {
				return nil, err
			}
		case ref == nil && matches && rs.DeletionTimestamp == nil && dep.DeletionTimestamp == nil:
			if err := d.setRSController(ctx, rs, metav1.NewControllerRef(dep, deploymentKind)); err != nil {
				return nil, err
			}
			if adopted, _ := d.c.cache.get(replicaSetsGR, keyOf(rs)).(*appsv1.ReplicaSet); adopted != nil {
				out = append(out, adopted)
			}
		}
	}
	return out, nil
}

func (d *deploymentController) setRSController(ctx context.Context, rs *appsv1.ReplicaSet, ref *metav1.OwnerReference) error {
	next := rs.DeepCopy()
	var refs []metav1.OwnerReference
	for _, r := range next.OwnerReferences {
		if r.Controller == nil || !*r.Controller {
			refs = append(refs, r)
		}
	}
	if ref != nil {
		refs = append(refs, *ref)
	}
	next.OwnerReferences = refs
	return d.c.client.Update(ctx, next)
}

// split finds the new ReplicaSet (the oldest whose template equals the Deployment's, ignoring
// pod-template-hash) and the old ones.
func (r *rollout) split(rsList []*appsv1.ReplicaSet) {
	sort.Slice(rsList, func(i, j int) bool {
		if !rsList[i].CreationTimestamp.Equal(&rsList[j].CreationTimestamp) {
			return rsList[i].CreationTimestamp.Before(&rsList[j].CreationTimestamp)
		}
		return rsList[i].Name < rsList[j].Name
	})
	r.newRS, r.oldRSs = nil, nil
	for _, rs := range rsList {
		if r.newRS == nil && equalIgnoreHash(&rs.Spec.Template, &r.d.Spec.Template) {
			r.newRS = rs
			continue
		}
		r.oldRSs = append(r.oldRSs, rs)
	}
}

func equalIgnoreHash(a, b *corev1.PodTemplateSpec) bool {
	a, b = a.DeepCopy(), b.DeepCopy()
	delete(a.Labels, appsv1.DefaultDeploymentUniqueLabelKey)
	delete(b.Labels, appsv1.DefaultDeploymentUniqueLabelKey)
	return apiequality.Semantic.DeepEqual(a, b)
}

// computeHash is upstream's pod-template-hash: FNV-32a of the template's dump and the collision
// count, encoded safely.
func computeHash(tmpl *corev1.PodTemplateSpec, collisionCount *int32) string {
	h := fnv.New32a()
	fmt.Fprintf(h, "%v", dump.ForHash(*tmpl))
	if collisionCount != nil {
		b := make([]byte, 8)
		binary.LittleEndian.PutUint32(b, uint32(*collisionCount))
		h.Write(b)
	}
	return rand.SafeEncodeString(fmt.Sprint(h.Sum32()))
}

func revision(obj metav1.Object) int64 {
	v, err := strconv.ParseInt(obj.GetAnnotations()[revisionAnnotation], 10, 64)
	if err != nil {
		return 0
	}
	return v
}

func (r *rollout) maxOldRevision() int64 {
	var m int64
	for _, rs := range r.oldRSs {
		m = max(m, revision(rs))
	}
	return m
}

// surgeAndUnavailable resolves maxSurge (rounded up) and maxUnavailable (rounded down) against
// the replicas; both 0 would deadlock, so maxUnavailable is then 1, as upstream's fenceposts.
func surgeAndUnavailable(dep *appsv1.Deployment) (int32, int32) {
	if dep.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType && dep.Spec.Strategy.Type != "" {
		return 0, 0
	}
	replicas := int(ptr.Deref(dep.Spec.Replicas, 1))
	surge, unavailable := intstr.FromString("25%"), intstr.FromString("25%")
	if ru := dep.Spec.Strategy.RollingUpdate; ru != nil {
		if ru.MaxSurge != nil {
			surge = *ru.MaxSurge
		}
		if ru.MaxUnavailable != nil {
			unavailable = *ru.MaxUnavailable
		}
	}
	s, _ := intstr.GetScaledValueFromIntOrPercent(&surge, replicas, true)
	u, _ := intstr.GetScaledValueFromIntOrPercent(&unavailable, replicas, false)
	if s == 0 && u == 0 {
		u = 1
	}
	return int32(s), int32(u)
}

func (d *deploymentController) annotations(dep *appsv1.Deployment, rs *appsv1.ReplicaSet, rev int64) map[string]string {
	surge, _ := surgeAndUnavailable(dep)
	replicas := ptr.Deref(dep.Spec.Replicas, 1)
	out := map[string]string{}
	for k, v := range dep.Annotations {
		// The Deployment's annotations go to its sets, save the ones kubectl and the controller own.
		if k != revisionAnnotation && k != revisionHistoryAnnotation && k != corev1.LastAppliedConfigAnnotation {
			out[k] = v
		}
	}
	if rs != nil {
		for k, v := range rs.Annotations {
			if _, ok := out[k]; !ok {
				out[k] = v
			}
		}
	}
	out[revisionAnnotation] = strconv.FormatInt(rev, 10)
	out[desiredReplicasAnnotation] = strconv.Itoa(int(replicas))
	out[maxReplicasAnnotation] = strconv.Itoa(int(replicas + surge))
	return out
}

// createNewRS creates the ReplicaSet of the Deployment's current template, with the replicas a
// rolling update allows at once (Recreate starts it at 0); a name taken by another template
// bumps status.collisionCount, as upstream.
func (d *deploymentController) createNewRS(ctx context.Context, r *rollout) error {
	dep := r.d
	hash := computeHash(&dep.Spec.Template, dep.Status.CollisionCount)
	tmpl := dep.Spec.Template.DeepCopy()
	if tmpl.Labels == nil {
		tmpl.Labels = map[string]string{}
	}
	tmpl.Labels[appsv1.DefaultDeploymentUniqueLabelKey] = hash
	sel := dep.Spec.Selector.DeepCopy()
	if sel.MatchLabels == nil {
		sel.MatchLabels = map[string]string{}
	}
	sel.MatchLabels[appsv1.DefaultDeploymentUniqueLabelKey] = hash
	var replicas int32
	if dep.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		replicas = newRSReplicas(dep, r.all(), nil)
	}
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{
			Name: dep.Name + "-" + hash, Namespace: dep.Namespace,
			Labels:          tmpl.Labels,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(dep, deploymentKind)},
		},
		Spec: appsv1.ReplicaSetSpec{Replicas: &replicas, MinReadySeconds: dep.Spec.MinReadySeconds, Selector: sel, Template: *tmpl},
	}
	rs.Annotations = d.annotations(dep, nil, r.maxOldRevision()+1)
	err := d.c.client.Create(ctx, rs)
	if apierrors.IsAlreadyExists(err) {
		// Same name, other template: a hash collision. Count it; the next sync hashes anew.
		next := dep.DeepCopy()
		next.Status.CollisionCount = ptr.To(ptr.Deref(dep.Status.CollisionCount, 0) + 1)
		return d.c.client.Status().Update(ctx, next)
	}
	if err != nil {
		return err
	}
	r.newRS, r.created = rs, true
	return d.setDeploymentRevision(ctx, r, rs.Annotations[revisionAnnotation])
}

// syncRevision gives the new ReplicaSet the newest revision (after a rollout undo it had an old
// one) and current replica annotations, and the Deployment its revision.
func (d *deploymentController) syncRevision(ctx context.Context, r *rollout) error {
	rs := r.newRS
	rev := revision(rs)
	if maxOld := r.maxOldRevision(); rev <= maxOld {
		rev = maxOld + 1
	}
	want := d.annotations(r.d, rs, rev)
	if !apiequality.Semantic.DeepEqual(want, rs.Annotations) || rs.Spec.MinReadySeconds != r.d.Spec.MinReadySeconds {
		next := rs.DeepCopy()
		if old := revision(rs); old != rev && old > 0 {
			history := rs.Annotations[revisionHistoryAnnotation]
			if history != "" {
				history += ","
			}
			want[revisionHistoryAnnotation] = history + strconv.FormatInt(old, 10)
		}
		next.Annotations = want
		next.Spec.MinReadySeconds = r.d.Spec.MinReadySeconds
		if err := d.c.client.Update(ctx, next); err != nil {
			return err
		}
		r.newRS = next
	}
	return d.setDeploymentRevision(ctx, r, strconv.FormatInt(rev, 10))
}

// setDeploymentRevision stores the Deployment's revision annotation; the rollout goes on from
// the stored Deployment. (r.d is the cache's object, shared with the store: never written.)
func (d *deploymentController) setDeploymentRevision(ctx context.Context, r *rollout, rev string) error {
	if r.d.Annotations[revisionAnnotation] == rev {
		return nil
	}
	next := r.d.DeepCopy()
	if next.Annotations == nil {
		next.Annotations = map[string]string{}
	}
	next.Annotations[revisionAnnotation] = rev
	if err := d.c.client.Update(ctx, next); err != nil {
		return err
	}
	r.d = next // Update set its new resourceVersion
	return nil
}

func replicas(rs *appsv1.ReplicaSet) int32 { return ptr.Deref(rs.Spec.Replicas, 1) }

func sumReplicas(list []*appsv1.ReplicaSet) int32 {
	var n int32
	for _, rs := range list {
		if rs != nil {
			n += replicas(rs)
		}
	}
	return n
}

// newRSReplicas is how far the new set may grow now: up to replicas + maxSurge pods in all.
func newRSReplicas(dep *appsv1.Deployment, all []*appsv1.ReplicaSet, newRS *appsv1.ReplicaSet) int32 {
	want := ptr.Deref(dep.Spec.Replicas, 1)
	cur := int32(0)
	if newRS != nil {
		cur = replicas(newRS)
	}
	surge, _ := surgeAndUnavailable(dep)
	total := sumReplicas(all)
	if total >= want+surge {
		return cur
	}
	return cur + min(want+surge-total, want-cur)
}

func (d *deploymentController) scale(ctx context.Context, r *rollout, rs *appsv1.ReplicaSet, n int32) (bool, error) {
	want := d.annotations(r.d, rs, revision(rs))
	if rs != r.newRS {
		want[revisionAnnotation] = rs.Annotations[revisionAnnotation] // only the new set's revision moves
	}
	if replicas(rs) == n && apiequality.Semantic.DeepEqual(want, rs.Annotations) {
		return false, nil
	}
	next := rs.DeepCopy()
	next.Spec.Replicas = &n
	next.Annotations = want
	if err := d.c.client.Update(ctx, next); err != nil {
		return false, err
	}
	*rs = *next
	return true, nil
}

// rolloutRolling is one step of a RollingUpdate: grow the new set within maxSurge, else shrink
// the old ones within maxUnavailable (unhealthy pods first).
func (d *deploymentController) rolloutRolling(ctx context.Context, r *rollout) (bool, error) {
	dep, newRS := r.d, r.newRS
	want := ptr.Deref(dep.Spec.Replicas, 1)
	if n := replicas(newRS); n != want {
		target := want
		if n < want {
			target = newRSReplicas(dep, r.all(), newRS)
		}
		if changed, err := d.scale(ctx, r, newRS, target); err != nil || changed {
			return changed, err
		}
	}
	return d.scaleDownOld(ctx, r)
}

func (d *deploymentController) scaleDownOld(ctx context.Context, r *rollout) (bool, error) {
	dep, newRS := r.d, r.newRS
	if sumReplicas(r.oldRSs) == 0 {
		return false, nil
	}
	_, maxUnavailable := surgeAndUnavailable(dep)
	minAvailable := ptr.Deref(dep.Spec.Replicas, 1) - maxUnavailable
	newUnavailable := replicas(newRS) - newRS.Status.AvailableReplicas
	maxScaledDown := sumReplicas(r.all()) - minAvailable - newUnavailable
	if maxScaledDown <= 0 {
		return false, nil
	}
	changed := false
	// First the old sets' unhealthy pods, which count for nothing.
	var cleaned int32
	for _, rs := range r.oldRSs {
		if cleaned >= maxScaledDown {
			break
		}
		unhealthy := replicas(rs) - rs.Status.AvailableReplicas
		if replicas(rs) == 0 || unhealthy <= 0 {
			continue
		}
		n := min(maxScaledDown-cleaned, unhealthy)
		c, err := d.scale(ctx, r, rs, replicas(rs)-n)
		if err != nil {
			return changed, err
		}
		changed = changed || c
		cleaned += n
	}
	// Then available ones, as far as minAvailable allows.
	var available int32
	for _, rs := range r.all() {
		available += rs.Status.AvailableReplicas
	}
	if available <= minAvailable {
		return changed, nil
	}
	total := available - minAvailable
	var done int32
	for _, rs := range r.oldRSs {
		if done >= total {
			break
		}
		if replicas(rs) == 0 {
			continue
		}
		n := min(replicas(rs), total-done)
		c, err := d.scale(ctx, r, rs, replicas(rs)-n)
		if err != nil {
			return changed, err
		}
		changed = changed || c
		done += n
	}
	return changed, nil
}

// rolloutRecreate: every old pod goes first, then the new set is created and scaled up.
func (d *deploymentController) rolloutRecreate(ctx context.Context, r *rollout) (bool, error) {
	changed := false
	for _, rs := range r.oldRSs {
		if replicas(rs) > 0 {
			c, err := d.scale(ctx, r, rs, 0)
			if err != nil {
				return changed, err
			}
			changed = changed || c
		}
	}
	if changed {
		return true, nil
	}
	for _, rs := range r.oldRSs {
		for _, p := range d.c.cache.owned(podsGR, rs.UID) {
			if !isTerminal(p.(*corev1.Pod)) {
				return false, nil // old pods still run (or terminate)
			}
		}
	}
	if r.newRS == nil {
		if err := d.createNewRS(ctx, r); err != nil || r.newRS == nil {
			return false, err
		}
	}
	return d.scale(ctx, r, r.newRS, ptr.Deref(r.d.Spec.Replicas, 1))
}

// scalePaused keeps a paused Deployment's size: only the replica count moves (onto the new set,
// or the newest active one), no rollout.
func (d *deploymentController) scalePaused(ctx context.Context, r *rollout) error {
	target := r.newRS
	if target == nil {
		for _, rs := range r.oldRSs {
			if replicas(rs) > 0 {
				target = rs
			}
		}
	}
	if target == nil {
		return nil
	}
	others := sumReplicas(r.all()) - replicas(target)
	_, err := d.scale(ctx, r, target, max(0, ptr.Deref(r.d.Spec.Replicas, 1)-others))
	return err
}

// cleanup deletes the oldest unused sets beyond revisionHistoryLimit.
func (d *deploymentController) cleanup(ctx context.Context, r *rollout) error {
	limit := int(ptr.Deref(r.d.Spec.RevisionHistoryLimit, 10))
	var unused []*appsv1.ReplicaSet
	for _, rs := range r.oldRSs {
		if replicas(rs) == 0 && rs.Status.Replicas == 0 && rs.DeletionTimestamp == nil {
			unused = append(unused, rs)
		}
	}
	if len(unused) <= limit {
		return nil
	}
	sort.SliceStable(unused, func(i, j int) bool { return revision(unused[i]) < revision(unused[j]) })
	for _, rs := range unused[:len(unused)-limit] {
		if err := d.c.client.Delete(ctx, rs, client.Preconditions{UID: &rs.UID}); err != nil && !isGone(err) {
			return err
		}
	}
	return nil
}

// calculateStatus sums the sets' counts as upstream's calculateStatus does.
func (d *deploymentController) calculateStatus(r *rollout) appsv1.DeploymentStatus {
	dep := r.d
	st := appsv1.DeploymentStatus{
		ObservedGeneration: dep.Generation,
		CollisionCount:     dep.Status.CollisionCount,
		Conditions:         append([]appsv1.DeploymentCondition(nil), dep.Status.Conditions...),
	}
	var terminating int32
	for _, rs := range r.all() {
		st.Replicas += rs.Status.Replicas
		st.ReadyReplicas += rs.Status.ReadyReplicas
		st.AvailableReplicas += rs.Status.AvailableReplicas
		terminating += ptr.Deref(rs.Status.TerminatingReplicas, 0)
	}
	st.TerminatingReplicas = &terminating
	if r.newRS != nil {
		st.UpdatedReplicas = r.newRS.Status.Replicas
	}
	want := ptr.Deref(dep.Spec.Replicas, 1)
	st.UnavailableReplicas = max(0, want-st.AvailableReplicas)
	_, maxUnavailable := surgeAndUnavailable(dep)
	if st.AvailableReplicas >= want-maxUnavailable {
		setDeploymentCondition(&st, appsv1.DeploymentAvailable, corev1.ConditionTrue, "MinimumReplicasAvailable", "Deployment has minimum availability.")
	} else {
		setDeploymentCondition(&st, appsv1.DeploymentAvailable, corev1.ConditionFalse, "MinimumReplicasUnavailable", "Deployment does not have minimum availability.")
	}
	return st
}

// complete: every replica updated and available, none of an old set left.
func complete(dep *appsv1.Deployment, st appsv1.DeploymentStatus) bool {
	want := ptr.Deref(dep.Spec.Replicas, 1)
	return st.UpdatedReplicas == want && st.Replicas == want && st.AvailableReplicas == want && st.ObservedGeneration >= dep.Generation
}

// syncStatus writes the status and the Progressing condition (syncRolloutStatus upstream),
// and re-checks the progress deadline when it is due.
func (d *deploymentController) syncStatus(ctx context.Context, r *rollout) error {
	dep := r.d
	st := d.calculateStatus(r)
	rsName := ""
	if r.newRS != nil {
		rsName = r.newRS.Name
	}
	deadline := ptr.Deref(dep.Spec.ProgressDeadlineSeconds, 600)
	cur := deploymentCondition(dep.Status.Conditions, appsv1.DeploymentProgressing)
	switch {
	case dep.Spec.Paused:
		if cur == nil || cur.Reason != "DeploymentPaused" {
			setDeploymentCondition(&st, appsv1.DeploymentProgressing, corev1.ConditionUnknown, "DeploymentPaused", "Deployment is paused")
		}
	case cur != nil && cur.Reason == "DeploymentPaused":
		setDeploymentCondition(&st, appsv1.DeploymentProgressing, corev1.ConditionUnknown, "DeploymentResumed", "Deployment is resumed")
	case deadline == math.MaxInt32:
		removeDeploymentCondition(&st, appsv1.DeploymentProgressing)
	case st.Replicas == st.UpdatedReplicas && cur != nil && cur.Reason == "NewReplicaSetAvailable" && complete(dep, st):
		// Complete already.
	case complete(dep, st):
		setDeploymentCondition(&st, appsv1.DeploymentProgressing, corev1.ConditionTrue, "NewReplicaSetAvailable", fmt.Sprintf("ReplicaSet %q has successfully progressed.", rsName))
	case r.created:
		setDeploymentCondition(&st, appsv1.DeploymentProgressing, corev1.ConditionTrue, "NewReplicaSetCreated", fmt.Sprintf("Created new replica set %q", rsName))
	case progressing(dep.Status, st) || cur == nil:
		setDeploymentCondition(&st, appsv1.DeploymentProgressing, corev1.ConditionTrue, "ReplicaSetUpdated", fmt.Sprintf("ReplicaSet %q is progressing.", rsName))
		// Progress restarts the deadline.
		deploymentCondition(st.Conditions, appsv1.DeploymentProgressing).LastUpdateTime = metav1.NewTime(time.Now().Truncate(time.Second))
	case cur.Reason != "ProgressDeadlineExceeded" && time.Since(cur.LastUpdateTime.Time) > time.Duration(deadline)*time.Second:
		setDeploymentCondition(&st, appsv1.DeploymentProgressing, corev1.ConditionFalse, "ProgressDeadlineExceeded", fmt.Sprintf("ReplicaSet %q has timed out progressing.", rsName))
	}
	if c := deploymentCondition(st.Conditions, appsv1.DeploymentProgressing); c != nil && c.Status == corev1.ConditionTrue && c.Reason != "NewReplicaSetAvailable" && deadline != math.MaxInt32 {
		// Stuck or not, look again once the deadline passes.
		d.c.after(time.Until(c.LastUpdateTime.Add(time.Duration(deadline)*time.Second))+time.Second, d.idx, keyOf(dep))
	}
	if apiequality.Semantic.DeepEqual(st, dep.Status) {
		return nil
	}
	next := dep.DeepCopy()
	next.Status = st
	return d.c.client.Status().Update(ctx, next)
}

// progressing: the rollout moved since the last status (upstream's DeploymentProgressing).
func progressing(old, cur appsv1.DeploymentStatus) bool {
	return cur.UpdatedReplicas > old.UpdatedReplicas || cur.Replicas-cur.UpdatedReplicas < old.Replicas-old.UpdatedReplicas ||
		cur.ReadyReplicas > old.ReadyReplicas || cur.AvailableReplicas > old.AvailableReplicas
}

func deploymentCondition(conds []appsv1.DeploymentCondition, t appsv1.DeploymentConditionType) *appsv1.DeploymentCondition {
	for i := range conds {
		if conds[i].Type == t {
			return &conds[i]
		}
	}
	return nil
}

// setDeploymentCondition sets a condition as upstream's SetDeploymentCondition: the transition
// time stays while the status does; lastUpdateTime moves with every change.
func setDeploymentCondition(st *appsv1.DeploymentStatus, t appsv1.DeploymentConditionType, status corev1.ConditionStatus, reason, message string) {
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	cond := appsv1.DeploymentCondition{Type: t, Status: status, Reason: reason, Message: message, LastUpdateTime: now, LastTransitionTime: now}
	if cur := deploymentCondition(st.Conditions, t); cur != nil {
		if cur.Status == status && cur.Reason == reason && cur.Message == message {
			return
		}
		if cur.Status == status {
			cond.LastTransitionTime = cur.LastTransitionTime
		}
		*cur = cond
		return
	}
	st.Conditions = append(st.Conditions, cond)
}

func removeDeploymentCondition(st *appsv1.DeploymentStatus, t appsv1.DeploymentConditionType) {
	var out []appsv1.DeploymentCondition
	for _, c := range st.Conditions {
		if c.Type != t {
			out = append(out, c)
		}
	}
	st.Conditions = out
}
