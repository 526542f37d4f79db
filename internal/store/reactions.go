package store

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// reactLocked is the registry's own reaction to one committed change of an object (old nil:
// created; obj nil: removed), under the cluster's lock: a CustomResourceDefinition's change
// changes what the cluster serves, and the removal of a custom resource may let its CRD's
// deletion finish (customresources.go). Everything else that reacts to changes, the simulated
// control plane, follows the cluster through Inform (package simulate).
func (c *Cluster) reactLocked(gr schema.GroupResource, old, obj client.Object) {
	if obj == nil {
		if gr == crdsGR {
			c.customResourceDefinitionChangedLocked(old, nil)
		} else if _, custom := old.(*unstructured.Unstructured); custom {
			c.customResourceRemovedLocked(gr)
		}
		return
	}
	if gr == crdsGR {
		c.customResourceDefinitionChangedLocked(old, obj)
	}
}
