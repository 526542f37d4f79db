package store

import (
	"fmt"
	"reflect"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/kinds"
)

// ResourceInfo describes one served resource, for discovery and routing.
type ResourceInfo = kinds.ResourceInfo

// servedResource is the registry's entry for one served resource: the kind's strategy (package
// kinds) and what the generic verbs derive from it once.
type servedResource struct {
	info     ResourceInfo
	strategy kinds.Strategy
	// status is the strategy of the status subresource, nil without one.
	status rest.RESTUpdateStrategy
	goType reflect.Type // struct type of the kind; nil for a custom resource
	// custom: a kind a CustomResourceDefinition defines; its objects are *unstructured.Unstructured.
	custom bool
	// customFieldManagers are a custom kind's field managers by subresource, guarded by
	// fieldManagersMu: kept with the kind (not by GVK) since two clusters may define one GVK
	// differently, and dropped with it.
	customFieldManagers map[string]*managedfields.FieldManager
	// webhookConversion: a custom kind's version whose CRD converts through a webhook, which Goofy
	// does not call: its objects are answered with an error, the storage version serves them.
	webhookConversion bool
	// typeConverter is a custom kind's server-side apply schema, built on first use and shared
	// by its versions.
	typeConverter func() (managedfields.TypeConverter, error)
	// storedAs is the resource holding this one's objects when it is a view (views.go).
	storedAs *servedResource
}

var podsGR = corev1.SchemeGroupVersion.WithResource("pods").GroupResource()

type registry struct {
	byGVR map[schema.GroupVersionResource]*servedResource
	byGR  map[schema.GroupResource]*servedResource
	byGVK map[schema.GroupVersionKind]*ResourceInfo
}

var reg = func() *registry {
	r := &registry{
		byGVR: map[schema.GroupVersionResource]*servedResource{},
		byGR:  map[schema.GroupResource]*servedResource{},
		byGVK: map[schema.GroupVersionKind]*ResourceInfo{},
	}
	for _, s := range kinds.All() {
		info := s.Info()
		obj, err := kinds.Scheme().New(info.GVK())
		if err != nil {
			panic(fmt.Sprintf("store: kind %v not in scheme: %v", info.GVK(), err))
		}
		b := &servedResource{info: info, strategy: s, status: s.StatusStrategy(), goType: reflect.TypeOf(obj).Elem()}
		r.byGVR[info.GVR] = b
		r.byGR[info.GVR.GroupResource()] = b
		r.byGVK[info.GVK()] = &b.info
	}
	for _, b := range r.byGVR {
		if v, ok := b.strategy.(kinds.View); ok {
			b.storedAs = r.byGVR[v.StoredAs()]
		}
	}
	return r
}()

// shared returns the process-wide registry; every cluster shares it so an idle cluster costs
// only its objects.
func shared() *registry { return reg }

func behaviorFor(gvr schema.GroupVersionResource) (*servedResource, bool) {
	b, ok := reg.byGVR[gvr]
	return b, ok
}

func behaviorForGR(gr schema.GroupResource) (*servedResource, bool) {
	b, ok := reg.byGR[gr]
	return b, ok
}

// Scheme returns the scheme shared by all clusters.
func Scheme() *runtime.Scheme { return kinds.Scheme() }

// RESTMapper returns the REST mapper shared by all clusters.
func RESTMapper() meta.RESTMapper { return kinds.RESTMapper() }

// Resources returns every served resource (a copy, safe to modify).
func Resources() []ResourceInfo {
	all := kinds.All()
	out := make([]ResourceInfo, len(all))
	for i, s := range all {
		out[i] = s.Info()
	}
	return out
}

// LookupResource finds a served resource by group, version and plural resource name.
func LookupResource(group, version, resource string) (ResourceInfo, bool) {
	b, ok := reg.byGVR[schema.GroupVersionResource{Group: group, Version: version, Resource: resource}]
	if !ok {
		return ResourceInfo{}, false
	}
	return b.info, true
}
