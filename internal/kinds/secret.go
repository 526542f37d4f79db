package kinds

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// secretStrategy: stringData is write-only and merged into data; data keys must be valid and
// values add up to at most 1 MiB; the type never changes and an immutable Secret's data neither;
// secrets are selected by type.
type secretStrategy struct{ base }

func init() {
	register(secretStrategy{newBase(resource{corev1.SchemeGroupVersion, "secrets", "Secret", true, nil, nil, nil})})
}

// Default merges stringData into data, as upstream's conversion does on decode, so validation and
// storage see data only.
func (secretStrategy) Default(obj runtime.Object) {
	s := obj.(*corev1.Secret)
	if s.Type == "" {
		s.Type = corev1.SecretTypeOpaque
	}
	if len(s.StringData) == 0 {
		return
	}
	if s.Data == nil {
		s.Data = map[string][]byte{}
	}
	for k, v := range s.StringData {
		s.Data[k] = []byte(v)
	}
	s.StringData = nil
}

func (s secretStrategy) Validate(ctx context.Context, obj runtime.Object) field.ErrorList {
	return append(s.base.Validate(ctx, obj), validateSecretData(obj.(*corev1.Secret))...)
}

func (secretStrategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	next, cur := obj.(*corev1.Secret), old.(*corev1.Secret)
	var errs field.ErrorList
	if cur.Type != "" { // state written before the type was defaulted
		errs = apimachineryvalidation.ValidateImmutableField(next.Type, cur.Type, field.NewPath("type"))
	}
	var changed []string
	if !equality.Semantic.DeepEqual(next.Data, cur.Data) {
		changed = append(changed, "data")
	}
	errs = append(errs, immutableDataErrors(cur.Immutable, next.Immutable, changed...)...)
	return append(errs, validateSecretData(next)...)
}

// validateSecretData is upstream's rule: valid keys and at most corev1.MaxSecretSize bytes of
// values.
func validateSecretData(s *corev1.Secret) field.ErrorList {
	var errs field.ErrorList
	dataPath := field.NewPath("data")
	total := 0
	for key, value := range s.Data {
		for _, msg := range validation.IsConfigMapKey(key) {
			errs = append(errs, field.Invalid(dataPath.Key(key), key, msg))
		}
		total += len(value)
	}
	if total > corev1.MaxSecretSize {
		errs = append(errs, field.TooLong(dataPath, "", corev1.MaxSecretSize))
	}
	return errs
}

var secretFieldLabels = allowedLabels("metadata.name", "metadata.namespace", "type")

func (secretStrategy) FieldLabel(label string) (string, bool) { return secretFieldLabels(label) }

func (secretStrategy) SelectableFields(obj runtime.Object) fields.Set {
	sec := obj.(*corev1.Secret)
	s := metaFields(sec, true)
	s["type"] = string(sec.Type)
	return s
}

func (secretStrategy) Printer() Printer { return secretPrinter }

var secretPrinter = Printer{
	Columns: []metav1.TableColumnDefinition{colName, col("Type", "string", 0), col("Data", "string", 0), colAge},
	Cells: func(o runtime.Object) []any {
		s := o.(*corev1.Secret)
		return []any{s.Name, string(s.Type), int64(len(s.Data) + len(s.StringData)), age(s.CreationTimestamp)}
	},
}
