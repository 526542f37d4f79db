package kinds

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/utils/ptr"
)

// podStrategy: pods start Pending, are selected by node, phase and IP, and are deleted gracefully
// (a pod on a node stays Terminating until its kubelet has stopped it).
type podStrategy struct{ base }

func init() {
	register(podStrategy{newBase(resource{corev1.SchemeGroupVersion, "pods", "Pod", true,
		[]string{"po"}, []string{"all"}, []string{"binding", "eviction", "log", "portforward", "status"}}, withGeneration)})
}

func (podStrategy) Default(obj runtime.Object) { defaultPodSpec(&obj.(*corev1.Pod).Spec) }

func (s podStrategy) PrepareForCreate(ctx context.Context, obj runtime.Object) {
	s.base.PrepareForCreate(ctx, obj)
	pod := obj.(*corev1.Pod)
	pod.Status.Phase = corev1.PodPending
	pod.Status.QOSClass = podQOS(&pod.Spec)
	addDefaultTolerationSeconds(&pod.Spec)
}

// defaultTolerationSeconds is how long a pod stays on a not-ready or unreachable node before
// the taint eviction controller deletes it, unless it says otherwise.
const defaultTolerationSeconds int64 = 300

// addDefaultTolerationSeconds is the DefaultTolerationSeconds admission plugin (on in every
// kube-apiserver): a pod that tolerates neither taint's NoExecute gets a toleration of 300 s for it.
func addDefaultTolerationSeconds(spec *corev1.PodSpec) {
	for _, key := range []string{corev1.TaintNodeNotReady, corev1.TaintNodeUnreachable} {
		tolerated := false
		for _, t := range spec.Tolerations {
			if (t.Key == key || t.Key == "") &&
				(t.Effect == corev1.TaintEffectNoExecute || t.Effect == "") {
				tolerated = true
				break
			}
		}
		if !tolerated {
			spec.Tolerations = append(spec.Tolerations, corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists,
				Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To(defaultTolerationSeconds)})
		}
	}
}

// podQOS is the pod's QoS class, as the API server's pod strategy sets it at creation: cpu and
// memory limits equal to the requests in every container is Guaranteed, none at all BestEffort,
// anything else Burstable (a request left unset defaults to the limit).
func podQOS(spec *corev1.PodSpec) corev1.PodQOSClass {
	any, guaranteed := false, true
	for _, list := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for _, c := range list {
			for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
				req, hasReq := c.Resources.Requests[name]
				lim, hasLim := c.Resources.Limits[name]
				if hasReq && !req.IsZero() || hasLim && !lim.IsZero() {
					any = true
				}
				if !hasLim || lim.IsZero() || hasReq && req.Cmp(lim) != 0 {
					guaranteed = false
				}
			}
		}
	}
	switch {
	case !any:
		return corev1.PodQOSBestEffort
	case guaranteed:
		return corev1.PodQOSGuaranteed
	}
	return corev1.PodQOSBurstable
}

// CheckGracefulDelete follows the pod strategy upstream: the request's gracePeriodSeconds, else
// the pod's terminationGracePeriodSeconds; 0 for pods not on a node or already finished; 1 for
// negatives.
func (podStrategy) CheckGracefulDelete(_ context.Context, obj runtime.Object, options *metav1.DeleteOptions) bool {
	if options == nil {
		return false
	}
	pod := obj.(*corev1.Pod)
	var period int64
	switch {
	case options.GracePeriodSeconds != nil:
		period = *options.GracePeriodSeconds
	case pod.Spec.TerminationGracePeriodSeconds != nil:
		period = *pod.Spec.TerminationGracePeriodSeconds
	}
	if pod.Spec.NodeName == "" || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		period = 0
	}
	if period < 0 {
		period = 1
	}
	options.GracePeriodSeconds = &period
	return true
}

var podFieldLabels = allowedLabels("metadata.name", "metadata.namespace", "spec.nodeName", "spec.restartPolicy",
	"spec.schedulerName", "spec.serviceAccountName", "spec.hostNetwork", "status.phase",
	"status.podIP", "status.podIPs", "status.nominatedNodeName")

func (podStrategy) FieldLabel(label string) (string, bool) {
	if label == "spec.host" { // old clients
		return "spec.nodeName", true
	}
	return podFieldLabels(label)
}

func (podStrategy) SelectableFields(obj runtime.Object) fields.Set {
	p := obj.(*corev1.Pod)
	s := metaFields(p, true)
	s["spec.nodeName"] = p.Spec.NodeName
	s["spec.restartPolicy"] = string(p.Spec.RestartPolicy)
	s["spec.schedulerName"] = p.Spec.SchedulerName
	s["spec.serviceAccountName"] = p.Spec.ServiceAccountName
	s["spec.hostNetwork"] = strconv.FormatBool(p.Spec.HostNetwork)
	s["status.phase"] = string(p.Status.Phase)
	podIP := ""
	if len(p.Status.PodIPs) > 0 {
		podIP = p.Status.PodIPs[0].IP
	}
	s["status.podIP"] = podIP
	s["status.nominatedNodeName"] = p.Status.NominatedNodeName
	return s
}

func (podStrategy) Printer() Printer { return podPrinter }

var podPrinter = Printer{
	Columns: []metav1.TableColumnDefinition{colName, col("Ready", "string", 0), col("Status", "string", 0),
		col("Restarts", "string", 0), colAge, col("IP", "string", 1), col("Node", "string", 1),
		col("Nominated Node", "string", 1), col("Readiness Gates", "string", 1)},
	Cells: func(o runtime.Object) []any {
		p := o.(*corev1.Pod)
		ready, total, restarts, status := podSummary(p)
		gates := none
		if n := len(p.Spec.ReadinessGates); n > 0 {
			passed := 0
			for _, g := range p.Spec.ReadinessGates {
				for _, c := range p.Status.Conditions {
					if c.Type == g.ConditionType && c.Status == corev1.ConditionTrue {
						passed++
					}
				}
			}
			gates = fmt.Sprintf("%d/%d", passed, n)
		}
		return []any{p.Name, fmt.Sprintf("%d/%d", ready, total), status, restarts, age(p.CreationTimestamp),
			orNone(p.Status.PodIP), orNone(p.Spec.NodeName), orNone(p.Status.NominatedNodeName), gates}
	},
}

// podSummary computes READY, RESTARTS and STATUS the way kubectl shows them for the common
// cases: the pod reason or phase, overridden by a waiting/terminated container reason, and
// "Terminating" once deletion started.
func podSummary(p *corev1.Pod) (ready, total int, restarts, status string) {
	total = len(p.Spec.Containers)
	status = string(p.Status.Phase)
	if p.Status.Reason != "" {
		status = p.Status.Reason
	}
	var count int32
	var last time.Time
	for _, c := range p.Status.ContainerStatuses {
		count += c.RestartCount
		if t := c.LastTerminationState.Terminated; t != nil && t.FinishedAt.After(last) {
			last = t.FinishedAt.Time
		}
		switch {
		case c.State.Waiting != nil && c.State.Waiting.Reason != "":
			status = c.State.Waiting.Reason
		case c.State.Terminated != nil && c.State.Terminated.Reason != "":
			status = c.State.Terminated.Reason
		case c.State.Terminated != nil:
			if c.State.Terminated.Signal != 0 {
				status = fmt.Sprintf("Signal:%d", c.State.Terminated.Signal)
			} else {
				status = fmt.Sprintf("ExitCode:%d", c.State.Terminated.ExitCode)
			}
		case c.Ready && c.State.Running != nil:
			ready++
		}
	}
	if p.DeletionTimestamp != nil {
		status = "Terminating"
		if p.Status.Reason == "NodeLost" {
			status = "Unknown"
		}
	}
	restarts = strconv.Itoa(int(count))
	if count > 0 && !last.IsZero() {
		restarts = fmt.Sprintf("%d (%s ago)", count, duration.HumanDuration(time.Since(last)))
	}
	return ready, total, restarts, status
}

// defaultPodSpec applies the pod spec defaults clients visibly rely on (kubectl columns, apply
// diffs); the real defaulting functions live in k8s.io/kubernetes, which is not importable.
func defaultPodSpec(s *corev1.PodSpec) {
	if s.RestartPolicy == "" {
		s.RestartPolicy = corev1.RestartPolicyAlways
	}
	if s.DNSPolicy == "" {
		s.DNSPolicy = corev1.DNSClusterFirst
	}
	if s.SchedulerName == "" {
		s.SchedulerName = corev1.DefaultSchedulerName
	}
	if s.TerminationGracePeriodSeconds == nil {
		s.TerminationGracePeriodSeconds = ptr.To[int64](corev1.DefaultTerminationGracePeriodSeconds)
	}
	for _, list := range [][]corev1.Container{s.InitContainers, s.Containers} {
		for i := range list {
			defaultContainer(&list[i])
		}
	}
}

func defaultContainer(c *corev1.Container) {
	if c.ImagePullPolicy == "" {
		// Untagged or :latest images are always pulled.
		image := c.Image
		if i := strings.LastIndex(image, "@"); i >= 0 {
			image = image[:i] + ":digest"
		}
		if tag := image[strings.LastIndex(image, "/")+1:]; !strings.Contains(tag, ":") || strings.HasSuffix(tag, ":latest") {
			c.ImagePullPolicy = corev1.PullAlways
		} else {
			c.ImagePullPolicy = corev1.PullIfNotPresent
		}
	}
	if c.TerminationMessagePath == "" {
		c.TerminationMessagePath = corev1.TerminationMessagePathDefault
	}
	if c.TerminationMessagePolicy == "" {
		c.TerminationMessagePolicy = corev1.TerminationMessageReadFile
	}
	for i := range c.Ports {
		if c.Ports[i].Protocol == "" {
			c.Ports[i].Protocol = corev1.ProtocolTCP
		}
	}
}
