package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"

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
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// Patch patches an object with a JSON patch, JSON merge patch, strategic merge patch (using the
// typed struct as schema) or server-side apply (managed fields, conflicts as 409 with causes,
// Force takes ownership; apply creates a missing object).
func (c *Cluster) Patch(gvr schema.GroupVersionResource, namespace, name string, pt types.PatchType, data []byte, opts PatchOptions) (runtime.Object, error) {
	res, err := c.PatchObject(gvr, namespace, name, pt, data, opts)
	return res.Object, err
}

// PatchResult is the outcome of a patch.
type PatchResult struct {
	Object runtime.Object
	// Created: server-side apply created the object (kube-apiserver answers 201).
	Created bool
	// Warnings are the unknown and duplicate fields found with fieldValidation Warn.
	Warnings []string
}

// PatchObject is Patch for the API server: one path decodes the patch, applies it, validates the
// fields (opts.FieldValidation: Strict answers unknown or duplicate fields with 422, Warn returns
// them as warnings, Ignore drops them) and prepares the write, and it says whether apply created
// the object.
func (c *Cluster) PatchObject(gvr schema.GroupVersionResource, namespace, name string, pt types.PatchType, data []byte, opts PatchOptions) (PatchResult, error) {
	b, err := c.lookup(gvr)
	if err != nil {
		return PatchResult{}, err
	}
	if namespace, err = b.requestNamespace(namespace); err != nil {
		return PatchResult{}, err
	}
	if err := b.checkSubresource(opts.Subresource); err != nil {
		return PatchResult{}, err
	}
	po := metav1.PatchOptions{FieldManager: opts.FieldManager, FieldValidation: opts.FieldValidation}
	if opts.Force {
		po.Force = &opts.Force
	}
	if errs := metav1validation.ValidatePatchOptions(&po, pt); len(errs) > 0 {
		return PatchResult{}, apierrors.NewInvalid(schema.GroupKind{Group: metav1.GroupName, Kind: "PatchOptions"}, "", errs)
	}
	// A view's objects are stored as another resource's (views.go): the patch applies to the
	// object as the view shows it, and the result is stored through the stored resource.
	stored := b
	if b.storedAs != nil {
		stored = b.storedAs
	}
	var res PatchResult
	out, err := c.writeOptimistically(stored.info.GVR.GroupResource(), namespace, name, opts.SkipSyncWait, func(cur client.Object) (func() (client.Object, error), error) {
		res = PatchResult{Created: cur == nil}
		seen := cur
		if cur != nil && b.storedAs != nil {
			var err error
			if seen, err = b.toView(cur); err != nil {
				return nil, err
			}
		}
		var next client.Object
		managed := keepManagedFields // apply recorded them
		if pt == types.ApplyYAMLPatchType {
			var err error
			if next, res.Warnings, err = b.applied(seen, namespace, name, data, opts); err != nil {
				return nil, err
			}
		} else {
			if cur == nil {
				return nil, apierrors.NewNotFound(b.info.GVR.GroupResource(), name)
			}
			patched, warnings, err := PatchTyped(seen, pt, data, opts.FieldValidation)
			if err != nil {
				return nil, err
			}
			res.Warnings = warnings
			next = patched.(client.Object)
			if err := checkIdentity(next, namespace, name, b.info.Namespaced); err != nil {
				return nil, err
			}
			managed = trackUpdate(stored, opts.Subresource, opts.FieldManager, opts.SkipManagedFields)
		}
		if b.storedAs != nil {
			var err error
			if next, err = b.fromView(next); err != nil {
				return nil, err
			}
		}
		if cur == nil {
			stored.strategy.Default(next)
			generated, err := stored.beforeCreate(namespace, next)
			if err != nil {
				return nil, err
			}
			if err := opts.ValidateObject.run(next, nil); err != nil {
				return nil, err
			}
			return func() (client.Object, error) { return c.commitCreateLocked(stored, next, generated, opts.DryRun) }, nil
		}
		next, changed, err := stored.prepareUpdate(cur, next, opts.Subresource, managed)
		if err != nil {
			return nil, err
		}
		if err := opts.ValidateObject.run(next, cur); err != nil {
			return nil, err
		}
		return func() (client.Object, error) { return c.commitUpdateLocked(stored, cur, next, changed, opts.DryRun) }, nil
	})
	switch {
	case err != nil && b.storedAs != nil:
		return PatchResult{}, b.viewError(err)
	case err != nil:
		return PatchResult{}, err
	case b.storedAs == nil:
		res.Object = out
		return res, nil
	}
	if res.Object, err = b.toView(out); err != nil {
		return PatchResult{}, err
	}
	return res, nil
}

// keepManagedFields is the managed-fields step of a write whose fields the field manager
// already recorded (server-side apply).
func keepManagedFields(_, next client.Object) (client.Object, error) { return next, nil }

// PatchTyped applies a JSON patch, JSON merge patch or strategic merge patch to cur, a typed
// object whose Go type is also the strategic merge schema, and decodes the result into a new
// object of that type, as kube-apiserver's patch handler does: the patch is decoded and applied
// once. With directive Strict or Warn the patch's duplicate fields and the result's unknown fields
// are found: Strict answers them with 422, Warn returns them as warnings.
func PatchTyped(cur runtime.Object, pt types.PatchType, data []byte, directive string) (runtime.Object, []string, error) {
	validate := directive == metav1.FieldValidationStrict || directive == metav1.FieldValidationWarn
	curJSON, err := json.Marshal(cur)
	if err != nil {
		return nil, nil, apierrors.NewInternalError(err)
	}
	var patched []byte
	var strictErrs []error
	switch pt {
	case types.JSONPatchType:
		p, err := DecodeJSONPatch(data)
		if err != nil {
			return nil, nil, err
		}
		if validate {
			var ops []map[string]any
			errs, _ := kjson.UnmarshalStrict(data, &ops)
			for _, e := range errs {
				strictErrs = append(strictErrs, fmt.Errorf("json patch %w", e))
			}
		}
		if patched, err = p.Apply(curJSON); err != nil {
			return nil, nil, unprocessable(err)
		}
	case types.MergePatchType:
		if validate {
			var m map[string]any
			if strictErrs, err = kjson.UnmarshalStrict(data, &m); err != nil {
				return nil, nil, apierrors.NewBadRequest(fmt.Sprintf("error decoding patch: %v", err))
			}
		}
		if patched, err = jsonpatch.MergePatch(curJSON, data); err != nil {
			return nil, nil, apierrors.NewBadRequest(err.Error())
		}
	case types.StrategicMergePatchType:
		if _, ok := cur.(*unstructured.Unstructured); ok {
			// Custom resources have no Go type to read merge keys from, as upstream.
			return nil, nil, apierrors.NewGenericServerResponse(http.StatusUnsupportedMediaType, "patch", schema.GroupResource{}, "",
				fmt.Sprintf("the body of the request was in an unknown format - accepted media types include: %s, %s, %s",
					types.JSONPatchType, types.MergePatchType, types.ApplyYAMLPatchType), 0, false)
		}
		if validate {
			var m map[string]any
			if strictErrs, err = kjson.UnmarshalStrict(data, &m); err != nil {
				return nil, nil, apierrors.NewBadRequest(err.Error())
			}
		}
		if patched, err = strategicpatch.StrategicMergePatch(curJSON, data, cur); err != nil {
			return nil, nil, smpError(err)
		}
	default:
		return nil, nil, apierrors.NewGenericServerResponse(http.StatusUnsupportedMediaType, "patch", schema.GroupResource{}, "",
			fmt.Sprintf("the body of the request was in an unknown format - accepted media types include: %s, %s, %s, %s",
				types.JSONPatchType, types.MergePatchType, types.StrategicMergePatchType, types.ApplyYAMLPatchType), 0, false)
	}
	var next runtime.Object
	if _, ok := cur.(*unstructured.Unstructured); ok {
		next = &unstructured.Unstructured{}
	} else {
		next = reflect.New(reflect.TypeOf(cur).Elem()).Interface().(runtime.Object)
	}
	if !validate {
		if err := kjson.UnmarshalCaseSensitivePreserveInts(patched, next); err != nil {
			return nil, nil, apierrors.NewBadRequest(err.Error())
		}
		return next, nil, nil
	}
	unknown, err := kjson.UnmarshalStrict(patched, next)
	if err != nil {
		return nil, nil, apierrors.NewBadRequest(err.Error())
	}
	if strictErrs = append(strictErrs, unknown...); len(strictErrs) == 0 {
		return next, nil, nil
	}
	if directive == metav1.FieldValidationWarn {
		warnings := make([]string, len(strictErrs))
		for i, e := range strictErrs {
			warnings[i] = e.Error()
		}
		return next, warnings, nil
	}
	return nil, nil, apierrors.NewInvalid(schema.GroupKind{}, "", field.ErrorList{
		field.Invalid(field.NewPath("patch"), string(patched), runtime.NewStrictDecodingError(strictErrs).Error()),
	})
}

// applied runs server-side apply against cur (nil: the object is to be created) and returns the
// result with its managed fields. It reads no cluster state but cur.
func (b *servedResource) applied(cur client.Object, namespace, name string, data []byte, opts PatchOptions) (client.Object, []string, error) {
	patchObj := &unstructured.Unstructured{Object: map[string]interface{}{}}
	if err := yaml.Unmarshal(data, &patchObj.Object); err != nil {
		return nil, nil, apierrors.NewBadRequest(fmt.Sprintf("error decoding YAML: %v", err))
	}
	if b.custom {
		// A custom resource keeps its integers as int64, as kube-apiserver decodes it (there is
		// no Go type to convert float64 back).
		js, err := yaml.YAMLToJSON(data)
		if err == nil {
			err = kjson.UnmarshalCaseSensitivePreserveInts(js, &patchObj.Object)
		}
		if err != nil {
			return nil, nil, apierrors.NewBadRequest(fmt.Sprintf("error decoding YAML: %v", err))
		}
	}
	var warnings []string
	switch opts.FieldValidation {
	case metav1.FieldValidationStrict, metav1.FieldValidationWarn:
		// Duplicate fields; unknown ones fail the apply against the kind's schema in any mode.
		if err := yaml.UnmarshalStrict(data, &map[string]interface{}{}); err != nil {
			if opts.FieldValidation == metav1.FieldValidationStrict {
				return nil, nil, apierrors.NewBadRequest(fmt.Sprintf("error strict decoding YAML: %v", err))
			}
			warnings = append(warnings, err.Error())
		}
	}
	if gvk := patchObj.GroupVersionKind(); gvk != b.info.GVK() {
		return nil, nil, apierrors.NewBadRequest(fmt.Sprintf("apply patch must be for %s, got apiVersion %q kind %q",
			b.info.GVK(), patchObj.GetAPIVersion(), patchObj.GetKind()))
	}
	if patchObj.GetName() == "" {
		patchObj.SetName(name)
	}
	if b.info.Namespaced && patchObj.GetNamespace() == "" {
		patchObj.SetNamespace(namespace)
	}
	if err := checkIdentity(patchObj, namespace, name, b.info.Namespaced); err != nil {
		return nil, nil, err
	}
	live := cur
	if live == nil {
		if opts.Subresource != "" {
			return nil, nil, apierrors.NewNotFound(b.info.GVR.GroupResource(), name)
		}
		live = b.newObject()
		live.SetName(name)
		live.SetNamespace(namespace)
	}
	fm, err := fieldManagerFor(b, opts.Subresource)
	if err != nil {
		return nil, nil, apierrors.NewInternalError(err)
	}
	res, err := fm.Apply(live, patchObj, opts.FieldManager, opts.Force)
	if err != nil {
		var status apierrors.APIStatus
		if errors.As(err, &status) {
			return nil, nil, err
		}
		return nil, nil, apierrors.NewBadRequest(err.Error())
	}
	next, ok := res.(client.Object)
	if !ok {
		return nil, nil, apierrors.NewInternalError(fmt.Errorf("apply returned %T", res))
	}
	return next, warnings, nil
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
