package kinds

import (
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
)

// statefulSetStrategy: defaults, a generation, the scale subresource on spec.replicas.
type statefulSetStrategy struct{ base }

func init() {
	register(statefulSetStrategy{newBase(resource{appsv1.SchemeGroupVersion, "statefulsets", "StatefulSet", true,
		[]string{"sts"}, []string{"all"}, []string{"scale", "status"}}, withGeneration)})
}

func (statefulSetStrategy) Default(obj runtime.Object) {
	ss := obj.(*appsv1.StatefulSet)
	if ss.Spec.Replicas == nil {
		ss.Spec.Replicas = ptr.To[int32](1)
	}
	if ss.Spec.PodManagementPolicy == "" {
		ss.Spec.PodManagementPolicy = appsv1.OrderedReadyPodManagement
	}
	if ss.Spec.UpdateStrategy.Type == "" {
		ss.Spec.UpdateStrategy.Type = appsv1.RollingUpdateStatefulSetStrategyType
	}
	if ss.Spec.RevisionHistoryLimit == nil {
		ss.Spec.RevisionHistoryLimit = ptr.To[int32](10)
	}
	defaultPodSpec(&ss.Spec.Template.Spec)
}

var statefulSetScale = &Scale{
	Read: func(o runtime.Object) (int32, int32, string) {
		s := o.(*appsv1.StatefulSet)
		return replicas(s.Spec.Replicas), s.Status.Replicas, formatSelector(s.Spec.Selector)
	},
	SetReplicas: func(o runtime.Object, n int32) { o.(*appsv1.StatefulSet).Spec.Replicas = &n },
}

func (statefulSetStrategy) Scale() *Scale { return statefulSetScale }

func (statefulSetStrategy) Printer() Printer { return statefulSetPrinter }

var statefulSetPrinter = Printer{
	Columns: []metav1.TableColumnDefinition{colName, col("Ready", "string", 0), colAge, col("Containers", "string", 1), col("Images", "string", 1)},
	Cells: func(o runtime.Object) []any {
		s := o.(*appsv1.StatefulSet)
		names, images := containers(s.Spec.Template.Spec.Containers)
		return []any{s.Name, readyOf(s.Status.ReadyReplicas, replicas(s.Spec.Replicas)), age(s.CreationTimestamp), names, images}
	},
}
