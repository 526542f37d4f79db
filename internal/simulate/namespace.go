package simulate

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

var namespacesGR = corev1.SchemeGroupVersion.WithResource("namespaces").GroupResource()

// namespaceController is kube-controller-manager's namespace controller (its deletion part, as
// upstream's namespacedResourcesDeleter): a namespace the registry marked Terminating is emptied,
// pods first (OrderedNamespaceDeletion: nothing else goes while pods remain), then every other
// namespaced resource, CRDs' included, each with a background delete of the collection; its
// status conditions say what remains (NamespaceContentRemaining, NamespaceFinalizersRemaining
// with upstream's reasons and messages); once nothing is left its kubernetes finalizer goes
// (namespaces/finalize), and the registry removes it when no finalizer holds it. Where upstream
// polls a namespace whose content waits for finalizers, this one is queued again by the removal
// of anything in it. It keeps the names of the Terminating namespaces only.
type namespaceController struct {
	c   *cluster
	idx int

	mu          sync.Mutex
	terminating map[string]bool
}

func newNamespaceController(c *cluster, idx int) *namespaceController {
	return &namespaceController{c: c, idx: idx, terminating: map[string]bool{}}
}

func (n *namespaceController) uncached() {}

// allResources: the removal of anything in a Terminating namespace queues it.
func (n *namespaceController) allResources() {}

func (n *namespaceController) resources() []schema.GroupResource { return nil }

func (n *namespaceController) observe(ch store.Change) {
	if ch.Resource == namespacesGR {
		n.mu.Lock()
		defer n.mu.Unlock()
		if ch.New == nil || ch.New.GetDeletionTimestamp() == nil {
			delete(n.terminating, changedObject(ch).GetName())
			return
		}
		n.terminating[ch.New.GetName()] = true
		n.c.enqueue(n.idx, ch.New.GetName())
		return
	}
	if ch.New != nil {
		return
	}
	ns := ch.Old.GetNamespace()
	if ns == "" {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.terminating[ns] {
		n.c.enqueue(n.idx, ns)
	}
}

// sync is upstream's namespacedResourcesDeleter.Delete.
func (n *namespaceController) sync(ctx context.Context, name string) error {
	ns := &corev1.Namespace{}
	if err := n.c.client.Get(ctx, client.ObjectKey{Name: name}, ns); err != nil {
		return client.IgnoreNotFound(err)
	}
	if ns.DeletionTimestamp == nil {
		return nil
	}
	if ns.Status.Phase != corev1.NamespaceTerminating {
		ns.Status.Phase = corev1.NamespaceTerminating
		if err := n.c.client.Status().Update(ctx, ns); err != nil {
			return client.IgnoreNotFound(err)
		}
	}
	if len(ns.Spec.Finalizers) == 0 {
		return nil // finalized: the registry removes it when its own finalizers go
	}
	remaining, err := n.deleteAllContent(ctx, ns)
	if err != nil || remaining {
		return err // what remains queues the namespace again as it goes
	}
	return n.finalize(ctx, ns)
}

// deleteAllContent deletes the namespace's content and reports whether any remains, recording
// what remains in the namespace's conditions.
func (n *namespaceController) deleteAllContent(ctx context.Context, ns *corev1.Namespace) (bool, error) {
	resources := n.c.store.NamespacedResources()
	podsFirst := slices.IndexFunc(resources, func(r store.ResourceInfo) bool { return r.GVR.GroupResource() == podsGR })
	if podsFirst > 0 {
		resources[0], resources[podsFirst] = resources[podsFirst], resources[0]
	}
	var errs []string
	remaining := map[schema.GroupVersionResource]int{}
	finalizers := map[string]int{}
	for i, r := range resources {
		if !slices.Contains(r.Verbs, "delete") || !slices.Contains(r.Verbs, "list") {
			continue
		}
		left, err := n.deleteCollection(r, ns.Name, finalizers)
		if err != nil {
			errs = append(errs, err.Error())
		}
		if left > 0 {
			remaining[r.GVR] = left
		}
		if i == 0 && podsFirst >= 0 && left > 0 {
			break // pods first: the rest waits until they are gone
		}
	}
	if err := n.updateConditions(ctx, ns, remaining, finalizers, errs); err != nil {
		return true, err
	}
	if len(errs) > 0 {
		return true, fmt.Errorf("deleting the content of namespace %s: %s", ns.Name, strings.Join(errs, ", "))
	}
	return len(remaining) > 0, nil
}

// deleteCollection deletes every object of the resource in the namespace (background
// propagation, as upstream) and returns how many remain, counting their finalizers.
func (n *namespaceController) deleteCollection(r store.ResourceInfo, namespace string, finalizers map[string]int) (int, error) {
	background := metav1.DeletePropagationBackground
	opts := store.DeleteOptions{PropagationPolicy: &background, SkipSyncWait: true}
	if slices.Contains(r.Verbs, "deletecollection") {
		if _, err := n.c.store.DeleteCollection(r.GVR, namespace, store.ListOptions{}, opts); err != nil && !apierrors.IsNotFound(err) {
			return 0, err
		}
	}
	list, err := n.c.store.List(r.GVR, namespace, store.ListOptions{ShareItems: true})
	if err != nil {
		return 0, client.IgnoreNotFound(err)
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return 0, err
	}
	left := 0
	for _, item := range items {
		obj, ok := item.(client.Object)
		if !ok {
			continue
		}
		if !slices.Contains(r.Verbs, "deletecollection") && obj.GetDeletionTimestamp() == nil {
			if _, err := n.c.store.Delete(r.GVR, namespace, obj.GetName(), opts); err != nil && !apierrors.IsNotFound(err) {
				return 0, err
			}
		}
		left++
		for _, f := range obj.GetFinalizers() {
			finalizers[f]++
		}
	}
	return left, nil
}

// namespaceConditionTypes are the conditions upstream's namespace controller keeps, with what
// each says when nothing is wrong.
var namespaceConditionTypes = []struct {
	typ             corev1.NamespaceConditionType
	reason, message string
}{
	{corev1.NamespaceDeletionDiscoveryFailure, "ResourcesDiscovered", "All resources successfully discovered"},
	{corev1.NamespaceDeletionGVParsingFailure, "ParsedGroupVersions", "All legacy kube types successfully parsed"},
	{corev1.NamespaceDeletionContentFailure, "ContentDeleted", "All content successfully deleted, may be waiting on finalization"},
	{corev1.NamespaceContentRemaining, "ContentRemoved", "All content successfully removed"},
	{corev1.NamespaceFinalizersRemaining, "ContentHasNoFinalizers", "All content-preserving finalizers finished"},
}

// updateConditions writes the namespace's deletion conditions, as upstream's
// namespaceConditionUpdater does, when they change.
func (n *namespaceController) updateConditions(ctx context.Context, ns *corev1.Namespace, remaining map[schema.GroupVersionResource]int, finalizers map[string]int, errs []string) error {
	failing := map[corev1.NamespaceConditionType]corev1.NamespaceCondition{}
	if len(errs) > 0 {
		sort.Strings(errs)
		failing[corev1.NamespaceDeletionContentFailure] = corev1.NamespaceCondition{Reason: "ContentDeletionFailed",
			Message: fmt.Sprintf("Failed to delete all resource types, %d remaining: %v", len(errs), strings.Join(errs, ", "))}
	}
	if len(remaining) > 0 {
		var list []string
		for gvr, count := range remaining {
			list = append(list, fmt.Sprintf("%s.%s has %d resource instances", gvr.Resource, gvr.Group, count))
		}
		sort.Strings(list)
		failing[corev1.NamespaceContentRemaining] = corev1.NamespaceCondition{Reason: "SomeResourcesRemain",
			Message: "Some resources are remaining: " + strings.Join(list, ", ")}
	}
	if len(finalizers) > 0 {
		var list []string
		for f, count := range finalizers {
			list = append(list, fmt.Sprintf("%s in %d resource instances", f, count))
		}
		sort.Strings(list)
		failing[corev1.NamespaceFinalizersRemaining] = corev1.NamespaceCondition{Reason: "SomeFinalizersRemain",
			Message: "Some content in the namespace has finalizers remaining: " + strings.Join(list, ", ")}
	}
	next := ns.DeepCopy()
	changed := false
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	for _, t := range namespaceConditionTypes {
		want := corev1.NamespaceCondition{Type: t.typ, Status: corev1.ConditionFalse, Reason: t.reason, Message: t.message, LastTransitionTime: now}
		if f, ok := failing[t.typ]; ok {
			want.Status, want.Reason, want.Message = corev1.ConditionTrue, f.Reason, f.Message
		}
		i := slices.IndexFunc(next.Status.Conditions, func(c corev1.NamespaceCondition) bool { return c.Type == t.typ })
		switch {
		case i < 0:
			next.Status.Conditions = append(next.Status.Conditions, want)
			changed = true
		case next.Status.Conditions[i].Status != want.Status || next.Status.Conditions[i].Reason != want.Reason || next.Status.Conditions[i].Message != want.Message:
			if next.Status.Conditions[i].Status == want.Status {
				want.LastTransitionTime = next.Status.Conditions[i].LastTransitionTime
			}
			next.Status.Conditions[i] = want
			changed = true
		}
	}
	if !changed {
		return nil
	}
	if err := n.c.client.Status().Update(ctx, next); err != nil {
		return client.IgnoreNotFound(err)
	}
	*ns = *next
	return nil
}

// finalize removes the kubernetes finalizer through namespaces/finalize, as upstream's
// finalizeNamespace does; the registry removes the namespace if no other finalizer holds it.
func (n *namespaceController) finalize(ctx context.Context, ns *corev1.Namespace) error {
	next := ns.DeepCopy()
	next.Spec.Finalizers = slices.DeleteFunc(next.Spec.Finalizers, func(f corev1.FinalizerName) bool { return f == corev1.FinalizerKubernetes })
	_, err := n.c.store.Update(corev1.SchemeGroupVersion.WithResource("namespaces"), "", next, store.UpdateOptions{
		Subresource: "finalize", FieldManager: "namespace-controller", SkipManagedFields: true, SkipSyncWait: true,
	})
	return client.IgnoreNotFound(err)
}
