package kinds

import (
	"context"
	"maps"
	"math"
	"reflect"
	"strconv"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
)

// jobStrategy: selected by status.successful (upstream's name for status.succeeded).
type jobStrategy struct{ base }

func init() {
	register(jobStrategy{newBase(resource{batchv1.SchemeGroupVersion, "jobs", "Job", true,
		nil, []string{"all"}, []string{"status"}}, withGeneration)})
}

var jobFieldLabels = allowedLabels("metadata.name", "metadata.namespace", "status.successful")

func (jobStrategy) FieldLabel(label string) (string, bool) { return jobFieldLabels(label) }

// Default is upstream's SetObjectDefaults_Job (pkg/apis/batch/v1), applied on every write as
// decoding applies it: completions and parallelism 1 when neither is set, else parallelism 1;
// backoffLimit 6, or unlimited (MaxInt32) with backoffLimitPerIndex; the Job's labels from its
// template's when it has none; NonIndexed; not suspended; podReplacementPolicy Failed with a
// podFailurePolicy, else TerminatingOrFailed; manualSelector false; an onPodConditions
// pattern's status True; the pod template's defaults.
func (jobStrategy) Default(obj runtime.Object) { defaultJob(obj.(*batchv1.Job)) }

func defaultJob(j *batchv1.Job) {
	s := &j.Spec
	if s.Completions == nil && s.Parallelism == nil {
		s.Completions = ptr.To[int32](1)
		s.Parallelism = ptr.To[int32](1)
	}
	if s.Parallelism == nil {
		s.Parallelism = ptr.To[int32](1)
	}
	if s.BackoffLimit == nil {
		if s.BackoffLimitPerIndex != nil {
			s.BackoffLimit = ptr.To[int32](math.MaxInt32)
		} else {
			s.BackoffLimit = ptr.To[int32](6)
		}
	}
	if labels := s.Template.Labels; labels != nil && len(j.Labels) == 0 {
		j.Labels = labels
	}
	if s.CompletionMode == nil {
		s.CompletionMode = ptr.To(batchv1.NonIndexedCompletion)
	}
	if s.Suspend == nil {
		s.Suspend = ptr.To(false)
	}
	if s.PodReplacementPolicy == nil {
		if s.PodFailurePolicy != nil {
			s.PodReplacementPolicy = ptr.To(batchv1.Failed)
		} else {
			s.PodReplacementPolicy = ptr.To(batchv1.TerminatingOrFailed)
		}
	}
	if s.ManualSelector == nil {
		s.ManualSelector = ptr.To(false)
	}
	if p := s.PodFailurePolicy; p != nil {
		for i := range p.Rules {
			for k := range p.Rules[i].OnPodConditions {
				if p.Rules[i].OnPodConditions[k].Status == "" {
					p.Rules[i].OnPodConditions[k].Status = corev1.ConditionTrue
				}
			}
		}
	}
	defaultPodSpec(&s.Template.Spec)
}

// defaultedJob is a stored Job with today's defaults, as upstream decodes it from etcd: a Job
// stored before a default existed compares with an update as if it had it.
func defaultedJob(obj runtime.Object) *batchv1.Job {
	j := obj.(*batchv1.Job).DeepCopy()
	defaultJob(j)
	return j
}

// The labels the API server generated before batch.kubernetes.io/ (upstream's
// batch.LegacyJobNameLabel, batch.LegacyControllerUidLabel); pods still carry them.
const (
	legacyJobNameLabel       = "job-name"
	legacyControllerUIDLabel = "controller-uid"
)

// PrepareForCreate generates the selector and the template's labels from the Job's UID unless
// it sets manualSelector, as upstream's job strategy does: labels the template already has are
// kept (validation refuses wrong ones), and the selector gets controller-uid.
func (s jobStrategy) PrepareForCreate(ctx context.Context, obj runtime.Object) {
	s.base.PrepareForCreate(ctx, obj)
	j := obj.(*batchv1.Job)
	// Upstream's defaulting hands an unlabelled Job its template's label map, so the labels
	// generated below land in both; and as it defaults the Job again on every read, a Job
	// without labels shows its template's.
	inherit := len(j.Labels) == 0 || sameMap(j.Labels, j.Spec.Template.Labels)
	defer func() {
		if inherit && j.Spec.Template.Labels != nil {
			j.Labels = maps.Clone(j.Spec.Template.Labels)
		}
	}()
	if ptr.Deref(j.Spec.ManualSelector, false) {
		return
	}
	if j.Spec.Template.Labels == nil {
		j.Spec.Template.Labels = map[string]string{}
	}
	for _, l := range []struct{ key, value string }{{legacyJobNameLabel, j.Name}, {batchv1.JobNameLabel, j.Name},
		{legacyControllerUIDLabel, string(j.UID)}, {batchv1.ControllerUidLabel, string(j.UID)}} {
		if _, found := j.Spec.Template.Labels[l.key]; !found {
			j.Spec.Template.Labels[l.key] = l.value
		}
	}
	if j.Spec.Selector == nil {
		j.Spec.Selector = &metav1.LabelSelector{}
	}
	if j.Spec.Selector.MatchLabels == nil {
		j.Spec.Selector.MatchLabels = map[string]string{}
	}
	if _, found := j.Spec.Selector.MatchLabels[batchv1.ControllerUidLabel]; !found {
		j.Spec.Selector.MatchLabels[batchv1.ControllerUidLabel] = string(j.UID)
	}
}

// PrepareForUpdate keeps the stored status and bumps the generation when the spec changed from
// the stored one with its defaults.
func (s jobStrategy) PrepareForUpdate(ctx context.Context, obj, old runtime.Object) {
	s.base.PrepareForUpdate(ctx, obj, defaultedJob(old))
	if j := obj.(*batchv1.Job); sameMap(j.Labels, j.Spec.Template.Labels) {
		j.Labels = maps.Clone(j.Labels)
	}
}

// sameMap reports whether a and b are one map (Default shares the template's labels).
func sameMap(a, b map[string]string) bool {
	return a != nil && b != nil && reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

func (jobStrategy) SelectableFields(obj runtime.Object) fields.Set {
	j := obj.(*batchv1.Job)
	s := metaFields(j, true)
	s["status.successful"] = strconv.FormatInt(int64(j.Status.Succeeded), 10)
	return s
}
