package kinds

import (
	"strconv"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
)

// jobStrategy: selected by status.successful (upstream's name for status.succeeded).
type jobStrategy struct{ base }

func init() {
	register(jobStrategy{newBase(resource{batchv1.SchemeGroupVersion, "jobs", "Job", true,
		nil, []string{"all"}, []string{"status"}}, withGeneration)})
}

var jobFieldLabels = allowedLabels("metadata.name", "metadata.namespace", "status.successful")

func (jobStrategy) FieldLabel(label string) (string, bool) { return jobFieldLabels(label) }

func (jobStrategy) SelectableFields(obj runtime.Object) fields.Set {
	j := obj.(*batchv1.Job)
	s := metaFields(j, true)
	s["status.successful"] = strconv.FormatInt(int64(j.Status.Succeeded), 10)
	return s
}
