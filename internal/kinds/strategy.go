package kinds

import (
	"context"
	"reflect"

	"k8s.io/apimachinery/pkg/api/equality"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/storage/names"
)

// Strategy is what the registry's generic verbs and the API server's handlers know of one kind.
// The create, update and delete halves are k8s.io/apiserver's own strategy interfaces, so the
// registry runs them through rest.BeforeCreate, rest.BeforeUpdate and rest.BeforeDelete exactly
// as kube-apiserver's generic registry does. A kind with graceful deletion (pods) also implements
// rest.RESTGracefulDeleteStrategy.
type Strategy interface {
	rest.RESTCreateStrategy
	rest.RESTUpdateStrategy

	// Info is the kind's resource entry.
	Info() ResourceInfo
	// Default fills in the API defaults clients rely on, as decoding does upstream; it runs on
	// every write before the strategy's preparation.
	Default(obj runtime.Object)
	// StatusStrategy is the update strategy of the status subresource, nil without one.
	StatusStrategy() rest.RESTUpdateStrategy
	// FieldLabel maps a field selector label to the canonical one SelectableFields uses, or
	// reports it unsupported (upstream's field label conversion).
	FieldLabel(label string) (string, bool)
	// SelectableFields returns the fields of obj a field selector may match.
	SelectableFields(obj runtime.Object) fields.Set
	// Printer returns the columns `kubectl get` shows for the kind.
	Printer() Printer
	// Scale returns how the scale subresource maps onto the kind, nil without one.
	Scale() *Scale
}

// base is the strategy of a kind with nothing of its own; each kind's strategy embeds it and
// overrides what differs, as upstream's strategies embed runtime.ObjectTyper and
// names.NameGenerator.
type base struct {
	runtime.ObjectTyper
	names.NameGenerator
	info ResourceInfo
	// validateName checks metadata.name (a DNS-1123 subdomain for most kinds, like upstream).
	validateName apimachineryvalidation.ValidateNameFunc
	// generation: creation sets metadata.generation to 1 and spec changes bump it.
	generation bool
	// createOnUpdate: a PUT of a missing object creates it (rbac, leases, events, ...).
	createOnUpdate bool
	// dropStatusOnCreate: a create's status is reset (clients set it through /status later).
	dropStatusOnCreate bool
}

// newBase declares a kind from its resource entry; options adjust the defaults.
func newBase(r resource, opts ...func(*base)) base {
	b := base{
		ObjectTyper:   scheme,
		NameGenerator: names.SimpleNameGenerator,
		info:          r.info(),
		validateName:  apimachineryvalidation.NameIsDNSSubdomain,
	}
	b.dropStatusOnCreate = b.info.HasSubresource("status")
	for _, o := range opts {
		o(&b)
	}
	return b
}

// withGeneration: the kind tracks spec changes in metadata.generation.
func withGeneration(b *base) { b.generation = true }

// withCreateOnUpdate: a PUT of a missing object creates it.
func withCreateOnUpdate(b *base) { b.createOnUpdate = true }

// withNames sets the kind's metadata.name rule.
func withNames(fn apimachineryvalidation.ValidateNameFunc) func(*base) {
	return func(b *base) { b.validateName = fn }
}

func (b base) Info() ResourceInfo                                        { return b.info }
func (b base) NamespaceScoped() bool                                     { return b.info.Namespaced }
func (b base) AllowCreateOnUpdate() bool                                 { return b.createOnUpdate }
func (b base) AllowUnconditionalUpdate() bool                            { return true }
func (b base) Canonicalize(runtime.Object)                               {}
func (b base) Default(runtime.Object)                                    {}
func (b base) Scale() *Scale                                             { return nil }
func (b base) Printer() Printer                                          { return genericPrinter }
func (b base) WarningsOnCreate(context.Context, runtime.Object) []string { return nil }
func (b base) WarningsOnUpdate(context.Context, runtime.Object, runtime.Object) []string {
	return nil
}

// PrepareForCreate resets what a client may not set on create: the status (for kinds with a
// status subresource) and the generation.
func (b base) PrepareForCreate(_ context.Context, obj runtime.Object) {
	if b.dropStatusOnCreate {
		resetStatus(obj)
	}
	m := obj.(metav1.Object)
	m.SetGeneration(0)
	if b.generation {
		m.SetGeneration(1)
	}
}

// PrepareForUpdate keeps the stored status (it changes only through /status) and bumps the
// generation when the spec changed. rest.BeforeUpdate has already set the old generation.
func (b base) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	if b.info.HasSubresource("status") {
		copyStatus(obj, old)
	}
	if b.generation && !specEqual(obj, old) {
		m := obj.(metav1.Object)
		m.SetGeneration(old.(metav1.Object).GetGeneration() + 1)
	}
}

// Validate checks the object's metadata with the kind's name rule. Kinds with more to validate
// wrap it.
func (b base) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	return apimachineryvalidation.ValidateObjectMetaAccessor(obj.(metav1.Object), b.info.Namespaced, b.validateName, field.NewPath("metadata"))
}

// ValidateUpdate has nothing beyond metadata, which rest.BeforeUpdate validates for every kind.
func (b base) ValidateUpdate(context.Context, runtime.Object, runtime.Object) field.ErrorList {
	return nil
}

func (b base) StatusStrategy() rest.RESTUpdateStrategy {
	if !b.info.HasSubresource("status") {
		return nil
	}
	return statusStrategy{b}
}

func (b base) FieldLabel(label string) (string, bool) {
	return label, label == "metadata.name" || label == "metadata.namespace"
}

func (b base) SelectableFields(obj runtime.Object) fields.Set {
	return metaFields(obj.(metav1.Object), b.info.Namespaced)
}

// statusStrategy is the update strategy of a /status subresource: only the status changes, and of
// the metadata only what upstream lets a status update change.
type statusStrategy struct{ base }

func (statusStrategy) AllowCreateOnUpdate() bool { return false }

func (statusStrategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	copyAllButStatus(obj, old)
	metav1.ResetObjectMetaForStatus(obj.(metav1.Object), old.(metav1.Object))
}

// metaFields are the selectable fields every object has.
func metaFields(obj metav1.Object, namespaced bool) fields.Set {
	s := fields.Set{"metadata.name": obj.GetName()}
	if namespaced {
		s["metadata.namespace"] = obj.GetNamespace()
	}
	return s
}

// allowedLabels is a FieldLabel for a fixed set of field labels.
func allowedLabels(labels ...string) func(string) (string, bool) {
	set := make(map[string]bool, len(labels))
	for _, l := range labels {
		set[l] = true
	}
	return func(l string) (string, bool) { return l, set[l] }
}

// specEqual reports whether two objects of a kind agree on everything but metadata and status,
// which is what upstream compares to decide on a generation bump.
func specEqual(a, b runtime.Object) bool {
	va, vb := reflect.ValueOf(a).Elem(), reflect.ValueOf(b).Elem()
	t := va.Type()
	for i := 0; i < t.NumField(); i++ {
		switch t.Field(i).Name {
		case "TypeMeta", "ObjectMeta", "Status":
			continue
		}
		if !equality.Semantic.DeepEqual(va.Field(i).Interface(), vb.Field(i).Interface()) {
			return false
		}
	}
	return true
}

// resetStatus zeroes obj's status.
func resetStatus(obj runtime.Object) {
	if v := reflect.ValueOf(obj).Elem().FieldByName("Status"); v.IsValid() {
		v.Set(reflect.Zero(v.Type()))
	}
}

// copyStatus sets dst's status to src's (main-resource updates keep the stored status).
func copyStatus(dst, src runtime.Object) {
	vd, vs := reflect.ValueOf(dst).Elem(), reflect.ValueOf(src).Elem()
	if f := vd.FieldByName("Status"); f.IsValid() {
		f.Set(vs.FieldByName("Status"))
	}
}

// copyAllButStatus sets every non-metadata, non-status field of dst to src's (status updates keep
// the stored spec).
func copyAllButStatus(dst, src runtime.Object) {
	vd, vs := reflect.ValueOf(dst).Elem(), reflect.ValueOf(src).Elem()
	t := vd.Type()
	for i := 0; i < t.NumField(); i++ {
		switch t.Field(i).Name {
		case "TypeMeta", "ObjectMeta", "Status":
			continue
		}
		vd.Field(i).Set(vs.Field(i))
	}
}
