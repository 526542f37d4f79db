package simulate

import (
	"slices"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
)

// Pod and node facts the components share, as upstream's podutil and nodeutil state them.

// mirrorPodAnnotation marks a static pod's mirror, which its kubelet manages (package workload).
const mirrorPodAnnotation = "kubernetes.io/config.mirror"

func isMirrorPod(p *corev1.Pod) bool { _, ok := p.Annotations[mirrorPodAnnotation]; return ok }

func isTerminal(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

// isActive: counted by its controller (not terminating, not finished).
func isActive(p *corev1.Pod) bool { return p.DeletionTimestamp == nil && !isTerminal(p) }

func podCondition(p *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == t {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

func isReady(p *corev1.Pod) bool {
	c := podCondition(p, corev1.PodReady)
	return c != nil && c.Status == corev1.ConditionTrue
}

// isAvailable: ready for at least minReadySeconds, as upstream's IsPodAvailable.
func isAvailable(p *corev1.Pod, minReadySeconds int32, now time.Time) bool {
	if !isReady(p) {
		return false
	}
	c := podCondition(p, corev1.PodReady)
	return minReadySeconds == 0 || !c.LastTransitionTime.IsZero() && c.LastTransitionTime.Add(time.Duration(minReadySeconds)*time.Second).Before(now)
}

// setCondition replaces the condition of cond's type or appends it; the transition time moves
// only when the status changes. It reports whether anything changed.
func setCondition(s *corev1.PodStatus, cond corev1.PodCondition) bool {
	for i := range s.Conditions {
		old := s.Conditions[i]
		if old.Type != cond.Type {
			continue
		}
		if old.Status == cond.Status {
			cond.LastTransitionTime = old.LastTransitionTime
		}
		if old.Status == cond.Status && old.Reason == cond.Reason && old.Message == cond.Message {
			return false
		}
		s.Conditions[i] = cond
		return true
	}
	s.Conditions = append(s.Conditions, cond)
	return true
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func nodeInternalIP(n *corev1.Node) string {
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	return ""
}

// podRequests sums what a pod asks of its node, as the scheduler does: the containers' requests,
// or an init container's when larger, plus the pod's overhead.
func podRequests(spec *corev1.PodSpec) corev1.ResourceList {
	out := corev1.ResourceList{}
	for _, c := range spec.Containers {
		addResources(out, c.Resources.Requests)
	}
	for _, c := range spec.InitContainers {
		for name, q := range c.Resources.Requests {
			if cur, ok := out[name]; !ok || q.Cmp(cur) > 0 {
				out[name] = q.DeepCopy()
			}
		}
	}
	addResources(out, spec.Overhead)
	return out
}

// addPodRequests adds what podRequests returns for spec to into. A pod without init containers
// asks for the sum of its containers' requests and its overhead, which are added to into as they
// are: the scheduler sums every pod on a node for each node it weighs, and a list made per pod
// was a sixth of a fleet's CPU while its pods were scheduled.
func addPodRequests(into corev1.ResourceList, spec *corev1.PodSpec) {
	if len(spec.InitContainers) > 0 {
		addResources(into, podRequests(spec))
		return
	}
	for i := range spec.Containers {
		addResources(into, spec.Containers[i].Resources.Requests)
	}
	addResources(into, spec.Overhead)
}

func addResources(into, add corev1.ResourceList) {
	for name, q := range add {
		cur := into[name]
		cur.Add(q)
		into[name] = cur
	}
}

// discardLogger is for ToleratesTaint, which logs only invalid tolerations.
var discardLogger = logr.Discard()

// tolerates reports whether the tolerations tolerate the taint.
func tolerates(tolerations []corev1.Toleration, taint *corev1.Taint) bool {
	for i := range tolerations {
		if tolerations[i].ToleratesTaint(discardLogger, taint, false) {
			return true
		}
	}
	return false
}

// matchesNode reports whether a pod's nodeSelector and required node affinity select the node.
func matchesNode(spec *corev1.PodSpec, node *corev1.Node) bool {
	// What labels.SelectorFromSet(spec.NodeSelector).Matches does, without building a selector
	// for each node the scheduler and the DaemonSet controller ask about.
	for k, v := range spec.NodeSelector {
		if have, ok := node.Labels[k]; !ok || have != v {
			return false
		}
	}
	if spec.Affinity == nil || spec.Affinity.NodeAffinity == nil || spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return true
	}
	// The terms are ORed; an empty list matches nothing.
	for _, term := range spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		if termMatches(term, node) {
			return true
		}
	}
	return false
}

// termMatches: every expression and field of one node selector term holds (an empty term
// matches nothing, as upstream).
func termMatches(term corev1.NodeSelectorTerm, node *corev1.Node) bool {
	if len(term.MatchExpressions) == 0 && len(term.MatchFields) == 0 {
		return false
	}
	for _, req := range term.MatchExpressions {
		if !requirementMatches(req, labels.Set(node.Labels)) {
			return false
		}
	}
	for _, req := range term.MatchFields {
		// Only metadata.name is a field here; node names may be longer than label values.
		if req.Key != metav1.ObjectNameField {
			return false
		}
		switch req.Operator {
		case corev1.NodeSelectorOpIn:
			if !slices.Contains(req.Values, node.Name) {
				return false
			}
		case corev1.NodeSelectorOpNotIn:
			if slices.Contains(req.Values, node.Name) {
				return false
			}
		default:
			return false
		}
	}
	return true
}

func requirementMatches(req corev1.NodeSelectorRequirement, set labels.Set) bool {
	var op selection.Operator
	switch req.Operator {
	case corev1.NodeSelectorOpIn:
		op = selection.In
	case corev1.NodeSelectorOpNotIn:
		op = selection.NotIn
	case corev1.NodeSelectorOpExists:
		op = selection.Exists
	case corev1.NodeSelectorOpDoesNotExist:
		op = selection.DoesNotExist
	case corev1.NodeSelectorOpGt:
		op = selection.GreaterThan
	case corev1.NodeSelectorOpLt:
		op = selection.LessThan
	default:
		return false
	}
	r, err := labels.NewRequirement(req.Key, op, req.Values)
	if err != nil {
		return false
	}
	return r.Matches(set)
}

// quantity returns a resource of a list, zero when absent.
func quantity(l corev1.ResourceList, name corev1.ResourceName) resource.Quantity {
	return l[name]
}

// isGone: the object was deleted or replaced meanwhile.
func isGone(err error) bool { return apierrors.IsNotFound(err) || apierrors.IsConflict(err) }
