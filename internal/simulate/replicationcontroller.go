package simulate

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// replicationControllerController is kube-controller-manager's ReplicationController
// controller: the ReplicaSet controller's rules (replicaset.go) over a core/v1
// ReplicationController's map selector and template.
type replicationControllerController struct {
	c   *cluster
	idx int
}

var (
	replicationControllersGR  = corev1.SchemeGroupVersion.WithResource("replicationcontrollers").GroupResource()
	replicationControllerKind = corev1.SchemeGroupVersion.WithKind("ReplicationController")
)

func newReplicationControllerController(c *cluster, idx int) *replicationControllerController {
	return &replicationControllerController{c: c, idx: idx}
}

func (r *replicationControllerController) resources() []schema.GroupResource {
	return []schema.GroupResource{replicationControllersGR, podsGR}
}

func (r *replicationControllerController) observe(ch store.Change) {
	obj := changedObject(ch)
	if ch.Resource == replicationControllersGR {
		r.c.enqueue(r.idx, keyOf(obj))
		return
	}
	if ref := metav1.GetControllerOfNoCopy(obj); ref != nil {
		if ref.Kind == "ReplicationController" {
			r.c.enqueue(r.idx, obj.GetNamespace()+"/"+ref.Name)
		}
		return
	}
	if ch.New == nil || obj.GetDeletionTimestamp() != nil {
		return
	}
	for _, o := range r.c.cache.list(replicationControllersGR) {
		rc := o.(*corev1.ReplicationController)
		if rc.Namespace == obj.GetNamespace() && len(rc.Spec.Selector) > 0 && labels.SelectorFromSet(rc.Spec.Selector).Matches(labels.Set(obj.GetLabels())) {
			r.c.enqueue(r.idx, keyOf(rc))
		}
	}
}

func (r *replicationControllerController) sync(ctx context.Context, key string) error {
	rc, _ := r.c.cache.get(replicationControllersGR, key).(*corev1.ReplicationController)
	if rc == nil || rc.Spec.Template == nil || len(rc.Spec.Selector) == 0 {
		return nil
	}
	selector := &metav1.LabelSelector{MatchLabels: rc.Spec.Selector}
	pods, err := claimPods(ctx, r.c, rc, replicationControllerKind, selector)
	if err != nil {
		return err
	}
	err = scaleReplicas(ctx, r.c, rc, replicationControllerKind, rc.Spec.Template, ptr.Deref(rc.Spec.Replicas, 1), pods)
	now := time.Now()
	st := corev1.ReplicationControllerStatus{ObservedGeneration: rc.Generation, Conditions: rc.Status.Conditions}
	tmpl := labels.SelectorFromSet(rc.Spec.Template.Labels)
	for _, p := range pods {
		if !isActive(p) {
			continue
		}
		st.Replicas++
		if tmpl.Matches(labels.Set(p.Labels)) {
			st.FullyLabeledReplicas++
		}
		if isReady(p) {
			st.ReadyReplicas++
			if isAvailable(p, rc.Spec.MinReadySeconds, now) {
				st.AvailableReplicas++
			}
		}
	}
	if wait := nextAvailable(pods, rc.Spec.MinReadySeconds, now); wait > 0 {
		r.c.after(wait, r.idx, key)
	}
	if st.String() != rc.Status.String() {
		next := rc.DeepCopy()
		next.Status = st
		if uerr := r.c.client.Status().Update(ctx, next); uerr != nil && err == nil {
			err = uerr
		}
	}
	return err
}
