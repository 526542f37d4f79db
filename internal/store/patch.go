package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/mergepatch"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// Patch patches an object with a JSON patch, JSON merge patch, strategic merge patch (using the
// typed struct as schema) or server-side apply (managed fields, conflicts as 409 with causes,
// Force takes ownership; apply creates a missing object).
func (c *Cluster) Patch(gvr schema.GroupVersionResource, namespace, name string, pt types.PatchType, data []byte, opts PatchOptions) (runtime.Object, error) {
	b, err := lookup(gvr)
	if err != nil {
		return nil, err
	}
	if namespace, err = b.requestNamespace(namespace); err != nil {
		return nil, err
	}
	if err := b.checkSubresource(opts.Subresource); err != nil {
		return nil, err
	}
	po := metav1.PatchOptions{FieldManager: opts.FieldManager, FieldValidation: opts.FieldValidation}
	if opts.Force {
		po.Force = &opts.Force
	}
	if errs := metav1validation.ValidatePatchOptions(&po, pt); len(errs) > 0 {
		return nil, apierrors.NewInvalid(schema.GroupKind{Group: metav1.GroupName, Kind: "PatchOptions"}, "", errs)
	}
	strict := opts.FieldValidation == metav1.FieldValidationStrict

	gr := gvr.GroupResource()
	return c.writeOptimistically(gr, namespace, name, opts.SkipSyncWait, func(cur client.Object) (func() (client.Object, error), error) {
		if pt == types.ApplyYAMLPatchType {
			next, err := b.applied(cur, namespace, name, data, opts, strict)
			if err != nil {
				return nil, err
			}
			if cur == nil {
				return func() (client.Object, error) { return c.createAppliedLocked(b, next, opts.DryRun) }, nil
			}
			next, changed, err := b.prepareUpdate(cur, next, opts.Subresource, keepManagedFields)
			if err != nil {
				return nil, err
			}
			return func() (client.Object, error) { return c.commitUpdateLocked(b, cur, next, changed, opts.DryRun) }, nil
		}
		if cur == nil {
			return nil, apierrors.NewNotFound(gr, name)
		}
		next, err := b.patched(cur, namespace, name, pt, data, strict)
		if err != nil {
			return nil, err
		}
		next, changed, err := b.prepareUpdate(cur, next, opts.Subresource, trackUpdate(b, opts.Subresource, opts.FieldManager, opts.SkipManagedFields))
		if err != nil {
			return nil, err
		}
		return func() (client.Object, error) { return c.commitUpdateLocked(b, cur, next, changed, opts.DryRun) }, nil
	})
}

// keepManagedFields is the managed-fields step of a write whose fields the field manager
// already recorded (server-side apply).
func keepManagedFields(_, next client.Object) (client.Object, error) { return next, nil }

// patched applies a JSON, merge or strategic merge patch to cur and decodes the result.
func (b *kindBehavior) patched(cur client.Object, namespace, name string, pt types.PatchType, data []byte, strict bool) (client.Object, error) {
	gr := b.info.GVR.GroupResource()
	curJSON, err := json.Marshal(cur)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	var patched []byte
	switch pt {
	case types.JSONPatchType:
		p, err := DecodeJSONPatch(data)
		if err != nil {
			return nil, err
		}
		if patched, err = p.Apply(curJSON); err != nil {
			return nil, unprocessable(err)
		}
	case types.MergePatchType:
		if patched, err = jsonpatch.MergePatch(curJSON, data); err != nil {
			return nil, apierrors.NewBadRequest(err.Error())
		}
	case types.StrategicMergePatchType:
		if patched, err = strategicpatch.StrategicMergePatch(curJSON, data, b.newObject()); err != nil {
			return nil, smpError(err)
		}
	default:
		return nil, apierrors.NewGenericServerResponse(http.StatusUnsupportedMediaType, "patch", gr, name,
			fmt.Sprintf("the body of the request was in an unknown format - accepted media types include: %s, %s, %s, %s",
				types.JSONPatchType, types.MergePatchType, types.StrategicMergePatchType, types.ApplyYAMLPatchType), 0, false)
	}
	next := b.newObject()
	if err := decodeInto(patched, next, strict); err != nil {
		return nil, err
	}
	if err := checkIdentity(next, namespace, name, b.info.Namespaced); err != nil {
		return nil, err
	}
	return next, nil
}

// applied runs server-side apply against cur (nil: the object is to be created) and returns the
// result with its managed fields. It reads no cluster state but cur.
func (b *kindBehavior) applied(cur client.Object, namespace, name string, data []byte, opts PatchOptions, strict bool) (client.Object, error) {
	patchObj := &unstructured.Unstructured{Object: map[string]interface{}{}}
	if err := yaml.Unmarshal(data, &patchObj.Object); err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("error decoding YAML: %v", err))
	}
	if strict {
		if err := yaml.UnmarshalStrict(data, &map[string]interface{}{}); err != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("error strict decoding YAML: %v", err))
		}
	}
	if gvk := patchObj.GroupVersionKind(); gvk != b.info.GVK() {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("apply patch must be for %s, got apiVersion %q kind %q",
			b.info.GVK(), patchObj.GetAPIVersion(), patchObj.GetKind()))
	}
	if patchObj.GetName() == "" {
		patchObj.SetName(name)
	}
	if b.info.Namespaced && patchObj.GetNamespace() == "" {
		patchObj.SetNamespace(namespace)
	}
	if err := checkIdentity(patchObj, namespace, name, b.info.Namespaced); err != nil {
		return nil, err
	}
	live := cur
	if live == nil {
		if opts.Subresource != "" {
			return nil, apierrors.NewNotFound(b.info.GVR.GroupResource(), name)
		}
		live = b.newObject()
		live.SetName(name)
		live.SetNamespace(namespace)
	}
	fm, err := fieldManagerFor(b, opts.Subresource)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	res, err := fm.Apply(live, patchObj, opts.FieldManager, opts.Force)
	if err != nil {
		var status apierrors.APIStatus
		if errors.As(err, &status) {
			return nil, err
		}
		return nil, apierrors.NewBadRequest(err.Error())
	}
	next, ok := res.(client.Object)
	if !ok {
		return nil, apierrors.NewInternalError(fmt.Errorf("apply returned %T", res))
	}
	return next, nil
}

// decodeInto decodes a patched document into a typed object; strict mode rejects unknown fields.
func decodeInto(data []byte, obj client.Object, strict bool) error {
	if strict {
		strictErrs, err := kjson.UnmarshalStrict(data, obj)
		if err != nil {
			return apierrors.NewBadRequest(err.Error())
		}
		if len(strictErrs) > 0 {
			return apierrors.NewBadRequest(fmt.Sprintf("strict decoding error: %v", errors.Join(strictErrs...)))
		}
		return nil
	}
	if err := kjson.UnmarshalCaseSensitivePreserveInts(data, obj); err != nil {
		return apierrors.NewBadRequest(err.Error())
	}
	return nil
}

// checkIdentity refuses a body whose name or namespace differs from the request's.
func checkIdentity(obj metav1.Object, namespace, name string, namespaced bool) error {
	if obj.GetName() != name {
		return apierrors.NewBadRequest(fmt.Sprintf("the name of the object (%s) does not match the name on the URL (%s)", obj.GetName(), name))
	}
	if namespaced && obj.GetNamespace() != namespace {
		return apierrors.NewBadRequest("the namespace of the provided object does not match the namespace sent on the request")
	}
	return nil
}

func unprocessable(err error) error {
	return apierrors.NewGenericServerResponse(http.StatusUnprocessableEntity, "", schema.GroupResource{}, "", err.Error(), 0, false)
}

// smpError classifies strategic merge patch errors as the real API server does.
func smpError(err error) error {
	switch {
	case errors.Is(err, mergepatch.ErrNoListOfLists), errors.Is(err, mergepatch.ErrPatchContentNotMatchRetainKeys):
		return unprocessable(err)
	default:
		return apierrors.NewBadRequest(err.Error())
	}
}
