package simulate

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// scheduler is kube-scheduler's default profile, reduced to the plugins whose effect a client
// sees: it binds each pending pod (through pods/binding, as upstream) to a node that fits it
// (NodeUnschedulable, NodeAffinity with nodeSelector, TaintToleration, NodeResourcesFit for
// cpu, memory and the pod count, VolumeBinding for its PersistentVolumeClaims: volumebinding.go)
// and prefers the least-requested one. A pod that fits nowhere gets PodScheduled=False, reason
// Unschedulable, with upstream's message and a FailedScheduling event, and is tried again when a
// node, a pod, a claim, a volume or a StorageClass changes.
type scheduler struct {
	c   *cluster
	idx int
	// unschedulable are the pods that fit nowhere at their last try; they are queued again when
	// the cluster changes in a way that may make room.
	unschedulable map[string]bool
	// assumed are the pods placed on a node whose claims are being bound there (VolumeBinding's
	// PreBind): they are bound once their claims are, and hold their room on the node meanwhile.
	assumed map[string]string
	// moves counts the changes that queued unschedulable pods again, so that a pod found
	// unschedulable on a view older than one of them is tried again (upstream's moveRequestCycle).
	moves uint64
}

func newScheduler(c *cluster, idx int) *scheduler {
	return &scheduler{c: c, idx: idx, unschedulable: map[string]bool{}, assumed: map[string]string{}}
}

func (s *scheduler) resources() []schema.GroupResource {
	return []schema.GroupResource{podsGR, nodesGR, pvcsGR, pvsGR, storageClassesGR}
}

func needsScheduling(p *corev1.Pod) bool {
	return p.Spec.NodeName == "" && p.DeletionTimestamp == nil && !isTerminal(p) &&
		p.Spec.SchedulerName == corev1.DefaultSchedulerName && len(p.Spec.SchedulingGates) == 0
}

// observe runs under the store's lock, as every observe; unschedulable is only touched here and
// in sync's bookkeeping below under the cluster's queue lock.
func (s *scheduler) observe(ch store.Change) {
	switch ch.Resource {
	case pvcsGR, pvsGR, storageClassesGR:
		// A claim created, bound or provisioned, a volume or a class made: the pods waiting for
		// their volumes may go on.
		s.retryUnschedulable(claimVolumes)
		s.c.mu.Lock()
		keys := make([]string, 0, len(s.assumed))
		for k := range s.assumed {
			keys = append(keys, k)
		}
		s.c.mu.Unlock()
		for _, k := range keys {
			s.c.enqueue(s.idx, k)
		}
		return
	}
	if ch.New == nil && ch.Resource == podsGR {
		s.c.mu.Lock()
		delete(s.assumed, changedKey(ch))
		s.c.mu.Unlock()
	}
	if pod, ok := ch.New.(*corev1.Pod); ok {
		if needsScheduling(pod) {
			s.c.enqueue(s.idx, keyOf(pod))
			return
		}
		old, _ := ch.Old.(*corev1.Pod)
		// A pod that leaves a node (terminating, finished) may make room.
		if old != nil && old.Spec.NodeName != "" && isActive(old) && !isActive(pod) {
			s.retryUnschedulable(nil)
		}
		return
	}
	if old, ok := ch.Old.(*corev1.Pod); ok && ch.New == nil && old.Spec.NodeName != "" {
		s.retryUnschedulable(nil)
		return
	}
	if _, ok := ch.New.(*corev1.Node); ok {
		s.retryUnschedulable(nil)
	}
}

// retryUnschedulable queues the unschedulable pods again, those only that only match (a nil only:
// all).
func (s *scheduler) retryUnschedulable(only func(*corev1.Pod) bool) {
	s.c.mu.Lock()
	keys := make([]string, 0, len(s.unschedulable))
	for k := range s.unschedulable {
		if only != nil {
			if p, _ := s.c.cache.get(podsGR, k).(*corev1.Pod); p != nil && !only(p) {
				continue
			}
		}
		keys = append(keys, k)
		delete(s.unschedulable, k)
	}
	s.moves++
	s.c.mu.Unlock()
	for _, k := range keys {
		s.c.enqueue(s.idx, k)
	}
}

func (s *scheduler) sync(ctx context.Context, key string) error {
	pod, _ := s.c.cache.get(podsGR, key).(*corev1.Pod)
	if pod == nil || !needsScheduling(pod) {
		s.c.mu.Lock()
		delete(s.assumed, key)
		s.c.mu.Unlock()
		return nil
	}
	s.c.mu.Lock()
	assumed, moves := s.assumed[key], s.moves
	s.c.mu.Unlock()
	if assumed != "" {
		return s.bindAssumed(ctx, pod, key, assumed)
	}
	claims, msg := s.preFilterVolumes(pod)
	if msg != "" {
		return s.unschedulablePod(ctx, pod, key, moves, preFilterError(msg, len(s.c.cache.nodes())))
	}
	node, plan, reasons, total := s.pick(pod, claims)
	if node == "" {
		return s.unschedulablePod(ctx, pod, key, moves, fitError(reasons, total))
	}
	if plan != nil {
		// VolumeBinding's PreBind: the claims are bound on the node first.
		s.c.mu.Lock()
		s.assumed[key] = node
		s.c.mu.Unlock()
		if err := s.preBind(ctx, plan, node); err != nil {
			s.c.mu.Lock()
			delete(s.assumed, key)
			s.c.mu.Unlock()
			return err
		}
		s.c.enqueue(s.idx, key)
		return nil
	}
	return s.bind(ctx, pod, node)
}

// unschedulablePod records a pod that fits nowhere, to be tried again when the cluster changes;
// moves is the count of such changes its try saw.
func (s *scheduler) unschedulablePod(ctx context.Context, pod *corev1.Pod, key string, moves uint64, message string) error {
	s.c.mu.Lock()
	s.unschedulable[key] = true
	missed := s.moves != moves
	s.c.mu.Unlock()
	if missed {
		s.c.enqueue(s.idx, key) // the cluster changed while it was tried
	}
	return s.failed(ctx, pod, message)
}

// bindAssumed binds a pod placed on a node once its claims are bound there; if their binding
// failed the pod is scheduled again.
func (s *scheduler) bindAssumed(ctx context.Context, pod *corev1.Pod, key, node string) error {
	n, _ := s.c.cache.get(nodesGR, node).(*corev1.Node)
	ok, err := false, fmt.Errorf("node %q not found", node)
	if n != nil {
		ok, err = s.claimsBound(pod, n)
	}
	if err != nil || ok {
		s.c.mu.Lock()
		delete(s.assumed, key)
		s.c.mu.Unlock()
	}
	switch {
	case err != nil:
		s.c.enqueue(s.idx, key)
		return nil
	case !ok:
		return nil // a change of its claims queues it again
	}
	return s.bind(ctx, pod, node)
}

// bind binds the pod through pods/binding.
func (s *scheduler) bind(ctx context.Context, pod *corev1.Pod, node string) error {
	if err := s.c.client.SubResource("binding").Create(ctx, pod, &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: node},
	}); err != nil {
		return err
	}
	if s.c.opts.ScheduledEvents {
		s.event(ctx, pod, corev1.EventTypeNormal, "Binding", "Scheduled", fmt.Sprintf("Successfully assigned %s/%s to %s", pod.Namespace, pod.Name, node))
	}
	return nil
}

// pick returns the best node for the pod and what binding its volumes there takes (nil when
// nothing), or the reasons each node was filtered out for.
func (s *scheduler) pick(pod *corev1.Pod, claims *podClaims) (string, *volumePlan, map[string]int, int) {
	nodes := s.c.cache.nodes()
	req := podRequests(&pod.Spec)
	reasons := map[string]int{}
	best, bestScore, bestPods := "", -1.0, 0
	var bestPlan *volumePlan
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
	for _, node := range nodes {
		if node.DeletionTimestamp != nil {
			continue
		}
		reason, score, pods := s.fit(pod, req, node)
		var plan *volumePlan
		if reason == "" {
			var conflicts []string
			conflicts, plan = s.filterVolumes(claims, node)
			reason = strings.Join(conflicts, "\n")
		}
		if reason != "" {
			for _, r := range strings.Split(reason, "\n") {
				reasons[r]++
			}
			continue
		}
		if score > bestScore || score == bestScore && pods < bestPods {
			best, bestScore, bestPods, bestPlan = node.Name, score, pods, plan
		}
	}
	return best, bestPlan, reasons, len(nodes)
}

// fit filters a node as the default plugins do and scores it as NodeResourcesFit's
// LeastAllocated does: the mean share of cpu and memory left free once the pod is on it.
func (s *scheduler) fit(pod *corev1.Pod, req corev1.ResourceList, node *corev1.Node) (string, float64, int) {
	if node.Spec.Unschedulable && !tolerates(pod.Spec.Tolerations, &corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}) {
		return "node(s) were unschedulable", 0, 0
	}
	if !matchesNode(&pod.Spec, node) {
		return "node(s) didn't match Pod's node affinity/selector", 0, 0
	}
	for i := range node.Spec.Taints {
		t := &node.Spec.Taints[i]
		if t.Effect != corev1.TaintEffectNoSchedule && t.Effect != corev1.TaintEffectNoExecute {
			continue
		}
		if !tolerates(pod.Spec.Tolerations, t) {
			return fmt.Sprintf("node(s) had untolerated taint {%s: %s}", t.Key, t.Value), 0, 0
		}
	}
	used := corev1.ResourceList{}
	pods := 0
	for _, p := range s.c.cache.podsOn(node.Name) {
		if isTerminal(p) {
			continue
		}
		pods++
		addPodRequests(used, &p.Spec)
	}
	for _, p := range s.assumedOn(node.Name) {
		pods++
		addPodRequests(used, &p.Spec)
	}
	alloc := node.Status.Allocatable
	var insufficient []string
	if maxPods, ok := alloc[corev1.ResourcePods]; ok && int64(pods+1) > maxPods.Value() {
		insufficient = append(insufficient, "Too many pods")
	}
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage} {
		want := quantity(req, name)
		if want.IsZero() {
			continue
		}
		have := quantity(alloc, name)
		left := have.DeepCopy()
		u := quantity(used, name)
		left.Sub(u)
		if want.Cmp(left) > 0 {
			insufficient = append(insufficient, "Insufficient "+string(name))
		}
	}
	if len(insufficient) > 0 {
		return strings.Join(insufficient, "\n"), 0, 0
	}
	score := 0.0
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		have := quantity(alloc, name)
		if have.IsZero() {
			continue
		}
		u := quantity(used, name)
		w := quantity(req, name)
		// Requests left unset count as upstream's non-zero defaults: 100m cpu, 200Mi memory.
		nz := nonZero(name, &w)
		free := float64(have.MilliValue()-u.MilliValue()-nz) / float64(have.MilliValue())
		score += free / 2
	}
	return "", score, pods
}

// assumedOn returns the pods placed on a node while their claims are bound there.
func (s *scheduler) assumedOn(node string) []*corev1.Pod {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	var out []*corev1.Pod
	for key, n := range s.assumed {
		if p, _ := s.c.cache.get(podsGR, key).(*corev1.Pod); n == node && p != nil {
			out = append(out, p)
		}
	}
	return out
}

func nonZero(name corev1.ResourceName, q interface{ MilliValue() int64 }) int64 {
	if v := q.MilliValue(); v > 0 {
		return v
	}
	if name == corev1.ResourceCPU {
		return 100
	}
	return 200 * 1024 * 1024 * 1000
}

// fitError is kube-scheduler's message for a pod that fits no node.
func fitError(reasons map[string]int, total int) string {
	if total == 0 {
		return "no nodes available to schedule pods"
	}
	var parts, preemption []string
	notHelpful, noVictims := 0, 0
	for r, n := range reasons {
		parts = append(parts, fmt.Sprintf("%d %s", n, r))
		if strings.HasPrefix(r, "Insufficient") || r == "Too many pods" || r == reasonReadWriteOncePod {
			noVictims += n
		} else {
			notHelpful += n
		}
	}
	sort.Strings(parts)
	// Both histograms are sorted as strings, as upstream's FitError and preemption messages.
	if notHelpful > 0 {
		preemption = append(preemption, fmt.Sprintf("%d Preemption is not helpful for scheduling", notHelpful))
	}
	if noVictims > 0 {
		preemption = append(preemption, fmt.Sprintf("%d No preemption victims found for incoming pod", noVictims))
	}
	sort.Strings(preemption)
	return fmt.Sprintf("0/%d nodes are available: %s. preemption: 0/%d nodes are available: %s.",
		total, strings.Join(parts, ", "), total, strings.Join(preemption, ", "))
}

// preFilterError is kube-scheduler's message for a pod a PreFilter plugin rejected as
// UnschedulableAndUnresolvable: its message, and every node where preemption does not help.
func preFilterError(message string, total int) string {
	if total == 0 {
		return "no nodes available to schedule pods"
	}
	return fmt.Sprintf("0/%d nodes are available: %s. preemption: 0/%d nodes are available: %d Preemption is not helpful for scheduling.",
		total, message, total, total)
}

// failed records an unschedulable pod as kube-scheduler does: the PodScheduled condition and a
// FailedScheduling event (only when the message changes, so a retry does not pile events up).
func (s *scheduler) failed(ctx context.Context, pod *corev1.Pod, message string) error {
	if c := podCondition(pod, corev1.PodScheduled); c != nil && c.Status == corev1.ConditionFalse && c.Message == message {
		return nil
	}
	next := pod.DeepCopy()
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	setCondition(&next.Status, corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
		Reason: corev1.PodReasonUnschedulable, Message: message, LastTransitionTime: now})
	if err := s.c.client.Status().Update(ctx, next); err != nil {
		return err
	}
	s.event(ctx, pod, corev1.EventTypeWarning, "Scheduling", "FailedScheduling", message)
	return nil
}

// event records an events.k8s.io/v1 Event about pod as kube-scheduler's recorder does, best
// effort.
func (s *scheduler) event(ctx context.Context, pod *corev1.Pod, typ, action, reason, note string) {
	ev := &eventsv1.Event{
		// Named as client-go's event recorder names events: the object's name and the time.
		ObjectMeta:          metav1.ObjectMeta{Namespace: pod.Namespace, Name: fmt.Sprintf("%s.%x", pod.Name, time.Now().UnixNano())},
		EventTime:           metav1.NewMicroTime(time.Now()),
		ReportingController: corev1.DefaultSchedulerName,
		ReportingInstance:   corev1.DefaultSchedulerName,
		Action:              action,
		Reason:              reason,
		Regarding:           corev1.ObjectReference{Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, APIVersion: "v1", ResourceVersion: pod.ResourceVersion},
		Note:                note,
		Type:                typ,
	}
	_ = s.c.client.Create(ctx, ev)
}
