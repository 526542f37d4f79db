package kinds

import (
	"fmt"
	"sort"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
)

// scheme holds the Go types of every served kind; it is process-wide and built once, so an idle
// cluster costs only its objects.
var scheme = newScheme()

func newScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		corev1.AddToScheme, appsv1.AddToScheme, batchv1.AddToScheme, rbacv1.AddToScheme,
		storagev1.AddToScheme, policyv1.AddToScheme, coordinationv1.AddToScheme,
		discoveryv1.AddToScheme, eventsv1.AddToScheme, apiextensionsv1.AddToScheme,
	} {
		utilruntime.Must(add(s))
	}
	metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
	return s
}

// registered collects the strategies the kinds' files declare in their init functions.
var registered []Strategy

func register(s Strategy) { registered = append(registered, s) }

type index struct {
	all    []Strategy // sorted by group, then resource, as discovery lists them
	byGVR  map[schema.GroupVersionResource]Strategy
	byGR   map[schema.GroupResource]Strategy
	byGVK  map[schema.GroupVersionKind]Strategy
	mapper meta.RESTMapper
}

var (
	indexOnce sync.Once
	idx       *index
)

// built indexes the registered strategies once, registers their defaults with the scheme and
// builds the REST mapper.
func built() *index {
	indexOnce.Do(func() {
		x := &index{
			byGVR: map[schema.GroupVersionResource]Strategy{},
			byGR:  map[schema.GroupResource]Strategy{},
			byGVK: map[schema.GroupVersionKind]Strategy{},
		}
		x.all = append(x.all, registered...)
		sort.SliceStable(x.all, func(i, j int) bool {
			a, b := x.all[i].Info().GVR, x.all[j].Info().GVR
			if a.Group != b.Group {
				return a.Group < b.Group
			}
			return a.Resource < b.Resource
		})
		var gvs []schema.GroupVersion
		seen := map[schema.GroupVersion]bool{}
		for _, s := range x.all {
			if gv := s.Info().GVR.GroupVersion(); !seen[gv] {
				seen[gv] = true
				gvs = append(gvs, gv)
			}
		}
		m := meta.NewDefaultRESTMapper(gvs)
		for _, s := range x.all {
			info := s.Info()
			if _, dup := x.byGVR[info.GVR]; dup {
				panic(fmt.Sprintf("kinds: %v registered twice", info.GVR))
			}
			obj, err := scheme.New(info.GVK())
			if err != nil {
				panic(fmt.Sprintf("kinds: kind %v not in scheme: %v", info.GVK(), err))
			}
			s := s
			scheme.AddTypeDefaultingFunc(obj, func(o any) { s.Default(o.(runtime.Object)) })
			x.byGVR[info.GVR] = s
			x.byGR[info.GVR.GroupResource()] = s
			x.byGVK[info.GVK()] = s
			scope := meta.RESTScopeRoot
			if info.Namespaced {
				scope = meta.RESTScopeNamespace
			}
			m.AddSpecific(info.GVK(), info.GVR, info.GVR.GroupVersion().WithResource(info.Singular), scope)
		}
		x.mapper = m
		idx = x
	})
	return idx
}

// For returns the strategy of a served resource.
func For(gvr schema.GroupVersionResource) (Strategy, bool) {
	s, ok := built().byGVR[gvr]
	return s, ok
}

// ForGroupResource returns the strategy of a served resource by group and resource.
func ForGroupResource(gr schema.GroupResource) (Strategy, bool) {
	s, ok := built().byGR[gr]
	return s, ok
}

// ForKind returns the strategy of a served kind.
func ForKind(gvk schema.GroupVersionKind) (Strategy, bool) {
	s, ok := built().byGVK[gvk]
	return s, ok
}

// All returns every served kind's strategy, ordered by group and resource.
func All() []Strategy { return built().all }

// Scheme returns the scheme of every served kind, with the kinds' defaults registered.
func Scheme() *runtime.Scheme {
	built()
	return scheme
}

// RESTMapper maps every served kind to its resource.
func RESTMapper() meta.RESTMapper { return built().mapper }
