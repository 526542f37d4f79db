package store

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// Client returns a controller-runtime client straight on this store (no HTTP), for reconcilers.
// It takes typed objects of Scheme() and unstructured ones of the same kinds.
func (c *Cluster) Client(opts ...ClientOption) client.Client {
	s := &storeClient{c: c}
	for _, o := range opts {
		o(s)
	}
	return s
}

// ClientOption tunes a Client.
type ClientOption func(*storeClient)

// WithoutManagedFields makes the client's creates, updates and non-apply patches skip
// managed-fields tracking (UpdateOptions.SkipManagedFields): objects it writes carry no
// managedFields entry for its writes, as objects written before server-side apply existed.
// Objects that already have managedFields, and its server-side applies, are tracked as usual.
// It suits the simulator's own writes (Nodes, static Pods), which no client needs to see owned.
func WithoutManagedFields() ClientOption { return func(s *storeClient) { s.untracked = true } }

// WithoutSyncWait makes the client's writes return once queued to disk rather than once synced
// (UpdateOptions.SkipSyncWait), and its reads answer from memory at once, where a read waits
// until what it shows is on disk (ListOptions.SkipSyncWait): for the simulator's own writes and
// reads, which it derives again after a crash, so that a machine's phases do not wait for
// fsyncs, and the writes they queue share commits instead of each read forcing one.
func WithoutSyncWait() ClientOption { return func(s *storeClient) { s.noSyncWait = true } }

// storeClient adapts controller-runtime's client options to the store's verbs.
type storeClient struct {
	c          *Cluster
	untracked  bool // see WithoutManagedFields
	noSyncWait bool // see WithoutSyncWait
}

// defaultFieldManager names writes through Client() that set no field owner, as the real API
// server names them after the client's user agent.
const defaultFieldManager = "goofy"

func managerOr(m string) string {
	if m == "" {
		return defaultFieldManager
	}
	return m
}

var _ client.Client = &storeClient{}

func (s *storeClient) Scheme() *runtime.Scheme     { return Scheme() }
func (s *storeClient) RESTMapper() meta.RESTMapper { return RESTMapper() }

func (s *storeClient) GroupVersionKindFor(obj runtime.Object) (schema.GroupVersionKind, error) {
	return apiutil.GVKForObject(obj, Scheme())
}

func (s *storeClient) IsObjectNamespaced(obj runtime.Object) (bool, error) {
	info, err := resourceOf(obj)
	if err != nil {
		return false, err
	}
	return info.Namespaced, nil
}

// resourceOf finds the served resource of an object or list.
func resourceOf(obj runtime.Object) (*ResourceInfo, error) {
	gvk, err := apiutil.GVKForObject(obj, Scheme())
	if err != nil {
		return nil, err
	}
	if meta.IsListType(obj) {
		gvk.Kind = strings.TrimSuffix(gvk.Kind, "List")
	}
	info, ok := shared().byGVK[gvk]
	if !ok {
		return nil, &meta.NoKindMatchError{GroupKind: gvk.GroupKind(), SearchedVersions: []string{gvk.Version}}
	}
	return info, nil
}

// copyResult writes a store result into the caller's object, typed or unstructured.
func copyResult(dst runtime.Object, src runtime.Object) error {
	if u, ok := dst.(runtime.Unstructured); ok {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(src)
		if err != nil {
			return err
		}
		u.SetUnstructuredContent(m)
		if gvk := src.GetObjectKind().GroupVersionKind(); !gvk.Empty() {
			dst.GetObjectKind().SetGroupVersionKind(gvk)
		}
		return nil
	}
	dv, sv := reflect.ValueOf(dst), reflect.ValueOf(src)
	if dv.Type() != sv.Type() {
		return fmt.Errorf("cannot store %T into %T", src, dst)
	}
	dv.Elem().Set(sv.Elem())
	return nil
}

func isDryRun(dryRun []string) bool {
	return len(dryRun) > 0 && dryRun[0] == metav1.DryRunAll
}

func (s *storeClient) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	info, err := resourceOf(obj)
	if err != nil {
		return err
	}
	out, err := s.c.get(info.GVR, key.Namespace, key.Name, !s.noSyncWait)
	if err != nil {
		return err
	}
	return copyResult(obj, out)
}

func (s *storeClient) List(_ context.Context, list client.ObjectList, opts ...client.ListOption) error {
	info, err := resourceOf(list)
	if err != nil {
		return err
	}
	lo := (&client.ListOptions{}).ApplyOptions(opts)
	o := ListOptions{LabelSelector: lo.LabelSelector, FieldSelector: lo.FieldSelector, Limit: lo.Limit, Continue: lo.Continue,
		SkipSyncWait: s.noSyncWait}
	if lo.Raw != nil {
		o.ResourceVersion, o.ResourceVersionMatch = lo.Raw.ResourceVersion, lo.Raw.ResourceVersionMatch
	}
	out, err := s.c.List(info.GVR, lo.Namespace, o)
	if err != nil {
		return err
	}
	if u, ok := list.(*unstructured.UnstructuredList); ok {
		return copyUnstructuredList(u, out)
	}
	return copyResult(list, out)
}

func copyUnstructuredList(dst *unstructured.UnstructuredList, src runtime.Object) error {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(src)
	if err != nil {
		return err
	}
	gvk := dst.GroupVersionKind()
	items, _ := m["items"].([]interface{})
	delete(m, "items")
	dst.Object = m
	dst.Items = make([]unstructured.Unstructured, 0, len(items))
	itemGVK := gvk.GroupVersion().WithKind(strings.TrimSuffix(gvk.Kind, "List"))
	for _, it := range items {
		u := unstructured.Unstructured{Object: it.(map[string]interface{})}
		u.SetGroupVersionKind(itemGVK)
		dst.Items = append(dst.Items, u)
	}
	dst.SetGroupVersionKind(gvk)
	return nil
}

func (s *storeClient) Create(_ context.Context, obj client.Object, opts ...client.CreateOption) error {
	info, err := resourceOf(obj)
	if err != nil {
		return err
	}
	co := (&client.CreateOptions{}).ApplyOptions(opts)
	out, err := s.c.Create(info.GVR, obj.GetNamespace(), obj, CreateOptions{
		DryRun: isDryRun(co.DryRun), FieldManager: managerOr(co.FieldManager), FieldValidation: co.FieldValidation,
		SkipManagedFields: s.untracked, SkipSyncWait: s.noSyncWait,
	})
	if err != nil {
		return err
	}
	return copyResult(obj, out)
}

func (s *storeClient) Update(_ context.Context, obj client.Object, opts ...client.UpdateOption) error {
	return s.update(obj, "", (&client.UpdateOptions{}).ApplyOptions(opts))
}

func (s *storeClient) update(obj client.Object, sub string, uo *client.UpdateOptions) error {
	info, err := resourceOf(obj)
	if err != nil {
		return err
	}
	out, err := s.c.Update(info.GVR, obj.GetNamespace(), obj, UpdateOptions{
		DryRun: isDryRun(uo.DryRun), FieldManager: managerOr(uo.FieldManager), FieldValidation: uo.FieldValidation, Subresource: sub,
		SkipManagedFields: s.untracked, SkipSyncWait: s.noSyncWait,
	})
	if err != nil {
		return err
	}
	return copyResult(obj, out)
}

func (s *storeClient) Patch(_ context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	return s.patch(obj, patch, "", (&client.PatchOptions{}).ApplyOptions(opts))
}

func (s *storeClient) patch(obj client.Object, patch client.Patch, sub string, po *client.PatchOptions) error {
	info, err := resourceOf(obj)
	if err != nil {
		return err
	}
	data, err := patch.Data(obj)
	if err != nil {
		return err
	}
	manager := po.FieldManager
	if patch.Type() != types.ApplyYAMLPatchType {
		manager = managerOr(manager)
	}
	out, err := s.c.Patch(info.GVR, obj.GetNamespace(), obj.GetName(), patch.Type(), data, PatchOptions{
		DryRun: isDryRun(po.DryRun), FieldManager: manager, FieldValidation: po.FieldValidation,
		Force: po.Force != nil && *po.Force, Subresource: sub, SkipManagedFields: s.untracked, SkipSyncWait: s.noSyncWait,
	})
	if err != nil {
		return err
	}
	return copyResult(obj, out)
}

func (s *storeClient) Apply(_ context.Context, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
	return s.apply(obj, "", (&client.ApplyOptions{}).ApplyOptions(opts))
}

// apply sends an apply configuration as a server-side apply patch and decodes the result back
// into it, as the real client does.
func (s *storeClient) apply(obj runtime.ApplyConfiguration, sub string, ao *client.ApplyOptions) error {
	data, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	var u unstructured.Unstructured
	if err := json.Unmarshal(data, &u.Object); err != nil {
		return err
	}
	gvk := u.GroupVersionKind()
	info, ok := shared().byGVK[gvk]
	if !ok {
		return &meta.NoKindMatchError{GroupKind: gvk.GroupKind(), SearchedVersions: []string{gvk.Version}}
	}
	out, err := s.c.Patch(info.GVR, u.GetNamespace(), u.GetName(), types.ApplyYAMLPatchType, data, PatchOptions{
		DryRun: isDryRun(ao.DryRun), FieldManager: ao.FieldManager, Force: ao.Force != nil && *ao.Force, Subresource: sub,
		SkipSyncWait: s.noSyncWait,
	})
	if err != nil {
		return err
	}
	res, err := json.Marshal(out)
	if err != nil {
		return err
	}
	return json.Unmarshal(res, obj)
}

func (s *storeClient) Delete(_ context.Context, obj client.Object, opts ...client.DeleteOption) error {
	info, err := resourceOf(obj)
	if err != nil {
		return err
	}
	do := (&client.DeleteOptions{}).ApplyOptions(opts)
	_, err = s.c.Delete(info.GVR, obj.GetNamespace(), obj.GetName(), s.deleteOptions(do))
	return err
}

func (s *storeClient) deleteOptions(do *client.DeleteOptions) DeleteOptions {
	return DeleteOptions{
		DryRun: isDryRun(do.DryRun), Preconditions: do.Preconditions,
		GracePeriodSeconds: do.GracePeriodSeconds, PropagationPolicy: do.PropagationPolicy,
		SkipSyncWait: s.noSyncWait,
	}
}

func (s *storeClient) DeleteAllOf(_ context.Context, obj client.Object, opts ...client.DeleteAllOfOption) error {
	info, err := resourceOf(obj)
	if err != nil {
		return err
	}
	dao := (&client.DeleteAllOfOptions{}).ApplyOptions(opts)
	lo := ListOptions{LabelSelector: dao.LabelSelector, FieldSelector: dao.FieldSelector}
	_, err = s.c.DeleteCollection(info.GVR, dao.Namespace, lo, s.deleteOptions(&dao.DeleteOptions))
	return err
}

func (s *storeClient) Status() client.SubResourceWriter {
	return &subResourceClient{s: s, name: "status"}
}

func (s *storeClient) SubResource(name string) client.SubResourceClient {
	return &subResourceClient{s: s, name: name}
}

// subResourceClient serves the status subresource and pods/binding; other subresources
// (eviction, scale, ...) belong to the HTTP layer and answer 405 here.
type subResourceClient struct {
	s    *storeClient
	name string
}

func (r *subResourceClient) supported() error {
	if r.name != "status" {
		return apierrors.NewMethodNotSupported(schema.GroupResource{Resource: r.name}, "store client")
	}
	return nil
}

func (r *subResourceClient) Get(ctx context.Context, obj, subResource client.Object, _ ...client.SubResourceGetOption) error {
	if err := r.supported(); err != nil {
		return err
	}
	info, err := resourceOf(obj)
	if err != nil {
		return err
	}
	out, err := r.s.c.get(info.GVR, obj.GetNamespace(), obj.GetName(), !r.s.noSyncWait)
	if err != nil {
		return err
	}
	return copyResult(subResource, out)
}

// Create serves pods/binding (the scheduler's assignment); other subresources answer 405.
func (r *subResourceClient) Create(_ context.Context, obj, sub client.Object, opts ...client.SubResourceCreateOption) error {
	binding, ok := sub.(*corev1.Binding)
	if _, isPod := obj.(*corev1.Pod); r.name != "binding" || !ok || !isPod {
		return apierrors.NewMethodNotSupported(schema.GroupResource{Resource: r.name}, "create")
	}
	co := (&client.SubResourceCreateOptions{}).ApplyOptions(opts)
	if binding.Name == "" {
		binding.Name = obj.GetName()
	}
	return r.s.c.Bind(obj.GetNamespace(), binding, CreateOptions{DryRun: isDryRun(co.DryRun), SkipSyncWait: r.s.noSyncWait})
}

func (r *subResourceClient) Update(_ context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	if err := r.supported(); err != nil {
		return err
	}
	uo := (&client.SubResourceUpdateOptions{}).ApplyOptions(opts)
	return r.s.update(obj, r.name, &uo.UpdateOptions)
}

func (r *subResourceClient) Patch(_ context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	if err := r.supported(); err != nil {
		return err
	}
	po := (&client.SubResourcePatchOptions{}).ApplyOptions(opts)
	return r.s.patch(obj, patch, r.name, &po.PatchOptions)
}

func (r *subResourceClient) Apply(_ context.Context, obj runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
	if err := r.supported(); err != nil {
		return err
	}
	ao := (&client.SubResourceApplyOptions{}).ApplyOpts(opts)
	return r.s.apply(obj, r.name, &ao.ApplyOptions)
}
