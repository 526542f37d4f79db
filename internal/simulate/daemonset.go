package simulate

import (
	"context"
	"errors"
	"sort"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// daemonSetController is kube-controller-manager's DaemonSet controller: one pod per eligible
// node, pinned to it by a required node affinity on metadata.name that the scheduler honours,
// with the tolerations the controller adds; pods leave nodes that no longer fit; RollingUpdate
// replaces pods of an old template within maxUnavailable; status as upstream counts it.
type daemonSetController struct {
	c   *cluster
	idx int
}

var daemonSetKind = appsv1.SchemeGroupVersion.WithKind("DaemonSet")

func newDaemonSetController(c *cluster, idx int) *daemonSetController {
	return &daemonSetController{c: c, idx: idx}
}

func (d *daemonSetController) resources() []schema.GroupResource {
	return []schema.GroupResource{daemonSetsGR, nodesGR, podsGR, controllerRevisionsGR}
}

func (d *daemonSetController) observe(ch store.Change) {
	obj := changedObject(ch)
	switch ch.Resource {
	case daemonSetsGR:
		d.c.enqueue(d.idx, keyOf(obj))
	case nodesGR:
		old, _ := ch.Old.(*corev1.Node)
		node, _ := ch.New.(*corev1.Node)
		if old != nil && node != nil && apiequality.Semantic.DeepEqual(old.Labels, node.Labels) &&
			apiequality.Semantic.DeepEqual(old.Spec.Taints, node.Spec.Taints) && nodeReady(old) == nodeReady(node) {
			return
		}
		for _, ds := range d.c.cache.list(daemonSetsGR) {
			d.c.enqueue(d.idx, keyOf(ds))
		}
	case podsGR, controllerRevisionsGR:
		if ref := metav1.GetControllerOfNoCopy(obj); ref != nil && ref.Kind == "DaemonSet" {
			d.c.enqueue(d.idx, obj.GetNamespace()+"/"+ref.Name)
		}
	}
}

// daemonTolerations are the tolerations the controller adds to every daemon pod.
func daemonTolerations(spec *corev1.PodSpec) []corev1.Toleration {
	add := []corev1.Toleration{
		{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
		{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
		{Key: corev1.TaintNodeDiskPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: corev1.TaintNodeMemoryPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: corev1.TaintNodePIDPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: corev1.TaintNodeUnschedulable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
	}
	if spec.HostNetwork {
		add = append(add, corev1.Toleration{Key: corev1.TaintNodeNetworkUnavailable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule})
	}
	out := append([]corev1.Toleration(nil), spec.Tolerations...)
	for _, t := range add {
		found := false
		for _, have := range out {
			if have.MatchToleration(&t) {
				found = true
			}
		}
		if !found {
			out = append(out, t)
		}
	}
	return out
}

// daemonFit decides which nodes a DaemonSet's pod belongs on. A sync asks it for every node,
// so what depends on the DaemonSet alone (the tolerations the controller adds) is worked out
// once per sync, not once per node: at 500 nodes the per-node copies were most of a sync's cost.
type daemonFit struct {
	spec        *corev1.PodSpec
	tolerations []corev1.Toleration
}

func newDaemonFit(ds *appsv1.DaemonSet) daemonFit {
	spec := &ds.Spec.Template.Spec
	return daemonFit{spec: spec, tolerations: daemonTolerations(spec)}
}

// shouldRun: the node fits the daemon pod (node affinity and selector; every NoSchedule and
// NoExecute taint tolerated); keepRunning: a pod already there may stay (NoExecute tolerated).
func (f daemonFit) shouldRun(node *corev1.Node) (run, keepRunning bool) {
	if node.DeletionTimestamp != nil || !matchesNode(f.spec, node) {
		return false, false
	}
	run, keepRunning = true, true
	for i := range node.Spec.Taints {
		t := &node.Spec.Taints[i]
		if tolerates(f.tolerations, t) {
			continue
		}
		switch t.Effect {
		case corev1.TaintEffectNoSchedule:
			run = false
		case corev1.TaintEffectNoExecute:
			run, keepRunning = false, false
		}
	}
	return run, keepRunning
}

// targetNode is the node a daemon pod is for: its node, or the one its affinity pins it to.
func targetNode(p *corev1.Pod) string {
	if p.Spec.NodeName != "" {
		return p.Spec.NodeName
	}
	if a := p.Spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
			for _, f := range term.MatchFields {
				if f.Key == metav1.ObjectNameField && f.Operator == corev1.NodeSelectorOpIn && len(f.Values) == 1 {
					return f.Values[0]
				}
			}
		}
	}
	return ""
}

// pinToNode is upstream's ReplaceDaemonSetPodNodeNameNodeAffinity: every term requires the
// node's name (a pod without terms gets one that does).
func pinToNode(spec *corev1.PodSpec, node string) {
	req := corev1.NodeSelectorRequirement{Key: metav1.ObjectNameField, Operator: corev1.NodeSelectorOpIn, Values: []string{node}}
	if spec.Affinity == nil {
		spec.Affinity = &corev1.Affinity{}
	}
	if spec.Affinity.NodeAffinity == nil {
		spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	na := spec.Affinity.NodeAffinity
	if na.RequiredDuringSchedulingIgnoredDuringExecution == nil || len(na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms) == 0 {
		na.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{req}}}}
		return
	}
	terms := na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	for i := range terms {
		terms[i].MatchFields = []corev1.NodeSelectorRequirement{req}
	}
}

func (d *daemonSetController) sync(ctx context.Context, key string) error {
	ds, _ := d.c.cache.get(daemonSetsGR, key).(*appsv1.DaemonSet)
	if ds == nil {
		return nil
	}
	hash := computeHash(&ds.Spec.Template, ds.Status.CollisionCount)
	var oldRevisions []*appsv1.ControllerRevision
	if ds.DeletionTimestamp == nil {
		var err error
		if oldRevisions, err = d.recordRevision(ctx, ds, hash); err != nil {
			return err
		}
	}
	liveHashes := map[string]bool{}
	byNode := map[string][]*corev1.Pod{}
	for _, obj := range d.c.cache.owned(podsGR, ds.UID) {
		p := obj.(*corev1.Pod)
		liveHashes[p.Labels[appsv1.DefaultDaemonSetUniqueLabelKey]] = true
		if p.DeletionTimestamp == nil {
			byNode[targetNode(p)] = append(byNode[targetNode(p)], p)
		}
	}
	nodes := d.c.cache.nodes()
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
	now := time.Now()
	var toCreate []string
	var toDelete []*corev1.Pod
	st := appsv1.DaemonSetStatus{ObservedGeneration: ds.Generation, CollisionCount: ds.Status.CollisionCount, Conditions: ds.Status.Conditions}
	var unavailable int32
	var oldAvailable []*corev1.Pod
	fit := newDaemonFit(ds)
	for _, node := range nodes {
		run, keep := fit.shouldRun(node)
		pods := byNode[node.Name]
		sort.Slice(pods, func(i, j int) bool { return pods[i].CreationTimestamp.Before(&pods[j].CreationTimestamp) })
		var live []*corev1.Pod
		for _, p := range pods {
			if p.Status.Phase == corev1.PodFailed {
				toDelete = append(toDelete, p) // replaced, as upstream does with failed daemon pods
				continue
			}
			live = append(live, p)
		}
		switch {
		case run && len(live) == 0:
			toCreate = append(toCreate, node.Name)
		case (run || keep) && len(live) > 1:
			toDelete = append(toDelete, live[1:]...)
			live = live[:1]
		case !run && !keep:
			toDelete = append(toDelete, live...)
			live = nil
		}
		if len(live) > 0 && !run {
			st.NumberMisscheduled++
		}
		if !run {
			continue
		}
		st.DesiredNumberScheduled++
		if len(live) == 0 {
			unavailable++
			continue
		}
		p := live[0]
		st.CurrentNumberScheduled++
		updated := p.Labels[appsv1.DefaultDaemonSetUniqueLabelKey] == hash
		if updated {
			st.UpdatedNumberScheduled++
		}
		if isReady(p) {
			st.NumberReady++
		}
		if isAvailable(p, ds.Spec.MinReadySeconds, now) {
			st.NumberAvailable++
			if !updated {
				oldAvailable = append(oldAvailable, p)
			}
		} else {
			unavailable++
			if !updated && ds.Spec.UpdateStrategy.Type != appsv1.OnDeleteDaemonSetStrategyType {
				toDelete = append(toDelete, p) // an old pod that is not available anyway goes at once
			}
		}
	}
	for n, pods := range byNode {
		if n != "" && d.c.cache.get(nodesGR, n) == nil {
			toDelete = append(toDelete, pods...) // their node is gone
		}
	}
	st.NumberUnavailable = st.DesiredNumberScheduled - st.NumberAvailable
	if ds.Spec.UpdateStrategy.Type != appsv1.OnDeleteDaemonSetStrategyType {
		maxUnavailable := int32(1)
		if ru := ds.Spec.UpdateStrategy.RollingUpdate; ru != nil && ru.MaxUnavailable != nil {
			v, _ := intstr.GetScaledValueFromIntOrPercent(ru.MaxUnavailable, int(st.DesiredNumberScheduled), true)
			maxUnavailable = max(int32(v), 0)
		}
		for _, p := range oldAvailable {
			if unavailable >= maxUnavailable {
				break
			}
			toDelete = append(toDelete, p)
			unavailable++
		}
	}
	if ds.DeletionTimestamp == nil {
		for _, p := range toDelete {
			if err := d.c.client.Delete(ctx, p, client.Preconditions{UID: &p.UID}); err != nil && !isGone(err) {
				return err
			}
		}
		for i, node := range toCreate {
			if i >= burstReplicas {
				d.c.enqueue(d.idx, key)
				break
			}
			if err := d.c.client.Create(ctx, d.daemonPod(ds, node, hash)); err != nil {
				return err
			}
		}
	}
	if err := d.c.trimRevisions(ctx, oldRevisions, func(r *appsv1.ControllerRevision) bool {
		return liveHashes[r.Labels[appsv1.DefaultDaemonSetUniqueLabelKey]]
	}, ptr.Deref(ds.Spec.RevisionHistoryLimit, 10)); err != nil {
		return err
	}
	if wait := nextAvailableDS(byNode, ds.Spec.MinReadySeconds, now); wait > 0 {
		d.c.after(wait, d.idx, key)
	}
	if apiequality.Semantic.DeepEqual(st, ds.Status) {
		return nil
	}
	next := ds.DeepCopy()
	next.Status = st
	return d.c.client.Status().Update(ctx, next)
}

// recordRevision keeps the DaemonSet's ControllerRevision of its template, <name>-<hash> with
// the controller-revision-hash label its pods carry, the newest; it returns the older ones.
func (d *daemonSetController) recordRevision(ctx context.Context, ds *appsv1.DaemonSet, hash string) ([]*appsv1.ControllerRevision, error) {
	data, err := templatePatch(ds)
	if err != nil {
		return nil, err
	}
	want := newRevision(ds.Name+"-"+hash, ds.Spec.Template.Labels, ds.Annotations, hash, data)
	_, old, err := d.c.recordRevision(ctx, ds, daemonSetKind, d.c.revisionsOf(ds), want)
	if errors.Is(err, errRevisionCollision) {
		next := ds.DeepCopy()
		next.Status.CollisionCount = ptr.To(ptr.Deref(ds.Status.CollisionCount, 0) + 1)
		if err := d.c.client.Status().Update(ctx, next); err != nil {
			return nil, err
		}
		return nil, errRevisionCollision // synced again with the new count
	}
	return old, err
}

func nextAvailableDS(byNode map[string][]*corev1.Pod, minReady int32, now time.Time) time.Duration {
	var all []*corev1.Pod
	for _, pods := range byNode {
		all = append(all, pods...)
	}
	return nextAvailable(all, minReady, now)
}

// daemonPod is the daemon pod for a node: the template, pinned to the node, with the added
// tolerations and the template's revision labels.
func (d *daemonSetController) daemonPod(ds *appsv1.DaemonSet, node, hash string) *corev1.Pod {
	pod := podFromTemplate(ds, &ds.Spec.Template, daemonSetKind)
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	pod.Labels[appsv1.DefaultDaemonSetUniqueLabelKey] = hash
	pod.Labels[appsv1.DeprecatedTemplateGeneration] = strconv.FormatInt(ds.Generation, 10)
	pod.Spec.Tolerations = daemonTolerations(&pod.Spec)
	pinToNode(&pod.Spec, node)
	return pod
}
