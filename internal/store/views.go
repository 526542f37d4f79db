package store

import (
	"errors"
	"fmt"
	"maps"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// A view serves another resource's objects in its own kind, as kube-apiserver serves
// events.k8s.io/v1 Events from the core Events' storage: one collection, two shapes. Every verb
// on a view runs on the stored resource (its strategy, its storage, its watch history) and
// converts through the scheme on the way in and out.

// toView converts a stored object to the view's kind; the result shares maps and slices with obj.
func (b *servedResource) toView(obj runtime.Object) (client.Object, error) {
	if b.custom {
		return b.convertUnstructured(obj, b.info.GVK())
	}
	out := b.newObject()
	if err := Scheme().Convert(obj, out, nil); err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	out.GetObjectKind().SetGroupVersionKind(b.info.GVK())
	return out, nil
}

// fromView converts an object of the view's kind to the stored kind.
func (b *servedResource) fromView(obj runtime.Object) (client.Object, error) {
	if b.custom {
		return b.convertUnstructured(obj, b.storedAs.info.GVK())
	}
	out := b.storedAs.newObject()
	if err := Scheme().Convert(obj, out, nil); err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	out.GetObjectKind().SetGroupVersionKind(b.storedAs.info.GVK())
	return out, nil
}

// viewResult converts a stored result (object or list) to the view, and names the view's
// resource in errors.
func (b *servedResource) viewResult(obj runtime.Object, err error) (runtime.Object, error) {
	if err != nil {
		return nil, b.viewError(err)
	}
	if !meta.IsListType(obj) {
		return b.toView(obj) // obj is the caller's copy already
	}
	var items []client.Object
	if err := meta.EachListItem(obj, func(o runtime.Object) error {
		v, err := b.toView(o)
		items = append(items, v)
		return err
	}); err != nil {
		return nil, err
	}
	lm, err := meta.ListAccessor(obj)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	return b.buildList(items, lm.GetResourceVersion(), lm.GetContinue(), lm.GetRemainingItemCount(), true), nil
}

// viewError names the view's resource, not the stored one, in an API error (its details and
// message), as clients of the view see upstream.
func (b *servedResource) viewError(err error) error {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return err
	}
	s := status.Status()
	if s.Details == nil || s.Details.Group != b.storedAs.info.GVR.Group || s.Details.Kind != b.storedAs.info.GVR.Resource && s.Details.Kind != b.storedAs.info.Kind {
		return err
	}
	s.Details.Group = b.info.GVR.Group
	stored, view := b.storedAs.info.GVR.GroupResource().String(), b.info.GVR.GroupResource().String()
	s.Message = strings.Replace(s.Message, stored+" \"", view+" \"", 1)
	if s.Details.Kind == b.storedAs.info.Kind {
		s.Message = strings.Replace(s.Message, b.storedAs.info.Kind+" \"", b.info.GVK().GroupKind().String()+" \"", 1)
	}
	return &apierrors.StatusError{ErrStatus: s}
}

// viewListOptions maps a view's field selector onto the stored kind's field labels.
func (b *servedResource) viewListOptions(opts ListOptions) (ListOptions, error) {
	sel, err := b.selectors(opts)
	if err != nil {
		return opts, err
	}
	opts.FieldSelector = sel.field
	return opts, nil
}

func (c *Cluster) getView(b *servedResource, namespace, name string) (runtime.Object, error) {
	return b.viewResult(c.Get(b.storedAs.info.GVR, namespace, name))
}

func (c *Cluster) listView(b *servedResource, namespace string, opts ListOptions) (runtime.Object, error) {
	opts, err := b.viewListOptions(opts)
	if err != nil {
		return nil, err
	}
	return b.viewResult(c.List(b.storedAs.info.GVR, namespace, opts))
}

func (c *Cluster) watchView(b *servedResource, namespace string, opts ListOptions) (*Watcher, error) {
	opts, err := b.viewListOptions(opts)
	if err != nil {
		return nil, err
	}
	w, err := c.Watch(b.storedAs.info.GVR, namespace, opts)
	if err != nil {
		return nil, b.viewError(err)
	}
	w.view = b
	return w, nil
}

// storedInput converts a client's object of the view's kind to the stored kind.
func (b *servedResource) storedInput(obj runtime.Object) (client.Object, error) {
	in, err := b.typedCopy(obj)
	if err != nil {
		return nil, err
	}
	return b.fromView(in)
}

func (c *Cluster) createView(b *servedResource, namespace string, obj runtime.Object, opts CreateOptions) (runtime.Object, error) {
	in, err := b.storedInput(obj)
	if err != nil {
		return nil, err
	}
	return b.viewResult(c.Create(b.storedAs.info.GVR, namespace, in, opts))
}

func (c *Cluster) updateView(b *servedResource, namespace string, obj runtime.Object, opts UpdateOptions) (runtime.Object, error) {
	in, err := b.storedInput(obj)
	if err != nil {
		return nil, err
	}
	return b.viewResult(c.Update(b.storedAs.info.GVR, namespace, in, opts))
}

func (c *Cluster) deleteView(b *servedResource, namespace, name string, opts DeleteOptions) (runtime.Object, error) {
	return b.viewResult(c.Delete(b.storedAs.info.GVR, namespace, name, opts))
}

func (c *Cluster) deleteCollectionView(b *servedResource, namespace string, listOpts ListOptions, opts DeleteOptions) (runtime.Object, error) {
	listOpts, err := b.viewListOptions(listOpts)
	if err != nil {
		return nil, err
	}
	return b.viewResult(c.DeleteCollection(b.storedAs.info.GVR, namespace, listOpts, opts))
}

// convertUnstructured converts a custom resource to another version of its CRD with the "None"
// strategy: only apiVersion changes. The result shares everything but its top-level map. A
// CRD's conversion webhook is not simulated: that is the answer, as a 500 like a failing webhook.
func (b *servedResource) convertUnstructured(obj runtime.Object, gvk schema.GroupVersionKind) (client.Object, error) {
	if b.webhookConversion {
		return nil, apierrors.NewInternalError(fmt.Errorf("conversion webhook for %s is not simulated by Goofy: only the storage version %s of this CustomResourceDefinition is served",
			b.info.GVK(), b.storedAs.info.GVR.Version))
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, apierrors.NewInternalError(fmt.Errorf("a custom resource of type %T", obj))
	}
	out := &unstructured.Unstructured{Object: maps.Clone(u.Object)}
	out.SetGroupVersionKind(gvk)
	return out, nil
}
