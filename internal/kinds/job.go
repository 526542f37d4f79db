package kinds

import (
	"context"
	"strconv"

	batchv1 "k8s.io/api/batch/v1"
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

// PrepareForCreate generates the selector and the template's labels from the Job's UID unless
// it sets manualSelector, as upstream's job strategy does, and applies the defaults a Job
// controller reads (completions and parallelism 1, backoffLimit 6, NonIndexed).
func (s jobStrategy) PrepareForCreate(ctx context.Context, obj runtime.Object) {
	s.base.PrepareForCreate(ctx, obj)
	j := obj.(*batchv1.Job)
	if j.Spec.ManualSelector == nil || !*j.Spec.ManualSelector {
		uid, name := string(j.UID), j.Name
		if j.Spec.Template.Labels == nil {
			j.Spec.Template.Labels = map[string]string{}
		}
		for k, v := range map[string]string{batchv1.ControllerUidLabel: uid, batchv1.JobNameLabel: name,
			"controller-uid": uid, "job-name": name} {
			j.Spec.Template.Labels[k] = v
		}
		j.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{batchv1.ControllerUidLabel: uid}}
	}
	if j.Spec.Parallelism == nil {
		j.Spec.Parallelism = ptr.To[int32](1)
	}
	if j.Spec.Completions == nil && j.Spec.Parallelism != nil && *j.Spec.Parallelism == 1 {
		j.Spec.Completions = ptr.To[int32](1)
	}
	if j.Spec.BackoffLimit == nil {
		j.Spec.BackoffLimit = ptr.To[int32](6)
	}
	if j.Spec.CompletionMode == nil {
		j.Spec.CompletionMode = ptr.To(batchv1.NonIndexedCompletion)
	}
	if j.Spec.Suspend == nil {
		j.Spec.Suspend = ptr.To(false)
	}
}

func (jobStrategy) SelectableFields(obj runtime.Object) fields.Set {
	j := obj.(*batchv1.Job)
	s := metaFields(j, true)
	s["status.successful"] = strconv.FormatInt(int64(j.Status.Succeeded), 10)
	return s
}
