package simulate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"sort"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The controller history of DaemonSets and StatefulSets, as kube-controller-manager's
// pkg/controller/history keeps it: one ControllerRevision per template the set has had, named
// <set>-<hash>, owned by the set, its data the strategic merge patch that restores the template
// (what `kubectl rollout undo` applies), its revision number the order in which the templates
// were last current; revisions no pod runs any more beyond revisionHistoryLimit are deleted.

var controllerRevisionsGR = appsv1.SchemeGroupVersion.WithResource("controllerrevisions").GroupResource()

// errRevisionCollision: another revision has the name the set's hash gives (the set's
// status.collisionCount must grow).
var errRevisionCollision = errors.New("controller revision name collision")

// templatePatch is upstream's getPatch: the set's spec.template, to be replaced whole.
func templatePatch(set any) ([]byte, error) {
	raw, err := json.Marshal(set)
	if err != nil {
		return nil, err
	}
	var obj map[string]any
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, err
	}
	spec, _ := obj["spec"].(map[string]any)
	template, _ := spec["template"].(map[string]any)
	if template == nil {
		return nil, fmt.Errorf("no spec.template")
	}
	template["$patch"] = "replace"
	return json.Marshal(map[string]any{"spec": map[string]any{"template": template}})
}

// revisionHash is upstream's HashControllerRevision: FNV-32 of the data and the collision count.
func revisionHash(data []byte, collisionCount *int32) string {
	h := fnv.New32()
	h.Write(data)
	if collisionCount != nil {
		h.Write([]byte(strconv.FormatInt(int64(*collisionCount), 10)))
	}
	return rand.SafeEncodeString(fmt.Sprint(h.Sum32()))
}

// revisionsOf are the ControllerRevisions a set controls, oldest revision first.
func (c *cluster) revisionsOf(owner metav1.Object) []*appsv1.ControllerRevision {
	var out []*appsv1.ControllerRevision
	for _, obj := range c.cache.owned(controllerRevisionsGR, owner.GetUID()) {
		out = append(out, obj.(*appsv1.ControllerRevision))
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Revision != out[j].Revision {
			return out[i].Revision < out[j].Revision
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// recordRevision makes want (name, labels, annotations, data) the set's newest revision: a
// revision with the same data gets the next number unless it is the newest already (a rollback
// to it), else want is created with the next number. It returns the revision and the others.
func (c *cluster) recordRevision(ctx context.Context, owner client.Object, gvk schema.GroupVersionKind, revs []*appsv1.ControllerRevision,
	want *appsv1.ControllerRevision) (*appsv1.ControllerRevision, []*appsv1.ControllerRevision, error) {
	var cur *appsv1.ControllerRevision
	var old []*appsv1.ControllerRevision
	for _, r := range revs {
		if string(r.Data.Raw) == string(want.Data.Raw) && (cur == nil || r.Revision >= cur.Revision) {
			if cur != nil {
				old = append(old, cur)
			}
			cur = r
			continue
		}
		old = append(old, r)
	}
	var next int64 = 1
	for _, r := range old {
		next = max(next, r.Revision+1)
	}
	if cur != nil {
		if cur.Revision >= next {
			return cur, old, nil
		}
		upd := cur.DeepCopy()
		upd.Revision = next
		return upd, old, c.client.Update(ctx, upd)
	}
	want.Namespace = owner.GetNamespace()
	want.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(owner, gvk)}
	want.Revision = next
	err := c.client.Create(ctx, want)
	if apierrors.IsAlreadyExists(err) {
		var existing appsv1.ControllerRevision
		if err := c.client.Get(ctx, client.ObjectKeyFromObject(want), &existing); err != nil {
			return nil, nil, err
		}
		if string(existing.Data.Raw) != string(want.Data.Raw) {
			return nil, nil, errRevisionCollision
		}
		return &existing, old, nil // created by an earlier sync the cache has not shown yet
	}
	return want, old, err
}

// trimRevisions deletes the oldest of old beyond limit that no live pod runs.
func (c *cluster) trimRevisions(ctx context.Context, old []*appsv1.ControllerRevision, live func(*appsv1.ControllerRevision) bool, limit int32) error {
	toKill := len(old) - int(max(limit, 0))
	for _, r := range old {
		if toKill <= 0 {
			break
		}
		if live(r) {
			continue
		}
		if err := c.client.Delete(ctx, r, client.Preconditions{UID: &r.UID}); err != nil && !isGone(err) {
			return err
		}
		toKill--
	}
	return nil
}

// newRevision is a revision of data with the template's labels and the set's annotations.
func newRevision(name string, templateLabels, annotations map[string]string, hash string, data []byte) *appsv1.ControllerRevision {
	labels := map[string]string{}
	for k, v := range templateLabels {
		labels[k] = v
	}
	labels[appsv1.ControllerRevisionHashLabelKey] = hash
	var ann map[string]string
	if len(annotations) > 0 {
		ann = map[string]string{}
		for k, v := range annotations {
			ann[k] = v
		}
	}
	return &appsv1.ControllerRevision{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: ann},
		Data:       runtime.RawExtension{Raw: data},
	}
}
