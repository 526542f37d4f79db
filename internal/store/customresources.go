package store

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"k8s.io/apiextensions-apiserver/pkg/apihelpers"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/kinds"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/storage"
)

// Custom resources: every CustomResourceDefinition stored in a workload cluster serves its kind in
// that cluster, as kube-apiserver's apiextensions-apiserver does. Each served version is a
// strategy built from the CRD (kinds.CustomResources); the storage version holds the objects
// (as *unstructured.Unstructured, JSON on disk) and the other versions are views of it whose
// conversion is the "None" strategy: only apiVersion changes.

// crdCleanupFinalizer holds a deleted CRD until its objects are gone, as upstream.
const crdCleanupFinalizer = "customresourcecleanup.apiextensions.k8s.io"

var crdsGR = apiextensionsv1.SchemeGroupVersion.WithResource("customresourcedefinitions").GroupResource()

// customKinds is a cluster's set of CRD-defined resources. It is replaced, never modified, so
// requests read it without the cluster's lock.
type customKinds struct {
	generation uint64                                          // counts the replacements, so callers can cache what they derive
	byGVR      map[schema.GroupVersionResource]*servedResource // served versions
	byGR       map[schema.GroupResource]*servedResource        // the storage version, served or not
	byGVK      map[schema.GroupVersionKind]*servedResource
	byCRD      map[string]customKind
}

// customKind is what one CRD defines.
type customKind struct {
	key     specKey // of the CRD spec the resources were built from (customkindcache.go)
	storage *servedResource
	served  []*servedResource
}

// lookup resolves a served resource, built-in or defined by a CRD, or answers 404 like the API
// server does for unknown paths.
func (c *Cluster) lookup(gvr schema.GroupVersionResource) (*servedResource, error) {
	if b, ok := behaviorFor(gvr); ok {
		return b, nil
	}
	if ck := c.custom.Load(); ck != nil {
		if b, ok := ck.byGVR[gvr]; ok {
			return b, nil
		}
	}
	return nil, apierrors.NewNotFound(gvr.GroupResource(), "")
}

// resourceForGR resolves the resource that stores gr's objects.
func (c *Cluster) resourceForGR(gr schema.GroupResource) (*servedResource, bool) {
	if b, ok := behaviorForGR(gr); ok {
		return b, true
	}
	if ck := c.custom.Load(); ck != nil {
		b, ok := ck.byGR[gr]
		return b, ok
	}
	return nil, false
}

// resourceForKind resolves the resource of a kind (for owner references).
func (c *Cluster) resourceForKind(gvk schema.GroupVersionKind) (*servedResource, bool) {
	if info, ok := shared().byGVK[gvk]; ok {
		return behaviorFor(info.GVR)
	}
	if ck := c.custom.Load(); ck != nil {
		b, ok := ck.byGVK[gvk]
		return b, ok
	}
	return nil, false
}

// CustomResources returns the resources CRDs define in this cluster (served versions, by group,
// then resource, then version from the most preferred, as discovery lists them), and a
// generation that changes whenever they do.
func (c *Cluster) CustomResources() ([]ResourceInfo, uint64) {
	ck := c.custom.Load()
	if ck == nil {
		return nil, 0
	}
	out := make([]ResourceInfo, 0, len(ck.byGVR))
	for _, b := range ck.byGVR {
		out = append(out, b.info)
	}
	slices.SortFunc(out, func(a, b ResourceInfo) int {
		if a.GVR.Group != b.GVR.Group {
			return cmp.Compare(a.GVR.Group, b.GVR.Group)
		}
		if a.GVR.Resource != b.GVR.Resource {
			return cmp.Compare(a.GVR.Resource, b.GVR.Resource)
		}
		return -version.CompareKubeAwareVersionStrings(a.GVR.Version, b.GVR.Version)
	})
	return out, ck.generation
}

// CustomResourcesGeneration changes whenever the resources CRDs define do.
func (c *Cluster) CustomResourcesGeneration() uint64 {
	if ck := c.custom.Load(); ck != nil {
		return ck.generation
	}
	return 0
}

// CustomResource resolves a resource a CRD defines in this cluster, with its strategy.
func (c *Cluster) CustomResource(gvr schema.GroupVersionResource) (ResourceInfo, kinds.Strategy, bool) {
	if ck := c.custom.Load(); ck != nil {
		if b, ok := ck.byGVR[gvr]; ok {
			return b.info, b.strategy, true
		}
	}
	return ResourceInfo{}, nil, false
}

// buildCustomKind builds the resources crd defines: one servedResource per version, the storage
// version storing the objects and the others its views.
func buildCustomKind(crd *apiextensionsv1.CustomResourceDefinition) (customKind, error) {
	strategies, err := kinds.CustomResources(crd)
	if err != nil {
		return customKind{}, err
	}
	storageVersion, err := apihelpers.GetCRDStorageVersion(crd)
	if err != nil {
		return customKind{}, err
	}
	var ck customKind
	converter := sync.OnceValues(func() (managedfields.TypeConverter, error) { return kinds.CustomResourceTypeConverter(crd) })
	for _, s := range strategies {
		b := &servedResource{info: s.Info(), strategy: s, status: s.StatusStrategy(), custom: true, typeConverter: converter}
		if b.info.GVR.Version == storageVersion {
			ck.storage = b
		}
		if apihelpers.HasServedCRDVersion(crd, b.info.GVR.Version) {
			ck.served = append(ck.served, b)
		}
	}
	if ck.storage == nil {
		return customKind{}, fmt.Errorf("no storage version")
	}
	webhook := crd.Spec.Conversion != nil && crd.Spec.Conversion.Strategy == apiextensionsv1.WebhookConverter
	for _, b := range ck.served {
		if b != ck.storage {
			b.storedAs = ck.storage
			b.webhookConversion = webhook
		}
	}
	return ck, nil
}

// customResourceDefinitionChangedLocked keeps the cluster's custom resources in step with a
// committed change of a CRD (obj nil: removed), and records in the CRD's status that its names
// are accepted and its resources served, as the apiextensions-apiserver's naming and
// establishing controllers do. Callers hold c.mu.
func (c *Cluster) customResourceDefinitionChangedLocked(old, obj client.Object) {
	if obj == nil {
		c.setCustomKind(old.GetName(), nil)
		return
	}
	crd := obj.(*apiextensionsv1.CustomResourceDefinition)
	key, err := customKindKey(crd)
	if cur := c.custom.Load(); err != nil || cur == nil || cur.byCRD[crd.Name].key != key {
		c.serveCustomResourceDefinition(crd)
	}
	if crd.DeletionTimestamp != nil {
		c.cleanUpCustomResourcesLocked(crd)
		return
	}
	if next := establishedCRD(crd); next != nil {
		c.storeLocked(crdsGR, next, crd)
	}
}

// serveCustomResourceDefinition serves the resources crd defines, from the process-wide cache
// of builds; a CRD that cannot be served (its schema is not structural) serves nothing.
func (c *Cluster) serveCustomResourceDefinition(crd *apiextensionsv1.CustomResourceDefinition) {
	ck, err := acquireCustomKind(crd)
	if err != nil {
		klog.ErrorS(err, "Cannot serve the resources of a CustomResourceDefinition", "cluster", c.name, "crd", crd.Name)
		c.setCustomKind(crd.Name, nil)
		return
	}
	c.setCustomKind(crd.Name, &ck)
}

// setCustomKind replaces (ck nil: removes) what one CRD defines, releasing the build it
// replaces. Callers hold c.mu (or own the cluster, as while it loads or closes).
func (c *Cluster) setCustomKind(name string, ck *customKind) {
	cur := c.custom.Load()
	byCRD := map[string]customKind{}
	if cur != nil {
		maps.Copy(byCRD, cur.byCRD)
	}
	if prev, ok := byCRD[name]; ok {
		releaseCustomKind(prev.key)
	} else if ck == nil {
		return
	}
	if ck == nil {
		delete(byCRD, name)
	} else {
		byCRD[name] = *ck
	}
	var gen uint64 = 1
	if cur != nil {
		gen = cur.generation + 1
	}
	next := &customKinds{
		generation: gen,
		byGVR:      map[schema.GroupVersionResource]*servedResource{},
		byGR:       map[schema.GroupResource]*servedResource{},
		byGVK:      map[schema.GroupVersionKind]*servedResource{},
		byCRD:      byCRD,
	}
	for _, k := range byCRD {
		next.byGR[k.storage.info.GVR.GroupResource()] = k.storage
		for _, b := range k.served {
			next.byGVR[b.info.GVR] = b
			next.byGVK[b.info.GVK()] = b
		}
	}
	c.custom.Store(next)
}

// establishedCRD returns crd with the status the apiextensions-apiserver's controllers give an
// accepted CRD, or nil when it has it already.
func establishedCRD(crd *apiextensionsv1.CustomResourceDefinition) *apiextensionsv1.CustomResourceDefinition {
	next := crd.DeepCopy()
	next.Status.AcceptedNames = crd.Spec.Names
	if next.Status.AcceptedNames.Singular == "" {
		next.Status.AcceptedNames.Singular = strings.ToLower(crd.Spec.Names.Kind)
	}
	if next.Status.AcceptedNames.ListKind == "" {
		next.Status.AcceptedNames.ListKind = crd.Spec.Names.Kind + "List"
	}
	apihelpers.SetCRDCondition(next, apiextensionsv1.CustomResourceDefinitionCondition{
		Type: apiextensionsv1.NamesAccepted, Status: apiextensionsv1.ConditionTrue,
		Reason: "NoConflicts", Message: "no conflicts found",
	})
	apihelpers.SetCRDCondition(next, apiextensionsv1.CustomResourceDefinitionCondition{
		Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionTrue,
		Reason: "InitialNamesAccepted", Message: "the initial names have been accepted",
	})
	if storageVersion, err := apihelpers.GetCRDStorageVersion(next); err == nil && !slices.Contains(next.Status.StoredVersions, storageVersion) {
		next.Status.StoredVersions = append(next.Status.StoredVersions, storageVersion)
	}
	if equalCRDStatus(crd, next) {
		return nil
	}
	return next
}

// equalCRDStatus compares statuses ignoring the conditions' transition times (SetCRDCondition
// keeps them for unchanged conditions).
func equalCRDStatus(a, b *apiextensionsv1.CustomResourceDefinition) bool {
	return equality.Semantic.DeepEqual(a.Status, b.Status)
}

// deleteCustomResourceDefinitionLocked starts the deletion of a CRD as upstream's CRD registry
// does: it is marked Terminating and held by the cleanup finalizer until its objects are gone.
// Callers hold c.mu.
func (c *Cluster) deleteCustomResourceDefinitionLocked(cur client.Object) client.Object {
	next := markDeleting(cur).(*apiextensionsv1.CustomResourceDefinition)
	if !slices.Contains(next.Finalizers, crdCleanupFinalizer) {
		next.Finalizers = append(next.Finalizers, crdCleanupFinalizer)
	}
	apihelpers.SetCRDCondition(next, apiextensionsv1.CustomResourceDefinitionCondition{
		Type: apiextensionsv1.Terminating, Status: apiextensionsv1.ConditionTrue,
		Reason: "InstanceDeletionInProgress", Message: "CustomResource deletion is in progress",
	})
	c.storeLocked(crdsGR, next, cur) // the reaction deletes the objects
	if out := c.getLocked(crdsGR, next.Name); out != nil {
		return out
	}
	return next
}

// cleanUpCustomResourcesLocked deletes the objects of a CRD being deleted and, once none is
// left, drops the cleanup finalizer, as the apiextensions-apiserver's finalizer controller does.
// Objects held by finalizers of their own keep the CRD until they are gone. Callers hold c.mu.
func (c *Cluster) cleanUpCustomResourcesLocked(crd *apiextensionsv1.CustomResourceDefinition) {
	if !slices.Contains(crd.Finalizers, crdCleanupFinalizer) {
		return
	}
	gr := schema.GroupResource{Group: crd.Spec.Group, Resource: crd.Spec.Names.Plural}
	if b, ok := c.resourceForGR(gr); ok {
		for _, key := range storage.Keys(c.objs.Resource(gr), "") {
			if obj := c.getLocked(gr, key); obj != nil && obj.GetDeletionTimestamp() == nil {
				c.controllerDeleteLocked(b, obj, metav1.DeletePropagationBackground, nil)
			}
		}
	}
	c.finishCustomResourceDefinitionLocked(crd.Name, gr)
}

// finishCustomResourceDefinitionLocked drops the cleanup finalizer of a CRD being deleted once
// none of its objects is left (finalizers of their own may hold some; the removal of the last
// one calls this again).
func (c *Cluster) finishCustomResourceDefinitionLocked(name string, gr schema.GroupResource) {
	if len(c.objs.Resource(gr)) > 0 {
		return
	}
	cur, ok := c.getLocked(crdsGR, name).(*apiextensionsv1.CustomResourceDefinition)
	if !ok || cur.DeletionTimestamp == nil || !slices.Contains(cur.Finalizers, crdCleanupFinalizer) {
		return // already finished (by the removal of its last object)
	}
	next := cur.DeepCopy()
	next.Finalizers = slices.DeleteFunc(next.Finalizers, func(f string) bool { return f == crdCleanupFinalizer })
	if len(next.Finalizers) == 0 {
		c.eraseLocked(crdsGR, cur, next)
		return
	}
	c.storeLocked(crdsGR, next, cur)
}

// customResourceRemovedLocked continues the deletion of the CRD of a removed custom resource.
// Callers hold c.mu.
func (c *Cluster) customResourceRemovedLocked(gr schema.GroupResource) {
	c.finishCustomResourceDefinitionLocked(gr.Resource+"."+gr.Group, gr)
}

// loadCustomKindsLocked serves the CRDs loaded from disk. Callers hold c.mu.
func (c *Cluster) loadCustomKindsLocked() {
	for _, v := range c.objs.Resource(crdsGR) {
		c.serveCustomResourceDefinition(v.Object().(*apiextensionsv1.CustomResourceDefinition))
	}
}

// newUnstructured returns an empty custom resource of the kind.
func newUnstructured(gvk schema.GroupVersionKind) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{}}
	u.SetGroupVersionKind(gvk)
	return u
}

// unstructuredConvertor converts custom resources between the versions of their CRD with the
// "None" strategy (only apiVersion changes), for the field manager.
type unstructuredConvertor struct{}

func (unstructuredConvertor) Convert(in, out, _ any) error {
	u, ok := in.(*unstructured.Unstructured)
	o, ok2 := out.(*unstructured.Unstructured)
	if !ok || !ok2 {
		return fmt.Errorf("cannot convert %T to %T", in, out)
	}
	o.Object = runtime.DeepCopyJSON(u.Object)
	return nil
}

func (unstructuredConvertor) ConvertToVersion(in runtime.Object, gv runtime.GroupVersioner) (runtime.Object, error) {
	u, ok := in.(*unstructured.Unstructured)
	if !ok {
		return nil, fmt.Errorf("cannot convert %T", in)
	}
	gvk, ok := gv.KindForGroupVersionKinds([]schema.GroupVersionKind{u.GroupVersionKind()})
	if !ok {
		return nil, fmt.Errorf("no version of %v in %v", u.GroupVersionKind(), gv)
	}
	out := u.DeepCopy()
	out.SetGroupVersionKind(gvk)
	return out, nil
}

func (unstructuredConvertor) ConvertFieldLabel(_ schema.GroupVersionKind, label, value string) (string, string, error) {
	return label, value, nil
}

type unstructuredCreater struct{}

func (unstructuredCreater) New(gvk schema.GroupVersionKind) (runtime.Object, error) {
	return newUnstructured(gvk), nil
}

type noDefaults struct{}

func (noDefaults) Default(runtime.Object) {}

// refuseCreateWhileTerminatingLocked answers a create of a custom resource whose CRD is being
// deleted as kube-apiserver does: 405 Method Not Allowed. Callers hold c.mu.
func (c *Cluster) refuseCreateWhileTerminatingLocked(b *servedResource) error {
	gr := b.info.GVR.GroupResource()
	crd, ok := c.getLocked(crdsGR, gr.Resource+"."+gr.Group).(*apiextensionsv1.CustomResourceDefinition)
	if ok && crd.DeletionTimestamp != nil {
		return apierrors.NewMethodNotSupported(gr, "create")
	}
	return nil
}

// releaseCustomKindsLocked gives back the builds a closing cluster holds. Callers hold c.mu.
func (c *Cluster) releaseCustomKindsLocked() {
	if cur := c.custom.Load(); cur != nil {
		for name := range cur.byCRD {
			c.setCustomKind(name, nil)
		}
	}
}
