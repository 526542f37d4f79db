package kinds

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// podTemplateStrategy: a pod template gets the pod spec defaults and a generation.
type podTemplateStrategy struct{ base }

func init() {
	register(podTemplateStrategy{newBase(resource{corev1.SchemeGroupVersion, "podtemplates", "PodTemplate", true,
		nil, nil, nil}, withGeneration)})
}

func (podTemplateStrategy) Default(obj runtime.Object) {
	defaultPodSpec(&obj.(*corev1.PodTemplate).Template.Spec)
}
