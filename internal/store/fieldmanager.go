package store

import (
	"reflect"
	"strings"
	"sync"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	applyconfigurations "k8s.io/client-go/applyconfigurations"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
	"sigs.k8s.io/structured-merge-diff/v6/typed"
)

// splitTypeConverter uses the structured-merge-diff schema published with client-go for all of
// k8s.io/api, so list-map merges and apply conflicts follow the real schema. apiextensions-apiserver
// publishes no schema for CustomResourceDefinition itself, so CRDs use the deduced converter (lists
// are atomic), which is what the real API server would do without models.
type splitTypeConverter struct {
	core, ext managedfields.TypeConverter
}

func (s splitTypeConverter) pick(obj runtime.Object) managedfields.TypeConverter {
	group := obj.GetObjectKind().GroupVersionKind().Group
	if gvks, _, err := Scheme().ObjectKinds(obj); err == nil && len(gvks) > 0 {
		group = gvks[0].Group // typed objects may arrive without apiVersion/kind
	}
	if group == apiextensionsv1.GroupName {
		return s.ext
	}
	return s.core
}

func (s splitTypeConverter) ObjectToTyped(obj runtime.Object, opts ...typed.ValidationOptions) (*typed.TypedValue, error) {
	return s.pick(obj).ObjectToTyped(obj, opts...)
}

func (s splitTypeConverter) TypedToObject(v *typed.TypedValue) (runtime.Object, error) {
	obj, err := s.core.TypedToObject(v)
	if err != nil {
		return s.ext.TypedToObject(v)
	}
	return obj, nil
}

var (
	typeConverterOnce sync.Once
	typeConverter     managedfields.TypeConverter

	fieldManagersMu sync.Mutex
	fieldManagers   = map[fieldManagerKey]*managedfields.FieldManager{}
)

type fieldManagerKey struct {
	gvk         schema.GroupVersionKind
	subresource string
}

// WarmUp builds what every store shares (the scheme and the server-side apply type converter,
// which parses client-go's embedded schema: about 20 MB allocated once) right away. Without it
// they are built on first use, i.e. under the first cluster or write; a process that calls it at
// start pays that before its load begins, so the spike does not add to the load's high-water
// mark. It is safe to call more than once and from several goroutines.
func WarmUp() {
	shared()
	sharedTypeConverter()
}

func sharedTypeConverter() managedfields.TypeConverter {
	typeConverterOnce.Do(func() {
		s := Scheme()
		typeConverter = splitTypeConverter{
			core: applyconfigurations.NewTypeConverter(s),
			ext:  managedfields.NewDeducedTypeConverter(),
		}
	})
	return typeConverter
}

// fieldManagerFor returns the shared field manager of a kind and subresource ("" or "status").
// Reset fields keep apply on the main resource from owning status and vice versa, as the real
// API server's strategies declare.
func fieldManagerFor(b *servedResource, subresource string) (*managedfields.FieldManager, error) {
	key := fieldManagerKey{b.info.GVK(), subresource}
	fieldManagersMu.Lock()
	defer fieldManagersMu.Unlock()
	if b.custom {
		return customFieldManager(b, subresource)
	}
	if fm, ok := fieldManagers[key]; ok {
		return fm, nil
	}
	var reset map[fieldpath.APIVersion]fieldpath.Filter
	if b.status != nil {
		var set *fieldpath.Set
		if subresource == "" {
			set = fieldpath.NewSet(fieldpath.MakePathOrDie("status"))
		} else {
			var paths []fieldpath.Path
			for _, name := range topLevelJSONFields(b.goType) {
				if name != "status" && name != "metadata" && name != "apiVersion" && name != "kind" {
					paths = append(paths, fieldpath.MakePathOrDie(name))
				}
			}
			paths = append(paths, fieldpath.MakePathOrDie("metadata", "labels"), fieldpath.MakePathOrDie("metadata", "annotations"))
			set = fieldpath.NewSet(paths...)
		}
		reset = map[fieldpath.APIVersion]fieldpath.Filter{
			fieldpath.APIVersion(b.info.GVR.GroupVersion().String()): fieldpath.NewExcludeSetFilter(set),
		}
	}
	s := Scheme()
	fm, err := managedfields.NewDefaultFieldManager(sharedTypeConverter(), s, s, s, b.info.GVK(), b.info.GVR.GroupVersion(), subresource, reset)
	if err != nil {
		return nil, err
	}
	fieldManagers[key] = fm
	return fm, nil
}

// topLevelJSONFields lists the JSON names of a kind's top-level fields.
func topLevelJSONFields(t reflect.Type) []string {
	var out []string
	for i := 0; i < t.NumField(); i++ {
		tag := t.Field(i).Tag.Get("json")
		name := strings.Split(tag, ",")[0]
		if name != "" && name != "-" {
			out = append(out, name)
		}
	}
	return out
}

// customFieldManager is the field manager of a custom resource: apply and update tracking with
// the type converter built from the CRD's schemas (kinds.CustomResourceTypeConverter; the
// deduced one, every list atomic, if that cannot be built, as upstream falls back). Status and
// main resource reset each other's fields as upstream's custom resource strategies declare.
// Callers hold fieldManagersMu.
func customFieldManager(b *servedResource, subresource string) (*managedfields.FieldManager, error) {
	if fm, ok := b.customFieldManagers[subresource]; ok {
		return fm, nil
	}
	var set *fieldpath.Set
	if b.status != nil {
		if subresource == "" {
			set = fieldpath.NewSet(fieldpath.MakePathOrDie("status"))
		} else {
			set = fieldpath.NewSet(fieldpath.MakePathOrDie("spec"), fieldpath.MakePathOrDie("metadata"))
		}
	}
	var reset map[fieldpath.APIVersion]fieldpath.Filter
	if set != nil {
		reset = map[fieldpath.APIVersion]fieldpath.Filter{
			fieldpath.APIVersion(b.info.GVR.GroupVersion().String()): fieldpath.NewExcludeSetFilter(set),
		}
	}
	converter, err := b.typeConverter()
	if err != nil {
		converter = managedfields.NewDeducedTypeConverter()
	}
	fm, err := managedfields.NewDefaultCRDFieldManager(converter, unstructuredConvertor{}, noDefaults{},
		unstructuredCreater{}, b.info.GVK(), b.info.GVR.GroupVersion(), subresource, reset)
	if err != nil {
		return nil, err
	}
	if b.customFieldManagers == nil {
		b.customFieldManagers = map[string]*managedfields.FieldManager{}
	}
	b.customFieldManagers[subresource] = fm
	return fm, nil
}
