package simulate

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// statefulSetController is kube-controller-manager's StatefulSet controller: pods named
// <name>-<ordinal>, created in order and each only once its predecessors are Running and Ready
// (OrderedReady) or all at once (Parallel), removed from the highest ordinal down; a template
// change replaces pods from the highest ordinal down, one at a time, above the rolling update's
// partition; status with currentRevision and updateRevision as `kubectl rollout status` reads
// them, and the ControllerRevisions `kubectl rollout history` and `undo` read (history.go);
// each ordinal's PersistentVolumeClaims of the volumeClaimTemplates, created before its pod
// (the PersistentVolume controller binds them), kept or deleted with the set and on scale-down
// as its persistentVolumeClaimRetentionPolicy says (statefulsetclaims.go).
type statefulSetController struct {
	c   *cluster
	idx int
}

var (
	statefulSetsGR  = appsv1.SchemeGroupVersion.WithResource("statefulsets").GroupResource()
	statefulSetKind = appsv1.SchemeGroupVersion.WithKind("StatefulSet")
)

func newStatefulSetController(c *cluster, idx int) *statefulSetController {
	return &statefulSetController{c: c, idx: idx}
}

func (s *statefulSetController) resources() []schema.GroupResource {
	return []schema.GroupResource{statefulSetsGR, podsGR, controllerRevisionsGR, pvcsGR}
}

func (s *statefulSetController) observe(ch store.Change) {
	obj := changedObject(ch)
	switch ch.Resource {
	case statefulSetsGR:
		s.c.enqueue(s.idx, keyOf(obj))
		return
	case pvcsGR:
		// A claim that goes may be one an ordinal's pod waits for (claimsAreStale): the set of
		// the pod that owned it, <set>-<ordinal>, is synced again.
		if ch.New != nil {
			return
		}
		for _, ref := range obj.GetOwnerReferences() {
			if ref.Kind != "Pod" {
				continue
			}
			if i := strings.LastIndexByte(ref.Name, '-'); i > 0 && ordinalOf(ref.Name[:i], ref.Name) >= 0 {
				s.c.enqueue(s.idx, obj.GetNamespace()+"/"+ref.Name[:i])
			}
		}
		return
	}
	if ref := metav1.GetControllerOfNoCopy(obj); ref != nil && ref.Kind == "StatefulSet" {
		s.c.enqueue(s.idx, obj.GetNamespace()+"/"+ref.Name)
	}
}

// ordinalOf parses the ordinal of a pod named <set>-<ordinal>; -1 when it is not one.
func ordinalOf(set, pod string) int {
	rest, ok := strings.CutPrefix(pod, set+"-")
	if !ok {
		return -1
	}
	n, err := strconv.Atoi(rest)
	if err != nil || n < 0 || strconv.Itoa(n) != rest {
		return -1
	}
	return n
}

func (s *statefulSetController) sync(ctx context.Context, key string) error {
	set, _ := s.c.cache.get(statefulSetsGR, key).(*appsv1.StatefulSet)
	if set == nil {
		return nil
	}
	revision, err := s.recordRevision(ctx, set)
	if err != nil {
		return err
	}
	replicas := int(ptr.Deref(set.Spec.Replicas, 1))
	start := 0
	if set.Spec.Ordinals != nil {
		start = int(set.Spec.Ordinals.Start)
	}
	pods := map[int]*corev1.Pod{}
	for _, obj := range s.c.cache.owned(podsGR, set.UID) {
		p := obj.(*corev1.Pod)
		if ord := ordinalOf(set.Name, p.Name); ord >= 0 {
			pods[ord] = p
		}
	}
	parallel := set.Spec.PodManagementPolicy == appsv1.ParallelPodManagement
	now := time.Now()
	if set.DeletionTimestamp == nil {
		if err := s.scale(ctx, set, pods, start, replicas, revision, parallel); err != nil {
			return err
		}
		if err := s.update(ctx, set, pods, start, replicas, revision, now); err != nil {
			return err
		}
	}
	if err := s.syncStatus(ctx, set, pods, start, replicas, revision, now); err != nil {
		return err
	}
	// History no pod, nor the current or update revision, runs beyond revisionHistoryLimit goes.
	live := map[string]bool{revision: true, set.Status.CurrentRevision: true}
	for _, p := range pods {
		live[p.Labels[appsv1.ControllerRevisionHashLabelKey]] = true
	}
	var history []*appsv1.ControllerRevision
	for _, r := range s.c.revisionsOf(set) {
		if !live[r.Name] {
			history = append(history, r)
		}
	}
	return s.c.trimRevisions(ctx, history, func(*appsv1.ControllerRevision) bool { return false }, ptr.Deref(set.Spec.RevisionHistoryLimit, 10))
}

// recordRevision keeps the StatefulSet's ControllerRevision of its template the newest, as
// upstream's history: <name>-<hash of the template's patch and the collision count>, or the
// older revision of the same template (a rollback), whose name it returns: the pods'
// controller-revision-hash label and status.updateRevision.
func (s *statefulSetController) recordRevision(ctx context.Context, set *appsv1.StatefulSet) (string, error) {
	data, err := templatePatch(set)
	if err != nil {
		return "", err
	}
	collisions := ptr.Deref(set.Status.CollisionCount, 0)
	hash := revisionHash(data, &collisions)
	if set.DeletionTimestamp != nil {
		return set.Name + "-" + hash, nil
	}
	want := newRevision(set.Name+"-"+hash, set.Spec.Template.Labels, set.Annotations, hash, data)
	cur, _, err := s.c.recordRevision(ctx, set, statefulSetKind, s.c.revisionsOf(set), want)
	if errors.Is(err, errRevisionCollision) {
		next := set.DeepCopy()
		next.Status.CollisionCount = ptr.To(collisions + 1)
		if err := s.c.client.Status().Update(ctx, next); err != nil {
			return "", err
		}
		return "", errRevisionCollision // synced again with the new count
	}
	if err != nil {
		return "", err
	}
	return cur.Name, nil
}

// scale creates the missing ordinals in [start, start+replicas) and deletes those beyond it,
// in order unless the policy is Parallel.
func (s *statefulSetController) scale(ctx context.Context, set *appsv1.StatefulSet, pods map[int]*corev1.Pod, start, replicas int, revision string, parallel bool) error {
	for ord := start; ord < start+replicas; ord++ {
		p := pods[ord]
		if p == nil {
			if s.claimsAreStale(set, ord) {
				return nil // synced again when the claim is gone
			}
			if err := s.createClaims(ctx, set, ord); err != nil {
				return err
			}
			pod := s.podFor(set, ord, revision)
			if err := s.c.client.Create(ctx, pod); err != nil {
				if isGone(err) {
					return nil
				}
				return err
			}
			if err := s.syncClaimOwners(ctx, set, pod, ord, true); err != nil {
				return err
			}
			if !parallel {
				return nil // the next one waits for this one
			}
			continue
		}
		if p.DeletionTimestamp == nil {
			if err := s.syncClaimOwners(ctx, set, p, ord, true); err != nil {
				return err
			}
		}
		if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
			if err := s.c.client.Delete(ctx, p, client.Preconditions{UID: &p.UID}); err != nil && !isGone(err) {
				return err
			}
			return nil // re-created once gone
		}
		if !parallel && (p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning || !isReady(p)) {
			return nil // OrderedReady: wait for it
		}
	}
	var extra []int
	for ord := range pods {
		if ord < start || ord >= start+replicas {
			extra = append(extra, ord)
		}
	}
	sort.Sort(sort.Reverse(sort.IntSlice(extra)))
	// Condemned pods' claims get their owners first (whenScaled: Delete: the pod), so that the
	// garbage collector removes them with the pods.
	for _, ord := range extra {
		if err := s.syncClaimOwners(ctx, set, pods[ord], ord, false); err != nil {
			return err
		}
	}
	for _, ord := range extra {
		p := pods[ord]
		if p.DeletionTimestamp != nil {
			if !parallel {
				return nil // one at a time, highest first
			}
			continue
		}
		if err := s.c.client.Delete(ctx, p, client.Preconditions{UID: &p.UID}); err != nil && !isGone(err) {
			return err
		}
		if !parallel {
			return nil
		}
	}
	return nil
}

// update replaces pods of an older revision from the highest ordinal down to the partition,
// one at a time, each once the others are Running and Ready.
func (s *statefulSetController) update(ctx context.Context, set *appsv1.StatefulSet, pods map[int]*corev1.Pod, start, replicas int, revision string, now time.Time) error {
	if set.Spec.UpdateStrategy.Type == appsv1.OnDeleteStatefulSetStrategyType {
		return nil
	}
	partition := 0
	if ru := set.Spec.UpdateStrategy.RollingUpdate; ru != nil && ru.Partition != nil {
		partition = int(*ru.Partition)
	}
	for ord := start; ord < start+replicas; ord++ {
		if p := pods[ord]; p == nil || p.DeletionTimestamp != nil || !isAvailable(p, set.Spec.MinReadySeconds, now) {
			return nil // the update waits for every pod to be available
		}
	}
	for ord := start + replicas - 1; ord >= start+partition; ord-- {
		p := pods[ord]
		if p.Labels[appsv1.ControllerRevisionHashLabelKey] != revision {
			if err := s.c.client.Delete(ctx, p, client.Preconditions{UID: &p.UID}); err != nil && !isGone(err) {
				return err
			}
			return nil
		}
	}
	return nil
}

// podFor is the pod of one ordinal: the template with the set's identity labels, its hostname
// and the headless Service's subdomain.
func (s *statefulSetController) podFor(set *appsv1.StatefulSet, ord int, revision string) *corev1.Pod {
	pod := podFromTemplate(set, &set.Spec.Template, statefulSetKind)
	pod.GenerateName = ""
	pod.Name = fmt.Sprintf("%s-%d", set.Name, ord)
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	pod.Labels[appsv1.StatefulSetPodNameLabel] = pod.Name
	pod.Labels[appsv1.PodIndexLabel] = strconv.Itoa(ord)
	pod.Labels[appsv1.ControllerRevisionHashLabelKey] = revision
	pod.Spec.Hostname = pod.Name
	pod.Spec.Subdomain = set.Spec.ServiceName
	if len(set.Spec.VolumeClaimTemplates) > 0 {
		// The claims' volumes, then the template's other volumes (upstream's updateStorage).
		claims := map[string]bool{}
		var volumes []corev1.Volume
		for _, tmpl := range set.Spec.VolumeClaimTemplates {
			claims[tmpl.Name] = true
			volumes = append(volumes, corev1.Volume{Name: tmpl.Name, VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claimName(tmpl.Name, set.Name, ord)}}})
		}
		for _, v := range pod.Spec.Volumes {
			if !claims[v.Name] {
				volumes = append(volumes, v)
			}
		}
		pod.Spec.Volumes = volumes
	}
	return pod
}

// claimName is the PersistentVolumeClaim of a volumeClaimTemplate for one ordinal.
func claimName(template, set string, ord int) string {
	return fmt.Sprintf("%s-%s-%d", template, set, ord)
}

// createClaims creates the ordinal's PersistentVolumeClaims that do not exist yet, from the
// set's volumeClaimTemplates with the set's selector labels; the PersistentVolume controller
// (persistentvolume.go) provisions and binds them, as upstream, where the StatefulSet controller
// binds nothing. Existing claims, those kept when the set scaled down (the default retention
// policy, Retain), are used again.
func (s *statefulSetController) createClaims(ctx context.Context, set *appsv1.StatefulSet, ord int) error {
	for _, tmpl := range set.Spec.VolumeClaimTemplates {
		pvc := &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: set.Namespace, Name: claimName(tmpl.Name, set.Name, ord),
				Labels: map[string]string{}, Annotations: tmpl.Annotations},
			Spec: *tmpl.Spec.DeepCopy(),
		}
		for k, v := range tmpl.Labels {
			pvc.Labels[k] = v
		}
		if set.Spec.Selector != nil {
			for k, v := range set.Spec.Selector.MatchLabels {
				pvc.Labels[k] = v
			}
		}
		err := s.c.client.Create(ctx, pvc)
		if apierrors.IsAlreadyExists(err) {
			if cur := s.c.cache.get(pvcsGR, keyOf(pvc)); cur != nil && cur.GetDeletionTimestamp() != nil {
				return fmt.Errorf("pvc %s is being deleted", pvc.Name) // as upstream: tried again
			}
			continue
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (s *statefulSetController) syncStatus(ctx context.Context, set *appsv1.StatefulSet, pods map[int]*corev1.Pod, start, replicas int, revision string, now time.Time) error {
	st := appsv1.StatefulSetStatus{ObservedGeneration: set.Generation, CollisionCount: set.Status.CollisionCount,
		Conditions: set.Status.Conditions, UpdateRevision: revision, CurrentRevision: set.Status.CurrentRevision}
	for _, p := range pods {
		if p.DeletionTimestamp != nil || isTerminal(p) {
			continue
		}
		st.Replicas++
		if isReady(p) {
			st.ReadyReplicas++
		}
		if isAvailable(p, set.Spec.MinReadySeconds, now) {
			st.AvailableReplicas++
		}
		if p.Labels[appsv1.ControllerRevisionHashLabelKey] == revision {
			st.UpdatedReplicas++
		}
	}
	// The current revision is the update revision once every replica runs it.
	if st.CurrentRevision == "" || st.UpdatedReplicas == int32(replicas) && st.Replicas == int32(replicas) {
		st.CurrentRevision = revision
	}
	if st.CurrentRevision == revision {
		st.CurrentReplicas = st.UpdatedReplicas
	} else {
		st.CurrentReplicas = st.Replicas - st.UpdatedReplicas
	}
	if wait := nextAvailable(podList(pods), set.Spec.MinReadySeconds, now); wait > 0 {
		s.c.after(wait, s.idx, keyOf(set))
	}
	if apiequality.Semantic.DeepEqual(st, set.Status) {
		return nil
	}
	next := set.DeepCopy()
	next.Status = st
	return s.c.client.Status().Update(ctx, next)
}

func podList(m map[int]*corev1.Pod) []*corev1.Pod {
	out := make([]*corev1.Pod, 0, len(m))
	for _, p := range m {
		out = append(out, p)
	}
	return out
}
