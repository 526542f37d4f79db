package store

import (
	"cmp"
	"slices"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// What the registry tells simulated components (package simulate) about the resources it
// serves, as discovery and the REST mapper tell kube-controller-manager's controllers.

// ResourceFor returns the resource whose objects a Change of gr carries (the version the store
// keeps them in), built in or defined by a CRD of this cluster.
func (c *Cluster) ResourceFor(gr schema.GroupResource) (ResourceInfo, bool) {
	b, ok := c.resourceForGR(gr)
	if !ok {
		return ResourceInfo{}, false
	}
	return b.info, true
}

// ResourceForKind resolves a kind (an owner reference's) to the resource that stores its
// objects; false for a kind this cluster does not serve.
func (c *Cluster) ResourceForKind(gvk schema.GroupVersionKind) (ResourceInfo, bool) {
	b, ok := c.resourceForKind(gvk)
	if !ok {
		return ResourceInfo{}, false
	}
	if b.storedAs != nil {
		b = b.storedAs
	}
	return b.info, true
}

// NamespacedResources returns every namespaced resource that stores objects in this cluster,
// built in and defined by CRDs (each once, in the version the store keeps it; views of another
// resource's objects left out): what the namespace controller empties a namespace of.
func (c *Cluster) NamespacedResources() []ResourceInfo {
	var out []ResourceInfo
	for _, b := range shared().byGR {
		if b.info.Namespaced && b.storedAs == nil {
			out = append(out, b.info)
		}
	}
	if ck := c.custom.Load(); ck != nil {
		for _, b := range ck.byGR {
			if b.info.Namespaced {
				out = append(out, b.info)
			}
		}
	}
	slices.SortFunc(out, func(a, b ResourceInfo) int {
		return cmp.Or(cmp.Compare(a.GVR.Group, b.GVR.Group), cmp.Compare(a.GVR.Resource, b.GVR.Resource))
	})
	return out
}
