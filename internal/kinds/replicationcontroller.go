package kinds

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
)

// replicationControllerStrategy: selected by status.replicas, scaled on spec.replicas.
type replicationControllerStrategy struct{ base }

func init() {
	register(replicationControllerStrategy{newBase(resource{corev1.SchemeGroupVersion, "replicationcontrollers",
		"ReplicationController", true, []string{"rc"}, []string{"all"}, []string{"scale", "status"}}, withGeneration)})
}

var replicationControllerFieldLabels = allowedLabels("metadata.name", "metadata.namespace", "status.replicas")

func (replicationControllerStrategy) FieldLabel(label string) (string, bool) {
	return replicationControllerFieldLabels(label)
}

func (replicationControllerStrategy) SelectableFields(obj runtime.Object) fields.Set {
	rc := obj.(*corev1.ReplicationController)
	s := metaFields(rc, true)
	s["status.replicas"] = strconv.Itoa(int(rc.Status.Replicas))
	return s
}

var replicationControllerScale = &Scale{
	Read: func(o runtime.Object) (int32, int32, string) {
		rc := o.(*corev1.ReplicationController)
		return replicas(rc.Spec.Replicas), rc.Status.Replicas, labels.SelectorFromSet(rc.Spec.Selector).String()
	},
	SetReplicas: func(o runtime.Object, n int32) { o.(*corev1.ReplicationController).Spec.Replicas = &n },
}

func (replicationControllerStrategy) Scale() *Scale { return replicationControllerScale }
