package simulate

import (
	"context"
	"encoding/json"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// jobController is kube-controller-manager's Job controller for NonIndexed Jobs whose pods
// succeed (simulated containers exit 0 after Options.JobRunTime): up to parallelism pods at once
// until completions succeeded, each carrying the batch.kubernetes.io/job-tracking finalizer until
// the controller has counted it; SuccessCriteriaMet, then Complete once no pod is left running,
// as 1.36 reports them; startTime, completionTime, ready and terminating counts; and the TTL
// after finished controller's deletion (ttlSecondsAfterFinished).
type jobController struct {
	c   *cluster
	idx int
}

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

func (j *jobController) sync(ctx context.Context, key string) error {
	job, _ := j.c.cache.get(jobsGR, key).(*batchv1.Job)
	if job == nil || job.DeletionTimestamp != nil {
		return nil
	}
	var active, succeeded, counted []*corev1.Pod
	var ready, terminating int32
	for _, obj := range j.c.cache.owned(podsGR, job.UID) {
		p := obj.(*corev1.Pod)
		switch {
		case p.Status.Phase == corev1.PodSucceeded:
			succeeded = append(succeeded, p)
		case p.DeletionTimestamp != nil:
			terminating++
		case !isTerminal(p):
			active = append(active, p)
			if isReady(p) {
				ready++
			}
		}
		if isTerminal(p) && hasString(p.Finalizers, batchv1.JobTrackingFinalizer) {
			counted = append(counted, p)
		}
	}
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	st := job.Status.DeepCopy()
	if st.StartTime == nil && !ptr.Deref(job.Spec.Suspend, false) {
		st.StartTime = &now
	}
	st.Succeeded = max(st.Succeeded, int32(len(succeeded)))
	st.Ready, st.Terminating = &ready, &terminating
	completions := job.Spec.Completions
	done := completions != nil && st.Succeeded >= *completions || completions == nil && st.Succeeded > 0
	if done && jobCondition(job, batchv1.JobSuccessCriteriaMet) == nil {
		st.Conditions = append(st.Conditions, batchv1.JobCondition{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue,
			Reason: batchv1.JobReasonCompletionsReached, Message: "Reached expected number of succeeded pods", LastProbeTime: now, LastTransitionTime: now})
	}
	if !done && job.Status.CompletionTime == nil && !ptr.Deref(job.Spec.Suspend, false) {
		want := ptr.Deref(job.Spec.Parallelism, 1)
		if completions != nil {
			want = min(want, *completions-st.Succeeded)
		}
		if n := int(want) - len(active); n > 0 {
			for range min(n, burstReplicas) {
				pod := podFromTemplate(job, &job.Spec.Template, jobKind)
				pod.GenerateName = job.Name + "-"
				pod.Finalizers = append(pod.Finalizers, batchv1.JobTrackingFinalizer)
				if err := j.c.client.Create(ctx, pod); err != nil {
					return err
				}
			}
		}
	}
	// Finished pods are counted: their tracking finalizers go.
	for _, p := range counted {
		if err := removeFinalizer(ctx, j.c, p, batchv1.JobTrackingFinalizer); err != nil && !isGone(err) {
			return err
		}
	}
	st.Active = int32(len(active))
	if done && len(active) == 0 && terminating == 0 && jobCondition(job, batchv1.JobComplete) == nil {
		st.Conditions = append(st.Conditions, batchv1.JobCondition{Type: batchv1.JobComplete, Status: corev1.ConditionTrue,
			Reason: batchv1.JobReasonCompletionsReached, Message: "Reached expected number of succeeded pods", LastProbeTime: now, LastTransitionTime: now})
		st.CompletionTime = &now
	}
	if st.CompletionTime != nil && job.Spec.TTLSecondsAfterFinished != nil {
		expires := st.CompletionTime.Add(time.Duration(*job.Spec.TTLSecondsAfterFinished) * time.Second)
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

func hasString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// removeFinalizer drops one finalizer with a JSON patch guarded by the pod's resourceVersion.
func removeFinalizer(ctx context.Context, c *cluster, p *corev1.Pod, finalizer string) error {
	var keep []string
	for _, f := range p.Finalizers {
		if f != finalizer {
			keep = append(keep, f)
		}
	}
	body, _ := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": p.ResourceVersion, "finalizers": keep}})
	return c.client.Patch(ctx, p.DeepCopy(), client.RawPatch(types.MergePatchType, body))
}
