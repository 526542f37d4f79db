package store

import (
	"sort"
	"strings"
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

// ResourceInfo describes one served resource, for discovery and routing.
type ResourceInfo struct {
	GVR          schema.GroupVersionResource
	Kind         string // e.g. "Pod"
	ListKind     string
	Singular     string
	Namespaced   bool
	Verbs        []string // get list watch create update patch delete deletecollection
	ShortNames   []string
	Categories   []string
	Subresources []string // "status", "scale", "eviction", "log", "portforward"
}

// GVK returns the group/version/kind of the resource's objects.
func (r ResourceInfo) GVK() schema.GroupVersionKind {
	return r.GVR.GroupVersion().WithKind(r.Kind)
}

// HasSubresource reports whether the resource serves the named subresource.
func (r ResourceInfo) HasSubresource(name string) bool {
	for _, s := range r.Subresources {
		if s == name {
			return true
		}
	}
	return false
}

var (
	allVerbs     = []string{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}
	noCollection = []string{"create", "delete", "get", "list", "patch", "update", "watch"}
)

// resourceTable is the single source of truth for what every workload cluster serves.
// It mirrors `kubectl api-resources` of a real v1.36 API server for the served groups.
var resourceTable = []struct {
	gv           schema.GroupVersion
	resource     string
	kind         string
	namespaced   bool
	shortNames   []string
	categories   []string
	subresources []string
}{
	{corev1.SchemeGroupVersion, "configmaps", "ConfigMap", true, []string{"cm"}, nil, nil},
	{corev1.SchemeGroupVersion, "endpoints", "Endpoints", true, []string{"ep"}, nil, nil},
	{corev1.SchemeGroupVersion, "events", "Event", true, []string{"ev"}, nil, nil},
	{corev1.SchemeGroupVersion, "limitranges", "LimitRange", true, []string{"limits"}, nil, nil},
	{corev1.SchemeGroupVersion, "namespaces", "Namespace", false, []string{"ns"}, nil, []string{"status"}},
	{corev1.SchemeGroupVersion, "nodes", "Node", false, []string{"no"}, nil, []string{"status"}},
	{corev1.SchemeGroupVersion, "persistentvolumeclaims", "PersistentVolumeClaim", true, []string{"pvc"}, nil, []string{"status"}},
	{corev1.SchemeGroupVersion, "persistentvolumes", "PersistentVolume", false, []string{"pv"}, nil, []string{"status"}},
	{corev1.SchemeGroupVersion, "pods", "Pod", true, []string{"po"}, []string{"all"}, []string{"eviction", "log", "portforward", "status"}},
	{corev1.SchemeGroupVersion, "podtemplates", "PodTemplate", true, nil, nil, nil},
	{corev1.SchemeGroupVersion, "replicationcontrollers", "ReplicationController", true, []string{"rc"}, []string{"all"}, []string{"scale", "status"}},
	{corev1.SchemeGroupVersion, "resourcequotas", "ResourceQuota", true, []string{"quota"}, nil, []string{"status"}},
	{corev1.SchemeGroupVersion, "secrets", "Secret", true, nil, nil, nil},
	{corev1.SchemeGroupVersion, "serviceaccounts", "ServiceAccount", true, []string{"sa"}, nil, nil},
	{corev1.SchemeGroupVersion, "services", "Service", true, []string{"svc"}, []string{"all"}, []string{"status"}},
	{appsv1.SchemeGroupVersion, "controllerrevisions", "ControllerRevision", true, nil, nil, nil},
	{appsv1.SchemeGroupVersion, "daemonsets", "DaemonSet", true, []string{"ds"}, []string{"all"}, []string{"status"}},
	{appsv1.SchemeGroupVersion, "deployments", "Deployment", true, []string{"deploy"}, []string{"all"}, []string{"scale", "status"}},
	{appsv1.SchemeGroupVersion, "replicasets", "ReplicaSet", true, []string{"rs"}, []string{"all"}, []string{"scale", "status"}},
	{appsv1.SchemeGroupVersion, "statefulsets", "StatefulSet", true, []string{"sts"}, []string{"all"}, []string{"scale", "status"}},
	{batchv1.SchemeGroupVersion, "cronjobs", "CronJob", true, []string{"cj"}, []string{"all"}, []string{"status"}},
	{batchv1.SchemeGroupVersion, "jobs", "Job", true, nil, []string{"all"}, []string{"status"}},
	{rbacv1.SchemeGroupVersion, "clusterrolebindings", "ClusterRoleBinding", false, nil, nil, nil},
	{rbacv1.SchemeGroupVersion, "clusterroles", "ClusterRole", false, nil, nil, nil},
	{rbacv1.SchemeGroupVersion, "rolebindings", "RoleBinding", true, nil, nil, nil},
	{rbacv1.SchemeGroupVersion, "roles", "Role", true, nil, nil, nil},
	{storagev1.SchemeGroupVersion, "csidrivers", "CSIDriver", false, nil, nil, nil},
	{storagev1.SchemeGroupVersion, "csinodes", "CSINode", false, nil, nil, nil},
	{storagev1.SchemeGroupVersion, "csistoragecapacities", "CSIStorageCapacity", true, nil, nil, nil},
	{storagev1.SchemeGroupVersion, "storageclasses", "StorageClass", false, []string{"sc"}, nil, nil},
	{storagev1.SchemeGroupVersion, "volumeattachments", "VolumeAttachment", false, nil, nil, []string{"status"}},
	{storagev1.SchemeGroupVersion, "volumeattributesclasses", "VolumeAttributesClass", false, []string{"vac"}, nil, nil},
	{policyv1.SchemeGroupVersion, "poddisruptionbudgets", "PodDisruptionBudget", true, []string{"pdb"}, nil, []string{"status"}},
	{coordinationv1.SchemeGroupVersion, "leases", "Lease", true, nil, nil, nil},
	{discoveryv1.SchemeGroupVersion, "endpointslices", "EndpointSlice", true, nil, nil, nil},
	{eventsv1.SchemeGroupVersion, "events", "Event", true, []string{"ev"}, nil, nil},
	{apiextensionsv1.SchemeGroupVersion, "customresourcedefinitions", "CustomResourceDefinition", false, []string{"crd", "crds"}, []string{"api-extensions"}, []string{"status"}},
}

type registry struct {
	scheme    *runtime.Scheme
	mapper    meta.RESTMapper
	resources []ResourceInfo
	byGVR     map[schema.GroupVersionResource]*ResourceInfo
	byGVK     map[schema.GroupVersionKind]*ResourceInfo
	behaviors map[schema.GroupVersionResource]*kindBehavior
	byGR      map[schema.GroupResource]*kindBehavior
}

var (
	regOnce sync.Once
	reg     *registry
)

// shared builds the process-wide scheme, mapper and resource table once; every cluster shares
// them so an idle cluster costs only its objects.
func shared() *registry {
	regOnce.Do(func() {
		s := runtime.NewScheme()
		for _, add := range []func(*runtime.Scheme) error{
			corev1.AddToScheme, appsv1.AddToScheme, batchv1.AddToScheme, rbacv1.AddToScheme,
			storagev1.AddToScheme, policyv1.AddToScheme, coordinationv1.AddToScheme,
			discoveryv1.AddToScheme, eventsv1.AddToScheme, apiextensionsv1.AddToScheme,
		} {
			utilruntime.Must(add(s))
		}
		metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
		addDefaults(s)

		r := &registry{
			scheme:    s,
			byGVR:     map[schema.GroupVersionResource]*ResourceInfo{},
			byGVK:     map[schema.GroupVersionKind]*ResourceInfo{},
			behaviors: map[schema.GroupVersionResource]*kindBehavior{},
			byGR:      map[schema.GroupResource]*kindBehavior{},
		}
		var gvs []schema.GroupVersion
		seen := map[schema.GroupVersion]bool{}
		for _, e := range resourceTable {
			if !seen[e.gv] {
				seen[e.gv] = true
				gvs = append(gvs, e.gv)
			}
		}
		m := meta.NewDefaultRESTMapper(gvs)
		for _, e := range resourceTable {
			verbs := allVerbs
			if e.resource == "namespaces" {
				verbs = noCollection
			}
			info := ResourceInfo{
				GVR:          e.gv.WithResource(e.resource),
				Kind:         e.kind,
				ListKind:     e.kind + "List",
				Singular:     strings.ToLower(e.kind),
				Namespaced:   e.namespaced,
				Verbs:        verbs,
				ShortNames:   e.shortNames,
				Categories:   e.categories,
				Subresources: e.subresources,
			}
			r.resources = append(r.resources, info)
			scope := meta.RESTScopeRoot
			if e.namespaced {
				scope = meta.RESTScopeNamespace
			}
			m.AddSpecific(info.GVK(), info.GVR, e.gv.WithResource(info.Singular), scope)
		}
		sort.SliceStable(r.resources, func(i, j int) bool {
			a, b := r.resources[i].GVR, r.resources[j].GVR
			if a.Group != b.Group {
				return a.Group < b.Group
			}
			return a.Resource < b.Resource
		})
		for i := range r.resources {
			info := &r.resources[i]
			r.byGVR[info.GVR] = info
			r.byGVK[info.GVK()] = info
			r.behaviors[info.GVR] = newBehavior(*info, s)
			r.byGR[info.GVR.GroupResource()] = r.behaviors[info.GVR]
		}
		r.mapper = m
		reg = r
	})
	return reg
}

// Scheme returns the scheme shared by all clusters.
func Scheme() *runtime.Scheme { return shared().scheme }

// RESTMapper returns the REST mapper shared by all clusters.
func RESTMapper() meta.RESTMapper { return shared().mapper }

// Resources returns every served resource (a copy, safe to modify).
func Resources() []ResourceInfo {
	out := make([]ResourceInfo, len(shared().resources))
	copy(out, shared().resources)
	return out
}

// LookupResource finds a served resource by group, version and plural resource name.
func LookupResource(group, version, resource string) (ResourceInfo, bool) {
	info, ok := shared().byGVR[schema.GroupVersionResource{Group: group, Version: version, Resource: resource}]
	if !ok {
		return ResourceInfo{}, false
	}
	return *info, true
}
