package kinds

import (
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// deploymentStrategy: defaults, a generation (a spec change is a rollout), the scale subresource on
// spec.replicas.
type deploymentStrategy struct{ base }

func init() {
	register(deploymentStrategy{newBase(resource{appsv1.SchemeGroupVersion, "deployments", "Deployment", true,
		[]string{"deploy"}, []string{"all"}, []string{"scale", "status"}}, withGeneration)})
}

func (deploymentStrategy) Default(obj runtime.Object) {
	d := obj.(*appsv1.Deployment)
	if d.Spec.Replicas == nil {
		d.Spec.Replicas = ptr.To[int32](1)
	}
	if d.Spec.Strategy.Type == "" {
		d.Spec.Strategy.Type = appsv1.RollingUpdateDeploymentStrategyType
	}
	if d.Spec.Strategy.Type == appsv1.RollingUpdateDeploymentStrategyType {
		if d.Spec.Strategy.RollingUpdate == nil {
			d.Spec.Strategy.RollingUpdate = &appsv1.RollingUpdateDeployment{}
		}
		quarter := intstr.FromString("25%")
		if d.Spec.Strategy.RollingUpdate.MaxUnavailable == nil {
			d.Spec.Strategy.RollingUpdate.MaxUnavailable = &quarter
		}
		if d.Spec.Strategy.RollingUpdate.MaxSurge == nil {
			d.Spec.Strategy.RollingUpdate.MaxSurge = &quarter
		}
	}
	if d.Spec.RevisionHistoryLimit == nil {
		d.Spec.RevisionHistoryLimit = ptr.To[int32](10)
	}
	if d.Spec.ProgressDeadlineSeconds == nil {
		d.Spec.ProgressDeadlineSeconds = ptr.To[int32](600)
	}
	defaultPodSpec(&d.Spec.Template.Spec)
}

var deploymentScale = &Scale{
	Read: func(o runtime.Object) (int32, int32, string) {
		d := o.(*appsv1.Deployment)
		return replicas(d.Spec.Replicas), d.Status.Replicas, formatSelector(d.Spec.Selector)
	},
	SetReplicas: func(o runtime.Object, n int32) { o.(*appsv1.Deployment).Spec.Replicas = &n },
}

func (deploymentStrategy) Scale() *Scale { return deploymentScale }

func (deploymentStrategy) Printer() Printer { return deploymentPrinter }

var deploymentPrinter = Printer{
	Columns: []metav1.TableColumnDefinition{colName, col("Ready", "string", 0), col("Up-to-date", "string", 0),
		col("Available", "string", 0), colAge, col("Containers", "string", 1), col("Images", "string", 1), col("Selector", "string", 1)},
	Cells: func(o runtime.Object) []any {
		d := o.(*appsv1.Deployment)
		names, images := containers(d.Spec.Template.Spec.Containers)
		return []any{d.Name, readyOf(d.Status.ReadyReplicas, replicas(d.Spec.Replicas)),
			int64(d.Status.UpdatedReplicas), int64(d.Status.AvailableReplicas), age(d.CreationTimestamp),
			names, images, labelSelector(d.Spec.Selector)}
	},
}
