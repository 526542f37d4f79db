package kinds

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// configMapStrategy: data keys must be valid and their values add up to at most 1 MiB; an
// immutable ConfigMap's data never changes.
type configMapStrategy struct{ base }

func init() {
	register(configMapStrategy{newBase(resource{corev1.SchemeGroupVersion, "configmaps", "ConfigMap", true,
		[]string{"cm"}, nil, nil})})
}

func (s configMapStrategy) Validate(ctx context.Context, obj runtime.Object) field.ErrorList {
	return append(s.base.Validate(ctx, obj), validateConfigMapData(obj.(*corev1.ConfigMap))...)
}

func (configMapStrategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	next, cur := obj.(*corev1.ConfigMap), old.(*corev1.ConfigMap)
	var changed []string
	if !equality.Semantic.DeepEqual(next.Data, cur.Data) {
		changed = append(changed, "data")
	}
	if !equality.Semantic.DeepEqual(next.BinaryData, cur.BinaryData) {
		changed = append(changed, "binaryData")
	}
	return append(immutableDataErrors(cur.Immutable, next.Immutable, changed...), validateConfigMapData(next)...)
}

// validateConfigMapData is upstream's rule: valid keys, no key in both data and binaryData, and at
// most corev1.MaxSecretSize bytes of values in all.
func validateConfigMapData(cm *corev1.ConfigMap) field.ErrorList {
	var errs field.ErrorList
	total := 0
	for key, value := range cm.Data {
		for _, msg := range validation.IsConfigMapKey(key) {
			errs = append(errs, field.Invalid(field.NewPath("data").Key(key), key, msg))
		}
		if _, dup := cm.BinaryData[key]; dup {
			errs = append(errs, field.Invalid(field.NewPath("data").Key(key), key, "duplicate of key present in binaryData"))
		}
		total += len(value)
	}
	for key, value := range cm.BinaryData {
		for _, msg := range validation.IsConfigMapKey(key) {
			errs = append(errs, field.Invalid(field.NewPath("binaryData").Key(key), key, msg))
		}
		total += len(value)
	}
	if total > corev1.MaxSecretSize {
		// Upstream names no field: the error is about the whole object.
		errs = append(errs, field.TooLong(field.NewPath(""), "", corev1.MaxSecretSize))
	}
	return errs
}

func (configMapStrategy) Printer() Printer { return configMapPrinter }

var configMapPrinter = Printer{
	Columns: []metav1.TableColumnDefinition{colName, col("Data", "string", 0), colAge},
	Cells: func(o runtime.Object) []any {
		c := o.(*corev1.ConfigMap)
		return []any{c.Name, int64(len(c.Data) + len(c.BinaryData)), age(c.CreationTimestamp)}
	},
}

// immutableDataErrors is upstream's rule for a ConfigMap or Secret marked immutable: neither the
// flag nor its data fields (those named in changed differ) may change.
func immutableDataErrors(was, is *bool, changed ...string) field.ErrorList {
	if was == nil || !*was {
		return nil
	}
	const msg = "field is immutable when `immutable` is set"
	var errs field.ErrorList
	if is == nil || !*is {
		errs = append(errs, field.Forbidden(field.NewPath("immutable"), msg))
	}
	for _, f := range changed {
		errs = append(errs, field.Forbidden(field.NewPath(f), msg))
	}
	return errs
}
