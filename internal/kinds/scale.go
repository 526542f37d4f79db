package kinds

import (
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Scale maps a workload's replicas and selector onto the autoscaling/v1 Scale view its /scale
// subresource serves, as upstream's scale paths do.
type Scale struct {
	// Read returns the desired and current replicas and the label selector, formatted.
	Read func(obj runtime.Object) (desired, current int32, selector string)
	// SetReplicas sets the desired replicas.
	SetReplicas func(obj runtime.Object, n int32)
}

// ScaleOf returns the Scale view of obj; it carries the workload's identity only, like upstream.
func (s *Scale) ScaleOf(obj runtime.Object) *autoscalingv1.Scale {
	m := obj.(metav1.Object)
	desired, current, selector := s.Read(obj)
	return &autoscalingv1.Scale{
		TypeMeta: metav1.TypeMeta{APIVersion: autoscalingv1.SchemeGroupVersion.String(), Kind: "Scale"},
		ObjectMeta: metav1.ObjectMeta{Name: m.GetName(), Namespace: m.GetNamespace(), UID: m.GetUID(),
			ResourceVersion: m.GetResourceVersion(), CreationTimestamp: m.GetCreationTimestamp()},
		Spec:   autoscalingv1.ScaleSpec{Replicas: desired},
		Status: autoscalingv1.ScaleStatus{Replicas: current, Selector: selector},
	}
}

// formatSelector renders a workload's label selector as the Scale's status.selector.
func formatSelector(sel *metav1.LabelSelector) string {
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return ""
	}
	return s.String()
}
