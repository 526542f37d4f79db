package kinds

import (
	"context"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The parts of upstream's apps validation that keep the workload controllers sane (package
// simulate): a selector that is set, not empty and matches the template's labels (a ReplicaSet
// whose pods it does not select would create pods without end), non-negative counts, a template
// with containers that restarts Always, an immutable selector, and rolling-update bounds.

var specPath = field.NewPath("spec")

func validateReplicated(kind string, replicas *int32, minReadySeconds int32, selector *metav1.LabelSelector, tmpl *corev1.PodTemplateSpec) field.ErrorList {
	var errs field.ErrorList
	if replicas != nil {
		errs = append(errs, nonNegative(int64(*replicas), specPath.Child("replicas"))...)
	}
	errs = append(errs, nonNegative(int64(minReadySeconds), specPath.Child("minReadySeconds"))...)
	if selector == nil {
		return append(errs, field.Required(specPath.Child("selector"), ""))
	}
	errs = append(errs, metav1validation.ValidateLabelSelector(selector, metav1validation.LabelSelectorValidationOptions{}, specPath.Child("selector"))...)
	if len(selector.MatchLabels)+len(selector.MatchExpressions) == 0 {
		errs = append(errs, field.Invalid(specPath.Child("selector"), selector, "empty selector is invalid for "+kind))
	}
	sel, err := metav1.LabelSelectorAsSelector(selector)
	if err != nil {
		return append(errs, field.Invalid(specPath.Child("selector"), selector, "invalid label selector"))
	}
	tp := specPath.Child("template")
	if !sel.Empty() && !sel.Matches(labels.Set(tmpl.Labels)) {
		errs = append(errs, field.Invalid(tp.Child("metadata", "labels"), tmpl.Labels, "`selector` does not match template `labels`"))
	}
	if len(tmpl.Spec.Containers) == 0 {
		errs = append(errs, field.Required(tp.Child("spec", "containers"), ""))
	}
	if p := tmpl.Spec.RestartPolicy; p != "" && p != corev1.RestartPolicyAlways {
		errs = append(errs, field.NotSupported(tp.Child("spec", "restartPolicy"), p, []string{string(corev1.RestartPolicyAlways)}))
	}
	return errs
}

func nonNegative(v int64, path *field.Path) field.ErrorList {
	if v < 0 {
		return field.ErrorList{field.Invalid(path, v, "must be greater than or equal to 0")}
	}
	return nil
}

// selectorImmutable: apps/v1 workloads keep their selector.
func selectorImmutable(cur, old *metav1.LabelSelector) field.ErrorList {
	if !apiequality.Semantic.DeepEqual(cur, old) {
		return field.ErrorList{field.Invalid(specPath.Child("selector"), cur, "field is immutable")}
	}
	return nil
}

func (s deploymentStrategy) Validate(ctx context.Context, obj runtime.Object) field.ErrorList {
	return append(s.base.Validate(ctx, obj), validateDeploymentSpec(obj.(*appsv1.Deployment))...)
}

func validateDeploymentSpec(d *appsv1.Deployment) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, validateReplicated("deployment", d.Spec.Replicas, d.Spec.MinReadySeconds, d.Spec.Selector, &d.Spec.Template)...)
	if d.Spec.RevisionHistoryLimit != nil {
		errs = append(errs, nonNegative(int64(*d.Spec.RevisionHistoryLimit), specPath.Child("revisionHistoryLimit"))...)
	}
	if p := d.Spec.ProgressDeadlineSeconds; p != nil && *p <= d.Spec.MinReadySeconds {
		errs = append(errs, field.Invalid(specPath.Child("progressDeadlineSeconds"), *p, "must be greater than minReadySeconds"))
	}
	if ru := d.Spec.Strategy.RollingUpdate; ru != nil && d.Spec.Strategy.Type == appsv1.RollingUpdateDeploymentStrategyType {
		path := specPath.Child("strategy", "rollingUpdate")
		if isZero(ru.MaxUnavailable) && isZero(ru.MaxSurge) {
			errs = append(errs, field.Invalid(path.Child("maxUnavailable"), ru.MaxUnavailable.String(), "may not be 0 when `maxSurge` is 0"))
		}
		if ru.MaxUnavailable != nil && ru.MaxUnavailable.Type == intstr.String {
			if v, err := intstr.GetScaledValueFromIntOrPercent(ru.MaxUnavailable, 100, false); err == nil && v > 100 {
				errs = append(errs, field.Invalid(path.Child("maxUnavailable"), ru.MaxUnavailable.String(), "must not be greater than 100%"))
			}
		}
	}
	if d.Spec.Strategy.Type == appsv1.RecreateDeploymentStrategyType && d.Spec.Strategy.RollingUpdate != nil {
		errs = append(errs, field.Forbidden(specPath.Child("strategy", "rollingUpdate"), "may not be specified when strategy `type` is 'Recreate'"))
	}
	return errs
}

func isZero(v *intstr.IntOrString) bool {
	if v == nil {
		return false
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(v, 100, true)
	return err == nil && n == 0
}

// ValidateUpdate: the spec's rules (rest.BeforeUpdate validates the metadata) and the selector.
func (s deploymentStrategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	return append(validateDeploymentSpec(obj.(*appsv1.Deployment)), selectorImmutable(obj.(*appsv1.Deployment).Spec.Selector, old.(*appsv1.Deployment).Spec.Selector)...)
}

func (s replicaSetStrategy) Validate(ctx context.Context, obj runtime.Object) field.ErrorList {
	return append(s.base.Validate(ctx, obj), validateReplicaSetSpec(obj.(*appsv1.ReplicaSet))...)
}

func validateReplicaSetSpec(r *appsv1.ReplicaSet) field.ErrorList {
	return validateReplicated("replicaset", r.Spec.Replicas, r.Spec.MinReadySeconds, r.Spec.Selector, &r.Spec.Template)
}

func (s replicaSetStrategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	return append(validateReplicaSetSpec(obj.(*appsv1.ReplicaSet)), selectorImmutable(obj.(*appsv1.ReplicaSet).Spec.Selector, old.(*appsv1.ReplicaSet).Spec.Selector)...)
}

func (s daemonSetStrategy) Validate(ctx context.Context, obj runtime.Object) field.ErrorList {
	return append(s.base.Validate(ctx, obj), validateDaemonSetSpec(obj.(*appsv1.DaemonSet))...)
}

func validateDaemonSetSpec(d *appsv1.DaemonSet) field.ErrorList {
	return validateReplicated("daemonset", nil, d.Spec.MinReadySeconds, d.Spec.Selector, &d.Spec.Template)
}

func (s daemonSetStrategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	return append(validateDaemonSetSpec(obj.(*appsv1.DaemonSet)), selectorImmutable(obj.(*appsv1.DaemonSet).Spec.Selector, old.(*appsv1.DaemonSet).Spec.Selector)...)
}

func (s statefulSetStrategy) Validate(ctx context.Context, obj runtime.Object) field.ErrorList {
	return append(s.base.Validate(ctx, obj), validateStatefulSetSpec(obj.(*appsv1.StatefulSet))...)
}

func validateStatefulSetSpec(ss *appsv1.StatefulSet) field.ErrorList {
	return validateReplicated("statefulset", ss.Spec.Replicas, ss.Spec.MinReadySeconds, ss.Spec.Selector, &ss.Spec.Template)
}

func (s statefulSetStrategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	return append(validateStatefulSetSpec(obj.(*appsv1.StatefulSet)), selectorImmutable(obj.(*appsv1.StatefulSet).Spec.Selector, old.(*appsv1.StatefulSet).Spec.Selector)...)
}

// Default: a ReplicationController without a selector selects its template's labels, and one
// without labels gets them too, as upstream's defaults.
func (replicationControllerStrategy) Default(obj runtime.Object) {
	rc := obj.(*corev1.ReplicationController)
	if rc.Spec.Template != nil {
		if len(rc.Spec.Selector) == 0 {
			rc.Spec.Selector = rc.Spec.Template.Labels
		}
		if len(rc.Labels) == 0 {
			rc.Labels = rc.Spec.Template.Labels
		}
		defaultPodSpec(&rc.Spec.Template.Spec)
	}
	if rc.Spec.Replicas == nil {
		one := int32(1)
		rc.Spec.Replicas = &one
	}
}

func (s replicationControllerStrategy) Validate(ctx context.Context, obj runtime.Object) field.ErrorList {
	return append(s.base.Validate(ctx, obj), validateReplicationControllerSpec(obj.(*corev1.ReplicationController))...)
}

func (replicationControllerStrategy) ValidateUpdate(_ context.Context, obj, _ runtime.Object) field.ErrorList {
	return validateReplicationControllerSpec(obj.(*corev1.ReplicationController))
}

func validateReplicationControllerSpec(rc *corev1.ReplicationController) field.ErrorList {
	var errs field.ErrorList
	if rc.Spec.Replicas != nil {
		errs = append(errs, nonNegative(int64(*rc.Spec.Replicas), specPath.Child("replicas"))...)
	}
	errs = append(errs, nonNegative(int64(rc.Spec.MinReadySeconds), specPath.Child("minReadySeconds"))...)
	if len(rc.Spec.Selector) == 0 {
		errs = append(errs, field.Required(specPath.Child("selector"), ""))
	}
	if rc.Spec.Template == nil {
		return append(errs, field.Required(specPath.Child("template"), ""))
	}
	tp := specPath.Child("template")
	if len(rc.Spec.Selector) > 0 && !labels.SelectorFromSet(rc.Spec.Selector).Matches(labels.Set(rc.Spec.Template.Labels)) {
		errs = append(errs, field.Invalid(tp.Child("metadata", "labels"), rc.Spec.Template.Labels, "selector does not match labels in "+tp.String()))
	}
	if len(rc.Spec.Template.Spec.Containers) == 0 {
		errs = append(errs, field.Required(tp.Child("spec", "containers"), ""))
	}
	if p := rc.Spec.Template.Spec.RestartPolicy; p != "" && p != corev1.RestartPolicyAlways {
		errs = append(errs, field.NotSupported(tp.Child("spec", "restartPolicy"), p, []string{string(corev1.RestartPolicyAlways)}))
	}
	return errs
}
