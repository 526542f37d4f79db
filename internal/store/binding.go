package store

import (
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The pods/binding subresource, through which kube-scheduler assigns a pod to a node: the pod's
// spec.nodeName is otherwise immutable.

var bindingsGR = schema.GroupResource{Resource: "pods/binding"}

// Bind assigns the pod binding names to binding.Target.Name, as kube-apiserver's BindingREST
// does: the binding's annotations are added to the pod's, and the pod gets PodScheduled=True. A
// pod being deleted, already bound or still gated answers 409.
func (c *Cluster) Bind(namespace string, binding *corev1.Binding, opts CreateOptions) error {
	if namespace == "" {
		return apierrors.NewBadRequest("namespace is required for namespaced resource pods")
	}
	var errs field.ErrorList
	if binding.Target.Kind != "" && binding.Target.Kind != "Node" {
		errs = append(errs, field.NotSupported(field.NewPath("target", "kind"), binding.Target.Kind, []string{"Node", "<empty>"}))
	}
	if binding.Target.Name == "" {
		errs = append(errs, field.Required(field.NewPath("target", "name"), ""))
	}
	if len(errs) > 0 {
		return apierrors.NewInvalid(schema.GroupKind{Kind: "Binding"}, binding.Name, errs)
	}
	b, ok := behaviorForGR(podsGR)
	if !ok {
		return apierrors.NewNotFound(podsGR, binding.Name)
	}
	_, err := c.writeOptimistically(podsGR, namespace, binding.Name, opts.SkipSyncWait, func(cur client.Object) (func() (client.Object, error), error) {
		if cur == nil {
			return nil, apierrors.NewNotFound(podsGR, binding.Name)
		}
		pod := cur.(*corev1.Pod)
		var refused error
		switch {
		case binding.UID != "" && binding.UID != pod.UID:
			//lint:ignore ST1005 upstream's message
			refused = fmt.Errorf("Precondition failed: UID in precondition: %v, UID in object meta: %v", binding.UID, pod.UID)
		case binding.ResourceVersion != "" && binding.ResourceVersion != pod.ResourceVersion:
			//lint:ignore ST1005 upstream's message
			refused = fmt.Errorf("Precondition failed: ResourceVersion in precondition: %v, ResourceVersion in object meta: %v", binding.ResourceVersion, pod.ResourceVersion)
		case pod.DeletionTimestamp != nil:
			refused = fmt.Errorf("pod %s is being deleted, cannot be assigned to a host", pod.Name)
		case pod.Spec.NodeName != "":
			refused = fmt.Errorf("pod %v is already assigned to node %q", pod.Name, pod.Spec.NodeName)
		case len(pod.Spec.SchedulingGates) != 0:
			refused = fmt.Errorf("pod %v has non-empty .spec.schedulingGates", pod.Name)
		}
		if refused != nil {
			return nil, apierrors.NewConflict(bindingsGR, binding.Name, refused)
		}
		next := pod.DeepCopy()
		next.Spec.NodeName = binding.Target.Name
		if len(binding.Annotations) > 0 {
			if next.Annotations == nil {
				next.Annotations = map[string]string{}
			}
			maps.Copy(next.Annotations, binding.Annotations)
		}
		setPodCondition(&next.Status, corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now()})
		internObject(next)
		return func() (client.Object, error) {
			if opts.DryRun {
				return next, nil
			}
			if err := c.admitLocked(next, cur); err != nil {
				return nil, err
			}
			c.storeLocked(b.info.GVR.GroupResource(), next, cur)
			return next, nil
		}, nil
	})
	return err
}

// setPodCondition replaces the condition of cond's type or appends it, keeping the transition
// time when the status did not change.
func setPodCondition(status *corev1.PodStatus, cond corev1.PodCondition) {
	for i := range status.Conditions {
		if status.Conditions[i].Type == cond.Type {
			if status.Conditions[i].Status == cond.Status {
				cond.LastTransitionTime = status.Conditions[i].LastTransitionTime
			}
			status.Conditions[i] = cond
			return
		}
	}
	status.Conditions = append(status.Conditions, cond)
}
