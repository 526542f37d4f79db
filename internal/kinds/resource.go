package kinds

import (
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
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
	return slices.Contains(r.Subresources, name)
}

var (
	allVerbs     = []string{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}
	noCollection = []string{"create", "delete", "get", "list", "patch", "update", "watch"}
)

// resource is how a kind's file declares its resource entry, as `kubectl api-resources` of a real
// v1.36 API server lists it.
type resource struct {
	gv           schema.GroupVersion
	name         string // plural resource name
	kind         string
	namespaced   bool
	shortNames   []string
	categories   []string
	subresources []string
}

func (r resource) info() ResourceInfo {
	verbs := allVerbs
	if r.gv.Group == "" && r.name == "namespaces" {
		verbs = noCollection // namespaces have no deletecollection upstream
	}
	return ResourceInfo{
		GVR:          r.gv.WithResource(r.name),
		Kind:         r.kind,
		ListKind:     r.kind + "List",
		Singular:     strings.ToLower(r.kind),
		Namespaced:   r.namespaced,
		Verbs:        verbs,
		ShortNames:   r.shortNames,
		Categories:   r.categories,
		Subresources: r.subresources,
	}
}
