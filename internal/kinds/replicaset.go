package kinds

import (
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
)

// replicaSetStrategy: defaults, a generation, the scale subresource on spec.replicas.
type replicaSetStrategy struct{ base }

func init() {
	register(replicaSetStrategy{newBase(resource{appsv1.SchemeGroupVersion, "replicasets", "ReplicaSet", true,
		[]string{"rs"}, []string{"all"}, []string{"scale", "status"}}, withGeneration)})
}

func (replicaSetStrategy) Default(obj runtime.Object) {
	rs := obj.(*appsv1.ReplicaSet)
	if rs.Spec.Replicas == nil {
		rs.Spec.Replicas = ptr.To[int32](1)
	}
	defaultPodSpec(&rs.Spec.Template.Spec)
}

var replicaSetScale = &Scale{
	Read: func(o runtime.Object) (int32, int32, string) {
		r := o.(*appsv1.ReplicaSet)
		return replicas(r.Spec.Replicas), r.Status.Replicas, formatSelector(r.Spec.Selector)
	},
	SetReplicas: func(o runtime.Object, n int32) { o.(*appsv1.ReplicaSet).Spec.Replicas = &n },
}

func (replicaSetStrategy) Scale() *Scale { return replicaSetScale }

func (replicaSetStrategy) Printer() Printer { return replicaSetPrinter }

var replicaSetPrinter = Printer{
	Columns: []metav1.TableColumnDefinition{colName, col("Desired", "integer", 0), col("Current", "integer", 0),
		col("Ready", "integer", 0), colAge, col("Containers", "string", 1), col("Images", "string", 1), col("Selector", "string", 1)},
	Cells: func(o runtime.Object) []any {
		r := o.(*appsv1.ReplicaSet)
		names, images := containers(r.Spec.Template.Spec.Containers)
		return []any{r.Name, int64(replicas(r.Spec.Replicas)), int64(r.Status.Replicas), int64(r.Status.ReadyReplicas),
			age(r.CreationTimestamp), names, images, labelSelector(r.Spec.Selector)}
	},
}
