package kinds

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
)

// namespaceStrategy: a namespace starts Active with the kubernetes finalizer and its name label;
// spec.finalizers change only through /finalize (the namespace controller). Its deletion is the
// namespace controller's (store/namespace.go), as upstream's namespace REST replaces the generic
// delete.
type namespaceStrategy struct{ base }

func init() {
	register(namespaceStrategy{newBase(resource{corev1.SchemeGroupVersion, "namespaces", "Namespace", false,
		[]string{"ns"}, nil, []string{"status"}}, withNames(apimachineryvalidation.NameIsDNSLabel))})
}

func (namespaceStrategy) PrepareForCreate(_ context.Context, obj runtime.Object) {
	ns := obj.(*corev1.Namespace)
	ns.Generation = 0
	ns.Spec.Finalizers = []corev1.FinalizerName{corev1.FinalizerKubernetes}
	ns.Status = corev1.NamespaceStatus{Phase: corev1.NamespaceActive}
	if ns.Labels == nil {
		ns.Labels = map[string]string{}
	}
	ns.Labels[corev1.LabelMetadataName] = ns.Name
}

func (s namespaceStrategy) PrepareForUpdate(ctx context.Context, obj, old runtime.Object) {
	s.base.PrepareForUpdate(ctx, obj, old)
	obj.(*corev1.Namespace).Spec.Finalizers = old.(*corev1.Namespace).Spec.Finalizers
}

func (namespaceStrategy) FieldLabel(label string) (string, bool) {
	return label, label == "metadata.name" || label == "status.phase"
}

func (namespaceStrategy) SelectableFields(obj runtime.Object) fields.Set {
	ns := obj.(*corev1.Namespace)
	s := metaFields(ns, false)
	s["status.phase"] = string(ns.Status.Phase)
	return s
}

func (namespaceStrategy) Printer() Printer { return namespacePrinter }

var namespacePrinter = Printer{
	Columns: []metav1.TableColumnDefinition{colName, col("Status", "string", 0), colAge},
	Cells: func(o runtime.Object) []any {
		n := o.(*corev1.Namespace)
		return []any{n.Name, string(n.Status.Phase), age(n.CreationTimestamp)}
	},
}
