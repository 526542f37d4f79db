package simulate

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// jobController is kube-controller-manager's Job controller: up to parallelism pods at once
// until completions succeeded (NonIndexed), or one pod per completion index (Indexed), each
// carrying the batch.kubernetes.io/job-tracking finalizer until the controller has counted it
// (status.uncountedTerminatedPods, then succeeded/failed and completedIndexes, as upstream);
// failed pods count against backoffLimit (and, with restartPolicy OnFailure, their containers'
// restarts), a replacement waits the pod failure backoff (10 s doubling, at most 10 min);
// backoffLimit and activeDeadlineSeconds end the Job with FailureTarget then Failed, success
// with SuccessCriteriaMet then Complete once no pod is left running, as 1.36 reports them;
// an Indexed Job's successPolicy; podFailurePolicy (FailJob, Ignore, Count, FailIndex by exit
// codes or pod conditions, on pods once Failed); an Indexed Job's backoffLimitPerIndex and
// maxFailedIndexes (the job-index-failure-count annotations, status.failedIndexes); startTime,
// completionTime, ready and terminating counts; and the TTL after finished controller's
// deletion (ttlSecondsAfterFinished). Pods fail when ExitCodeAnnotation says so.
type jobController struct {
	c   *cluster
	idx int
}

// ExitCodeAnnotation on a Job's pod template (or on any pod of a Job) is the exit code of the
// pod's simulated containers once they have run for the job run time: "0" (as without it)
// succeeds; any other code fails the pod (restartPolicy Never: phase Failed; OnFailure: the
// kubelet restarts the containers after its crash-loop back-off), which counts against the
// Job's backoffLimit.
const ExitCodeAnnotation = "goofy.infrastructure.cluster.x-k8s.io/exit-code"

// DefaultPodFailureBackoff is the Job controller's delay before it replaces a failed pod, doubled
// for each further failure since the last success up to maxPodFailureBackoff; the kubelet's
// crash-loop back-off starts at the same value (up to maxCrashLoopBackoff).
const DefaultPodFailureBackoff = 10 * time.Second

const (
	maxPodFailureBackoff = 10 * time.Minute
	maxCrashLoopBackoff  = 5 * time.Minute
	defaultBackoffLimit  = 6
)

var (
	jobsGR  = batchv1.SchemeGroupVersion.WithResource("jobs").GroupResource()
	jobKind = batchv1.SchemeGroupVersion.WithKind("Job")
)

func newJobController(c *cluster, idx int) *jobController { return &jobController{c: c, idx: idx} }

func (j *jobController) resources() []schema.GroupResource {
	return []schema.GroupResource{jobsGR, podsGR}
}

func (j *jobController) observe(ch store.Change) {
	obj := changedObject(ch)
	if ch.Resource == jobsGR {
		j.c.enqueue(j.idx, keyOf(obj))
		return
	}
	if ref := metav1.GetControllerOfNoCopy(obj); ref != nil && ref.Kind == "Job" {
		j.c.enqueue(j.idx, obj.GetNamespace()+"/"+ref.Name)
	}
}

func jobCondition(job *batchv1.Job, t batchv1.JobConditionType) *batchv1.JobCondition {
	for i := range job.Status.Conditions {
		if job.Status.Conditions[i].Type == t && job.Status.Conditions[i].Status == corev1.ConditionTrue {
			return &job.Status.Conditions[i]
		}
	}
	return nil
}

func isIndexedJob(job *batchv1.Job) bool {
	return ptr.Deref(job.Spec.CompletionMode, batchv1.NonIndexedCompletion) == batchv1.IndexedCompletion
}

// isPodFailed is upstream's rule: a Failed pod, or a deleted one that did not succeed (unless
// the Job replaces only Failed pods).
func isPodFailed(p *corev1.Pod, job *batchv1.Job) bool {
	if p.Status.Phase == corev1.PodFailed {
		return true
	}
	if onlyReplaceFailedPods(job) {
		return false
	}
	return p.DeletionTimestamp != nil && p.Status.Phase != corev1.PodSucceeded
}

// onlyReplaceFailedPods: podReplacementPolicy Failed, which is also what a podFailurePolicy
// implies (the API server's default), so that the policy sees the pod's final state.
func onlyReplaceFailedPods(job *batchv1.Job) bool {
	return job.Spec.PodFailurePolicy != nil || ptr.Deref(job.Spec.PodReplacementPolicy, batchv1.TerminatingOrFailed) == batchv1.Failed
}

// hasBackoffLimitPerIndex: an Indexed Job that counts failures per index.
func hasBackoffLimitPerIndex(job *batchv1.Job) bool {
	return isIndexedJob(job) && job.Spec.BackoffLimitPerIndex != nil
}

// jobPods is what one sync found of a Job's pods.
type jobPods struct {
	all, active, terminating, succeeded, failed []*corev1.Pod
	// succeededIndexes and failedIndexes: those of status.completedIndexes and
	// status.failedIndexes and those of the pods finished since.
	succeededIndexes, failedIndexes map[int]bool
	// awaiting: with backoffLimitPerIndex, per index to replace, the failed pod whose failure
	// count its replacement inherits; it keeps its finalizer until the replacement exists.
	awaiting map[int]*corev1.Pod
}

func (j *jobController) sync(ctx context.Context, key string) error {
	job, _ := j.c.cache.get(jobsGR, key).(*batchv1.Job)
	if job == nil || job.DeletionTimestamp != nil {
		return nil
	}
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	st := job.Status.DeepCopy()
	if st.UncountedTerminatedPods == nil {
		st.UncountedTerminatedPods = &batchv1.UncountedTerminatedPods{}
	}
	unc := st.UncountedTerminatedPods
	uncounted := map[types.UID]bool{}
	for _, uid := range unc.Succeeded {
		uncounted[uid] = true
	}
	for _, uid := range unc.Failed {
		uncounted[uid] = true
	}
	indexed, perIndex := isIndexedJob(job), hasBackoffLimitPerIndex(job)
	completions := job.Spec.Completions
	policy := job.Spec.PodFailurePolicy
	// What an earlier sync decided: once the Job fails every pod left counts as failed, and
	// once it ends either way no pod keeps its finalizer.
	failing := jobCondition(job, batchv1.JobFailureTarget) != nil
	ended := failing || jobCondition(job, batchv1.JobSuccessCriteriaMet) != nil
	s := jobPods{succeededIndexes: map[int]bool{}, failedIndexes: map[int]bool{}}
	if indexed {
		for _, ix := range parseIndexes(st.CompletedIndexes, ptr.Deref(completions, 0)) {
			s.succeededIndexes[ix] = true
		}
	}
	if perIndex {
		for _, ix := range parseIndexes(ptr.Deref(st.FailedIndexes, ""), ptr.Deref(completions, 0)) {
			s.failedIndexes[ix] = true
		}
	}
	var ready, terminating, restarts int32
	present := map[types.UID]bool{}
	for _, obj := range j.c.cache.owned(podsGR, job.UID) {
		p := obj.(*corev1.Pod)
		s.all = append(s.all, p)
		finalizer := hasString(p.Finalizers, batchv1.JobTrackingFinalizer)
		present[p.UID] = finalizer
		ix, valid := completionIndex(p, completions)
		switch {
		case p.Status.Phase == corev1.PodSucceeded:
			s.succeeded = append(s.succeeded, p)
			if indexed && valid {
				s.succeededIndexes[ix] = true
			}
		case isPodFailed(p, job) && (finalizer || p.Status.Phase == corev1.PodFailed):
			// (A pod the controller removed, its finalizer first, is no failure.)
			s.failed = append(s.failed, p)
			if perIndex && valid && finalizer && isIndexFailed(job, p) {
				s.failedIndexes[ix] = true
			}
		}
		if p.DeletionTimestamp != nil && !isTerminal(p) {
			terminating++
			s.terminating = append(s.terminating, p)
		} else if !isTerminal(p) {
			s.active = append(s.active, p)
			if isReady(p) {
				ready++
			}
			for _, cs := range p.Status.ContainerStatuses {
				restarts += cs.RestartCount
			}
		}
	}
	if perIndex && !ended {
		s.awaiting = podsAwaitingReplacement(job, &s)
	}
	// The finished pods whose finalizers go, recorded as uncounted first (unless the policy
	// ignores the failure), so that none is counted twice or lost.
	var tracked []*corev1.Pod
	var awaitingFailures int32
	for _, p := range s.all {
		finished := p.Status.Phase == corev1.PodSucceeded || isPodFailed(p, job)
		if !present[p.UID] || !finished && !ended {
			continue
		}
		if ix, ok := completionIndex(p, completions); ok && s.awaiting[ix] == p {
			if failureCounts(policy, p) {
				awaitingFailures++ // against backoffLimit already, in status.failed once replaced
			}
			continue
		}
		tracked = append(tracked, p)
		if uncounted[p.UID] {
			continue
		}
		switch {
		case p.Status.Phase == corev1.PodSucceeded:
			uncounted[p.UID] = true
			unc.Succeeded = append(unc.Succeeded, p.UID)
		case (finished || failing) && failureCounts(policy, p):
			uncounted[p.UID] = true
			unc.Failed = append(unc.Failed, p.UID)
		}
	}
	if st.StartTime == nil && !ptr.Deref(job.Spec.Suspend, false) {
		st.StartTime = &now
	}
	if indexed {
		st.Succeeded = int32(len(s.succeededIndexes))
		st.CompletedIndexes = formatIndexes(s.succeededIndexes)
	}
	if perIndex {
		st.FailedIndexes = ptr.To(formatIndexes(s.failedIndexes))
	}
	if len(tracked) > 0 && (!apiequality.Semantic.DeepEqual(unc, job.Status.UncountedTerminatedPods) ||
		st.CompletedIndexes != job.Status.CompletedIndexes || !ptr.Equal(st.FailedIndexes, job.Status.FailedIndexes)) {
		next := job.DeepCopy()
		next.Status = *st.DeepCopy()
		if err := j.c.client.Status().Update(ctx, next); err != nil {
			return err
		}
		job = next
	}
	for _, p := range tracked {
		if err := removeFinalizer(ctx, j.c, p, batchv1.JobTrackingFinalizer); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		present[p.UID] = false
	}
	// Counted: the uncounted pods whose finalizers are gone.
	flush := func(uids []types.UID, count *int32) []types.UID {
		var keep []types.UID
		for _, uid := range uids {
			if present[uid] {
				keep = append(keep, uid)
			} else {
				*count++
			}
		}
		return keep
	}
	var succeededPods int32
	unc.Succeeded = flush(unc.Succeeded, &succeededPods)
	unc.Failed = flush(unc.Failed, &st.Failed)
	succeeded := st.Succeeded
	if !indexed {
		st.Succeeded += succeededPods
		succeeded = st.Succeeded + int32(len(unc.Succeeded))
	}
	failed := st.Failed + int32(len(unc.Failed)) + awaitingFailures

	// Whether and how the Job ends: what an earlier sync decided, then failures, then success.
	var finished *batchv1.JobCondition
	if c := jobCondition(job, batchv1.JobSuccessCriteriaMet); c != nil {
		finished = c
	} else if c := jobCondition(job, batchv1.JobFailureTarget); c != nil {
		finished = c
	} else if msg, ok := failJobMessage(job, s.failed); ok {
		finished = &batchv1.JobCondition{Type: batchv1.JobFailureTarget, Reason: batchv1.JobReasonPodFailurePolicy, Message: msg}
	} else if failed > ptr.Deref(job.Spec.BackoffLimit, defaultBackoffLimit) || pastBackoffLimitOnFailure(job, restarts) {
		finished = &batchv1.JobCondition{Type: batchv1.JobFailureTarget, Reason: batchv1.JobReasonBackoffLimitExceeded, Message: "Job has reached the specified backoff limit"}
	} else if d := job.Spec.ActiveDeadlineSeconds; d != nil && st.StartTime != nil && !ptr.Deref(job.Spec.Suspend, false) {
		if left := time.Until(st.StartTime.Add(time.Duration(*d) * time.Second)); left <= 0 {
			finished = &batchv1.JobCondition{Type: batchv1.JobFailureTarget, Reason: batchv1.JobReasonDeadlineExceeded, Message: "Job was active longer than specified deadline"}
		} else {
			j.c.after(left, j.idx, key)
		}
	}
	if finished == nil && perIndex {
		failedIndexes := len(s.failedIndexes)
		switch {
		case job.Spec.MaxFailedIndexes != nil && failedIndexes > int(*job.Spec.MaxFailedIndexes):
			finished = &batchv1.JobCondition{Type: batchv1.JobFailureTarget, Reason: batchv1.JobReasonMaxFailedIndexesExceeded,
				Message: "Job has exceeded the specified maximal number of failed indexes"}
		case failedIndexes > 0 && failedIndexes+len(s.succeededIndexes) >= int(ptr.Deref(completions, 0)):
			finished = &batchv1.JobCondition{Type: batchv1.JobFailureTarget, Reason: batchv1.JobReasonFailedIndexes, Message: "Job has failed indexes"}
		}
	}
	if finished == nil && indexed {
		if msg, ok := matchSuccessPolicy(job.Spec.SuccessPolicy, ptr.Deref(completions, 0), s.succeededIndexes); ok {
			finished = &batchv1.JobCondition{Type: batchv1.JobSuccessCriteriaMet, Reason: batchv1.JobReasonSuccessPolicy, Message: msg}
		}
	}
	if finished == nil {
		switch {
		case indexed && completions != nil && succeeded >= *completions:
			finished = successCondition()
		case !indexed && len(s.active) == 0 && (completions == nil && succeeded > 0 || completions != nil && succeeded >= *completions):
			finished = successCondition()
		}
	}
	if finished != nil && (finished.Type == batchv1.JobFailureTarget || indexed) {
		// A failing Job's pods are deleted (as an Indexed Job's left over once every index succeeded).
		for _, p := range s.active {
			if err := j.c.client.Delete(ctx, p, client.Preconditions{UID: &p.UID}); err != nil && !isGone(err) {
				return err
			}
			terminating++
		}
		s.active = nil
	}
	if finished == nil {
		removed, removedReady, err := j.manage(ctx, key, job, succeeded, &s)
		terminating += removed
		ready -= removedReady
		if err != nil {
			return err
		}
		// As upstream: suspending clears startTime, resuming restarts it (activeDeadlineSeconds
		// counts the time the Job runs on end).
		if suspended := ptr.Deref(job.Spec.Suspend, false); setSuspendedCondition(st, suspended, now) {
			if suspended {
				st.StartTime = nil
			} else {
				st.StartTime = &now
			}
		}
	}
	st.Active = int32(len(s.active))
	st.Ready, st.Terminating = &ready, &terminating
	if finished != nil && jobCondition(job, finished.Type) == nil {
		c := *finished
		c.Status, c.LastProbeTime, c.LastTransitionTime = corev1.ConditionTrue, now, now
		st.Conditions = append(st.Conditions, c)
	}
	// The terminal condition once no pod runs and every finished pod is counted (a pod awaiting
	// its replacement is, once the Job has ended, at the next sync).
	if finished != nil && len(s.active) == 0 && terminating == 0 && len(unc.Succeeded)+len(unc.Failed) == 0 && len(s.awaiting) == 0 &&
		jobCondition(job, batchv1.JobComplete) == nil && jobCondition(job, batchv1.JobFailed) == nil {
		typ := batchv1.JobComplete
		if finished.Type == batchv1.JobFailureTarget {
			typ = batchv1.JobFailed
		} else {
			st.CompletionTime = &now
		}
		st.Conditions = append(st.Conditions, batchv1.JobCondition{Type: typ, Status: corev1.ConditionTrue,
			Reason: finished.Reason, Message: finished.Message, LastProbeTime: now, LastTransitionTime: now})
	}
	if end := jobFinishedAt(st); end != nil && job.Spec.TTLSecondsAfterFinished != nil {
		expires := end.Add(time.Duration(*job.Spec.TTLSecondsAfterFinished) * time.Second)
		if wait := time.Until(expires); wait > 0 {
			j.c.after(wait, j.idx, key)
		} else {
			// The TTL-after-finished controller deletes the Job and, in the foreground, its pods.
			return j.c.client.Delete(ctx, job, client.Preconditions{UID: &job.UID}, client.PropagationPolicy(metav1.DeletePropagationForeground))
		}
	}
	if apiequality.Semantic.DeepEqual(st, &job.Status) {
		return nil
	}
	next := job.DeepCopy()
	next.Status = *st
	return j.c.client.Status().Update(ctx, next)
}

// matchSuccessPolicy is upstream's: the first rule whose succeededIndexes all succeeded (or
// succeededCount of them), or, without indexes, whose succeededCount indexes succeeded.
func matchSuccessPolicy(policy *batchv1.SuccessPolicy, completions int32, succeeded map[int]bool) (string, bool) {
	if policy == nil || len(succeeded) == 0 {
		return "", false
	}
	for i, rule := range policy.Rules {
		match := false
		if rule.SucceededIndexes != nil {
			required := map[int]bool{}
			for _, ix := range parseIndexes(*rule.SucceededIndexes, completions) {
				required[ix] = true
			}
			n := 0
			for ix := range required {
				if succeeded[ix] {
					n++
				}
			}
			match = len(required) > 0 && (n == len(required) || rule.SucceededCount != nil && n >= int(*rule.SucceededCount))
		} else if rule.SucceededCount != nil {
			match = len(succeeded) >= int(*rule.SucceededCount)
		}
		if match {
			return fmt.Sprintf("Matched rules at index %d", i), true
		}
	}
	return "", false
}

func successCondition() *batchv1.JobCondition {
	return &batchv1.JobCondition{Type: batchv1.JobSuccessCriteriaMet, Reason: batchv1.JobReasonCompletionsReached, Message: "Reached expected number of succeeded pods"}
}

// jobFinishedAt is when the Job got its Complete or Failed condition.
func jobFinishedAt(st *batchv1.JobStatus) *metav1.Time {
	for _, c := range st.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			return &c.LastTransitionTime
		}
	}
	return nil
}

// pastBackoffLimitOnFailure: with restartPolicy OnFailure the restarts of the running pods'
// containers count against backoffLimit.
func pastBackoffLimitOnFailure(job *batchv1.Job, restarts int32) bool {
	if job.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyOnFailure {
		return false
	}
	limit := ptr.Deref(job.Spec.BackoffLimit, defaultBackoffLimit)
	if limit == 0 {
		return restarts > 0
	}
	return restarts >= limit
}

// setSuspendedCondition keeps the JobSuspended condition as upstream's ensureJobConditionStatus:
// True (JobSuspended) while the Job is suspended, False (JobResumed) once a suspended Job is
// resumed; whether it changed.
func setSuspendedCondition(st *batchv1.JobStatus, suspended bool, now metav1.Time) bool {
	c := batchv1.JobCondition{Type: batchv1.JobSuspended, Status: corev1.ConditionFalse, Reason: "JobResumed", Message: "Job resumed",
		LastProbeTime: now, LastTransitionTime: now}
	if suspended {
		c.Status, c.Reason, c.Message = corev1.ConditionTrue, "JobSuspended", "Job suspended"
	}
	for i := range st.Conditions {
		if old := &st.Conditions[i]; old.Type == batchv1.JobSuspended {
			if old.Status == c.Status && old.Reason == c.Reason && old.Message == c.Message {
				return false
			}
			*old = c
			return true
		}
	}
	if !suspended {
		return false
	}
	st.Conditions = append(st.Conditions, c)
	return true
}

// manage brings the Job's active pods to what it wants, as upstream's manageJob: a suspended
// Job none, else parallelism, at most the completions left (a Job without completions, once a
// pod succeeded, keeps what runs). It deletes the excess (returning how many, and of them
// ready) or else creates the pods the Job lacks, once the pod failure back-off has passed (per
// index with backoffLimitPerIndex).
func (j *jobController) manage(ctx context.Context, key string, job *batchv1.Job, succeeded int32, s *jobPods) (removed, removedReady int32, err error) {
	want := ptr.Deref(job.Spec.Parallelism, 1)
	completions := job.Spec.Completions
	switch {
	case ptr.Deref(job.Spec.Suspend, false):
		want = 0
	case completions != nil:
		want = max(0, min(want, *completions-succeeded))
	case succeeded > 0:
		want = int32(len(s.active))
	}
	if rm := activePodsForRemoval(job, s.active, len(s.active)-int(want)); len(rm) > 0 {
		return j.removeActive(ctx, s, rm[:min(len(rm), burstReplicas)])
	}
	if ptr.Deref(job.Spec.Suspend, false) {
		return 0, 0, nil
	}
	n := int(want) - len(s.active)
	if onlyReplaceFailedPods(job) {
		n -= len(s.terminating) // replaced once Failed
	}
	if n <= 0 {
		return 0, 0, nil
	}
	perIndex := hasBackoffLimitPerIndex(job)
	if !perIndex {
		if wait := failureBackoff(s.succeeded, s.failed, j.c.sim.backoffBase()); wait > 0 {
			j.c.after(wait, j.idx, key)
			return 0, 0, nil
		}
	}
	var indexes []int
	if isIndexedJob(job) {
		busy := map[int]bool{}
		running := s.active
		if onlyReplaceFailedPods(job) {
			running = append(running[:len(running):len(running)], s.terminating...)
		}
		for _, p := range running {
			if ix, ok := completionIndex(p, completions); ok {
				busy[ix] = true
			}
		}
		pending := 0
		var later time.Duration
		for ix := 0; ix < int(ptr.Deref(completions, 0)) && pending < n; ix++ {
			if busy[ix] || s.succeededIndexes[ix] || s.failedIndexes[ix] {
				continue
			}
			pending++
			// Of the first n pending indexes, those whose back-off has passed.
			if wait := indexBackoff(s.awaiting[ix], j.c.sim.backoffBase()); wait > 0 {
				if later == 0 || wait < later {
					later = wait
				}
				continue
			}
			indexes = append(indexes, ix)
		}
		if later > 0 {
			j.c.after(later, j.idx, key)
		}
		n = len(indexes)
	}
	for i := range min(n, burstReplicas) {
		pod := podFromTemplate(job, &job.Spec.Template, jobKind)
		pod.GenerateName = job.Name + "-"
		pod.Finalizers = append(pod.Finalizers, batchv1.JobTrackingFinalizer)
		if indexes != nil {
			indexPod(pod, job.Name, indexes[i])
			if perIndex {
				inheritFailureCounts(pod, job, s.awaiting[indexes[i]])
			}
		}
		if err := j.c.client.Create(ctx, pod); err != nil {
			return 0, 0, err
		}
	}
	return 0, 0, nil
}

// activePodsForRemoval is upstream's choice of the active pods to delete, at least n: of an
// Indexed Job first those of no valid index and all but one of each index (the one upstream
// would keep), then the rest as upstream's controller.ActivePods ranks them.
func activePodsForRemoval(job *batchv1.Job, active []*corev1.Pod, n int) []*corev1.Pod {
	var rm []*corev1.Pod
	left := active
	if isIndexedJob(job) {
		left = nil
		byIndex := map[int][]*corev1.Pod{}
		var indexes []int
		for _, p := range active {
			ix, ok := completionIndex(p, job.Spec.Completions)
			if !ok {
				rm = append(rm, p)
				continue
			}
			if byIndex[ix] == nil {
				indexes = append(indexes, ix)
			}
			byIndex[ix] = append(byIndex[ix], p)
		}
		sort.Ints(indexes)
		for _, ix := range indexes {
			ranked := rankForDeletion(byIndex[ix], nil)
			rm = append(rm, ranked[:len(ranked)-1]...)
			left = append(left, ranked[len(ranked)-1])
		}
	}
	if len(rm) < n {
		rm = append(rm, rankForDeletion(left, nil)[:n-len(rm)]...)
	}
	return rm
}

// removeActive deletes active pods as upstream's deleteJobPods: their tracking finalizer first,
// so that a pod the controller removes does not count as failed; it takes them out of s.active.
func (j *jobController) removeActive(ctx context.Context, s *jobPods, pods []*corev1.Pod) (removed, removedReady int32, err error) {
	gone := map[types.UID]bool{}
	for _, p := range pods {
		if hasString(p.Finalizers, batchv1.JobTrackingFinalizer) {
			if err := removeFinalizer(ctx, j.c, p, batchv1.JobTrackingFinalizer); err != nil && !apierrors.IsNotFound(err) {
				return removed, removedReady, err
			}
		}
		if err := j.c.client.Delete(ctx, p, client.Preconditions{UID: &p.UID}); err != nil && !isGone(err) {
			return removed, removedReady, err
		}
		gone[p.UID] = true
		removed++
		if isReady(p) {
			removedReady++
		}
	}
	keep := s.active[:0:0]
	for _, p := range s.active {
		if !gone[p.UID] {
			keep = append(keep, p)
		}
	}
	s.active = keep
	return removed, removedReady, nil
}

// podFailureAction is what spec.podFailurePolicy makes of a failed pod, as upstream's
// matchPodFailurePolicy: the action of the first rule that matches ("" when none does), and
// for FailJob the Job's failure message. onExitCodes matches a terminated container (then an
// init container) of the named one or any, whose exit code, not 0, is In or NotIn the values;
// onPodConditions a condition of the pod with one of the types and statuses.
func podFailureAction(policy *batchv1.PodFailurePolicy, p *corev1.Pod) (batchv1.PodFailurePolicyAction, string) {
	if policy == nil {
		return "", ""
	}
	for i, rule := range policy.Rules {
		var msg string
		if rule.OnExitCodes != nil {
			cs := matchExitCodes(p.Status.ContainerStatuses, rule.OnExitCodes)
			if cs == nil {
				cs = matchExitCodes(p.Status.InitContainerStatuses, rule.OnExitCodes)
			}
			if cs == nil {
				continue
			}
			msg = fmt.Sprintf("Container %s for pod %s/%s failed with exit code %v matching %v rule at index %d",
				cs.Name, p.Namespace, p.Name, cs.State.Terminated.ExitCode, rule.Action, i)
		} else if rule.OnPodConditions != nil {
			c := matchPodConditions(p.Status.Conditions, rule.OnPodConditions)
			if c == nil {
				continue
			}
			msg = fmt.Sprintf("Pod %s/%s has condition %v matching %v rule at index %d", p.Namespace, p.Name, c.Type, rule.Action, i)
		} else {
			continue
		}
		switch rule.Action {
		case batchv1.PodFailurePolicyActionFailJob:
			return rule.Action, msg
		case batchv1.PodFailurePolicyActionIgnore, batchv1.PodFailurePolicyActionCount, batchv1.PodFailurePolicyActionFailIndex:
			return rule.Action, ""
		}
	}
	return "", ""
}

func matchExitCodes(statuses []corev1.ContainerStatus, req *batchv1.PodFailurePolicyOnExitCodesRequirement) *corev1.ContainerStatus {
	for i := range statuses {
		cs := &statuses[i]
		if cs.State.Terminated == nil || req.ContainerName != nil && *req.ContainerName != cs.Name {
			continue
		}
		code := cs.State.Terminated.ExitCode
		if code == 0 {
			continue
		}
		in := false
		for _, v := range req.Values {
			in = in || v == code
		}
		if req.Operator == batchv1.PodFailurePolicyOnExitCodesOpIn && in || req.Operator == batchv1.PodFailurePolicyOnExitCodesOpNotIn && !in {
			return cs
		}
	}
	return nil
}

// matchPodConditions: a pattern without status means True, the API server's default.
func matchPodConditions(conds []corev1.PodCondition, patterns []batchv1.PodFailurePolicyOnPodConditionsPattern) *corev1.PodCondition {
	for i := range conds {
		for _, pat := range patterns {
			if status := cmp.Or(pat.Status, corev1.ConditionTrue); conds[i].Type == pat.Type && conds[i].Status == status {
				return &conds[i]
			}
		}
	}
	return nil
}

// failureCounts: a failed pod counts against backoffLimit (and backoffLimitPerIndex) unless a
// rule Ignores it.
func failureCounts(policy *batchv1.PodFailurePolicy, p *corev1.Pod) bool {
	action, _ := podFailureAction(policy, p)
	return action != batchv1.PodFailurePolicyActionIgnore
}

// failJobMessage is the message of the first failed pod a FailJob rule matches.
func failJobMessage(job *batchv1.Job, failed []*corev1.Pod) (string, bool) {
	for _, p := range failed {
		if action, msg := podFailureAction(job.Spec.PodFailurePolicy, p); action == batchv1.PodFailurePolicyActionFailJob {
			return msg, true
		}
	}
	return "", false
}

// isIndexFailed: the failed pod ends its index, by a FailIndex rule or, when its failure
// counts, as the failure past backoffLimitPerIndex (the count its annotation carries).
func isIndexFailed(job *batchv1.Job, p *corev1.Pod) bool {
	action, _ := podFailureAction(job.Spec.PodFailurePolicy, p)
	if action == batchv1.PodFailurePolicyActionFailIndex {
		return true
	}
	count, _ := indexFailureCounts(p)
	return action != batchv1.PodFailurePolicyActionIgnore && count >= ptr.Deref(job.Spec.BackoffLimitPerIndex, 0)
}

// indexFailureCounts reads a pod's job-index-failure-count and job-index-ignored-failure-count
// annotations (0 when absent or not a count).
func indexFailureCounts(p *corev1.Pod) (counted, ignored int32) {
	read := func(key string) int32 {
		n, err := strconv.ParseInt(p.Annotations[key], 10, 32)
		if err != nil || n < 0 {
			return 0
		}
		return int32(n)
	}
	return read(batchv1.JobIndexFailureCountAnnotation), read(batchv1.JobIndexIgnoredFailureCountAnnotation)
}

// inheritFailureCounts sets the failure count annotations of an index's new pod: 0, or those
// of the failed pod it replaces plus that pod's failure (counted or ignored).
func inheritFailureCounts(pod *corev1.Pod, job *batchv1.Job, replaced *corev1.Pod) {
	var counted, ignored int32
	if replaced != nil {
		counted, ignored = indexFailureCounts(replaced)
		if failureCounts(job.Spec.PodFailurePolicy, replaced) {
			counted++
		} else {
			ignored++
		}
	}
	pod.Annotations[batchv1.JobIndexFailureCountAnnotation] = strconv.Itoa(int(counted))
	if ignored > 0 {
		pod.Annotations[batchv1.JobIndexIgnoredFailureCountAnnotation] = strconv.Itoa(int(ignored))
	}
}

// podsAwaitingReplacement is upstream's getPodsWithDelayedDeletionPerIndex: per index neither
// succeeded, failed nor running, its uncounted failed pod of the highest failure count and the
// latest end.
func podsAwaitingReplacement(job *batchv1.Job, s *jobPods) map[int]*corev1.Pod {
	running := map[int]bool{}
	for _, p := range s.active {
		if ix, ok := completionIndex(p, job.Spec.Completions); ok {
			running[ix] = true
		}
	}
	out := map[int]*corev1.Pod{}
	for _, p := range s.failed {
		ix, ok := completionIndex(p, job.Spec.Completions)
		if !ok || running[ix] || s.succeededIndexes[ix] || s.failedIndexes[ix] || !hasString(p.Finalizers, batchv1.JobTrackingFinalizer) {
			continue
		}
		if last := out[ix]; last == nil || absoluteFailureCount(last) <= absoluteFailureCount(p) && !podFinishedAt(p).Before(podFinishedAt(last)) {
			out[ix] = p
		}
	}
	return out
}

func absoluteFailureCount(p *corev1.Pod) int32 {
	counted, ignored := indexFailureCounts(p)
	return counted + ignored
}

// indexBackoff is how long an index still waits before its replacement pod: the pod failure
// back-off for the failures its last failed pod carries, plus that one, from that failure.
func indexBackoff(last *corev1.Pod, base time.Duration) time.Duration {
	if last == nil {
		return 0
	}
	return time.Until(podFinishedAt(last).Add(backoffDelay(base, int(absoluteFailureCount(last))+1)))
}

// indexPod makes pod the one of a completion index, as upstream: the index annotation and
// label, the JOB_COMPLETION_INDEX variable, the hostname <job>-<index> and the name
// <job>-<index>-<random>.
func indexPod(pod *corev1.Pod, job string, ix int) {
	s := strconv.Itoa(ix)
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[batchv1.JobCompletionIndexAnnotation] = s
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	pod.Labels[batchv1.JobCompletionIndexAnnotation] = s
	if pod.Spec.Hostname == "" {
		pod.Spec.Hostname = job + "-" + s
	}
	suffix := "-" + s + "-"
	pod.GenerateName = job + suffix
	if len(pod.GenerateName) > maxGeneratedNameLength {
		pod.GenerateName = pod.GenerateName[:maxGeneratedNameLength-len(suffix)] + suffix
	}
	env := corev1.EnvVar{Name: "JOB_COMPLETION_INDEX", ValueFrom: &corev1.EnvVarSource{
		FieldRef: &corev1.ObjectFieldSelector{FieldPath: fmt.Sprintf("metadata.labels['%s']", batchv1.JobCompletionIndexAnnotation)}}}
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			if !hasEnv(list[i].Env, env.Name) {
				list[i].Env = append(list[i].Env, env)
			}
		}
	}
}

// maxGeneratedNameLength is the longest generateName the API server keeps whole.
const maxGeneratedNameLength = 63 - 5

func hasEnv(env []corev1.EnvVar, name string) bool {
	for _, e := range env {
		if e.Name == name {
			return true
		}
	}
	return false
}

// completionIndex is the index a pod of an Indexed Job runs, when valid.
func completionIndex(p *corev1.Pod, completions *int32) (int, bool) {
	v, ok := p.Annotations[batchv1.JobCompletionIndexAnnotation]
	if !ok {
		return 0, false
	}
	ix, err := strconv.Atoi(v)
	return ix, err == nil && ix >= 0 && ix < int(ptr.Deref(completions, 0))
}

// failureBackoff is how long the Job controller still waits before it creates a pod: the
// back-off for the failures since the last success, from the last failure.
func failureBackoff(succeededPods, failedPods []*corev1.Pod, base time.Duration) time.Duration {
	var lastSuccess time.Time
	for _, p := range succeededPods {
		if t := podFinishedAt(p); t.After(lastSuccess) {
			lastSuccess = t
		}
	}
	var failures int
	var lastFailure time.Time
	for _, p := range failedPods {
		t := podFinishedAt(p)
		if !t.After(lastSuccess) {
			continue
		}
		failures++
		if t.After(lastFailure) {
			lastFailure = t
		}
	}
	if failures == 0 {
		return 0
	}
	return time.Until(lastFailure.Add(backoffDelay(base, failures)))
}

// backoffDelay is the Job controller's delay after failures failures: base doubled for each
// failure after the first, at most maxPodFailureBackoff.
func backoffDelay(base time.Duration, failures int) time.Duration {
	delay := base
	for i := 1; i < failures && delay < maxPodFailureBackoff; i++ {
		delay *= 2
	}
	return min(delay, maxPodFailureBackoff)
}

// podFinishedAt is when a finished pod's containers ended, as upstream reads it: their
// finishedAt, else the Ready condition's turn to False, else when it was deleted (the
// deletionTimestamp less the grace period), else creation.
func podFinishedAt(p *corev1.Pod) time.Time {
	var last time.Time
	all := len(p.Status.ContainerStatuses) > 0
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Terminated == nil || cs.State.Terminated.FinishedAt.IsZero() {
			all = false
			break
		}
		if t := cs.State.Terminated.FinishedAt.Time; t.After(last) {
			last = t
		}
	}
	if all {
		return last
	}
	if c := podCondition(p, corev1.PodReady); c != nil && c.Status == corev1.ConditionFalse && !c.LastTransitionTime.IsZero() {
		return c.LastTransitionTime.Time
	}
	if p.DeletionTimestamp != nil {
		return p.DeletionTimestamp.Add(-time.Duration(ptr.Deref(p.DeletionGracePeriodSeconds, 0)) * time.Second)
	}
	return p.CreationTimestamp.Time
}

// parseIndexes reads completedIndexes ("0-3,5,7") below completions.
func parseIndexes(s string, completions int32) []int {
	var out []int
	for _, part := range strings.Split(s, ",") {
		if part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		first, err := strconv.Atoi(lo)
		if err != nil {
			continue
		}
		last := first
		if isRange {
			if last, err = strconv.Atoi(hi); err != nil {
				continue
			}
		}
		for ix := max(first, 0); ix <= last && ix < int(completions); ix++ {
			out = append(out, ix)
		}
	}
	return out
}

// formatIndexes writes indexes in upstream's compressed form: ranges of three or more as
// "first-last", pairs and single indexes listed ("0-3,5,6,9").
func formatIndexes(set map[int]bool) string {
	list := make([]int, 0, len(set))
	for ix := range set {
		list = append(list, ix)
	}
	sort.Ints(list)
	var b strings.Builder
	for i := 0; i < len(list); {
		k := i
		for k+1 < len(list) && list[k+1] == list[k]+1 {
			k++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(list[i]))
		switch {
		case k == i+1:
			b.WriteString("," + strconv.Itoa(list[k]))
		case k > i+1:
			b.WriteString("-" + strconv.Itoa(list[k]))
		}
		i = k + 1
	}
	return b.String()
}

func hasString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// removeFinalizer drops one finalizer with a JSON patch guarded by the object's resourceVersion.
func removeFinalizer(ctx context.Context, c *cluster, obj client.Object, finalizer string) error {
	var keep []string
	for _, f := range obj.GetFinalizers() {
		if f != finalizer {
			keep = append(keep, f)
		}
	}
	body, _ := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": obj.GetResourceVersion(), "finalizers": keep}})
	return c.client.Patch(ctx, obj.DeepCopyObject().(client.Object), client.RawPatch(types.MergePatchType, body))
}
