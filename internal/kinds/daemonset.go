package kinds

import (
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// daemonSetStrategy: defaults and a generation.
type daemonSetStrategy struct{ base }

func init() {
	register(daemonSetStrategy{newBase(resource{appsv1.SchemeGroupVersion, "daemonsets", "DaemonSet", true,
		[]string{"ds"}, []string{"all"}, []string{"status"}}, withGeneration)})
}

func (daemonSetStrategy) Default(obj runtime.Object) {
	d := obj.(*appsv1.DaemonSet)
	if d.Spec.UpdateStrategy.Type == "" {
		d.Spec.UpdateStrategy.Type = appsv1.RollingUpdateDaemonSetStrategyType
	}
	if d.Spec.UpdateStrategy.Type == appsv1.RollingUpdateDaemonSetStrategyType {
		if d.Spec.UpdateStrategy.RollingUpdate == nil {
			d.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateDaemonSet{}
		}
		if d.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable == nil {
			d.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable = ptr.To(intstr.FromInt32(1))
		}
		if d.Spec.UpdateStrategy.RollingUpdate.MaxSurge == nil {
			d.Spec.UpdateStrategy.RollingUpdate.MaxSurge = ptr.To(intstr.FromInt32(0))
		}
	}
	if d.Spec.RevisionHistoryLimit == nil {
		d.Spec.RevisionHistoryLimit = ptr.To[int32](10)
	}
	defaultPodSpec(&d.Spec.Template.Spec)
}

func (daemonSetStrategy) Printer() Printer { return daemonSetPrinter }

var daemonSetPrinter = Printer{
	Columns: []metav1.TableColumnDefinition{colName, col("Desired", "integer", 0), col("Current", "integer", 0),
		col("Ready", "integer", 0), col("Up-to-date", "integer", 0), col("Available", "integer", 0),
		col("Node Selector", "string", 0), colAge, col("Containers", "string", 1), col("Images", "string", 1), col("Selector", "string", 1)},
	Cells: func(o runtime.Object) []any {
		d := o.(*appsv1.DaemonSet)
		names, images := containers(d.Spec.Template.Spec.Containers)
		return []any{d.Name, int64(d.Status.DesiredNumberScheduled), int64(d.Status.CurrentNumberScheduled),
			int64(d.Status.NumberReady), int64(d.Status.UpdatedNumberScheduled), int64(d.Status.NumberAvailable),
			selectorString(d.Spec.Template.Spec.NodeSelector), age(d.CreationTimestamp), names, images, labelSelector(d.Spec.Selector)}
	},
}
