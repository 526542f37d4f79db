package store

import (
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apiextensions-apiserver/pkg/apihelpers"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

var (
	crdsGVR      = apiextensionsv1.SchemeGroupVersion.WithResource("customresourcedefinitions")
	widgetsGVR   = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
	widgetsBetaG = schema.GroupVersionResource{Group: "example.com", Version: "v1beta1", Resource: "widgets"}
)

// widgetCRD defines a namespaced kind with two served versions (v1 stored), a schema with a
// minimum, a default, a CEL rule and an unknown-fields-pruning object, and a status subresource.
func widgetCRD() *apiextensionsv1.CustomResourceDefinition {
	schemaProps := &apiextensionsv1.JSONSchemaProps{
		Type: "object",
		Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"spec": {
				Type: "object",
				Properties: map[string]apiextensionsv1.JSONSchemaProps{
					"size":  {Type: "integer", Minimum: ptr.To(1.0), Default: &apiextensionsv1.JSON{Raw: []byte("3")}},
					"color": {Type: "string"},
				},
				XValidations: apiextensionsv1.ValidationRules{{Rule: "self.size <= 10", Message: "size must be at most 10"}},
			},
			"status": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{"ready": {Type: "boolean"}}},
		},
	}
	version := func(name string, storage bool) apiextensionsv1.CustomResourceDefinitionVersion {
		return apiextensionsv1.CustomResourceDefinitionVersion{
			Name: name, Served: true, Storage: storage,
			Schema:       &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: schemaProps},
			Subresources: &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}},
			AdditionalPrinterColumns: []apiextensionsv1.CustomResourceColumnDefinition{
				{Name: "Size", Type: "integer", JSONPath: ".spec.size"},
			},
		}
	}
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets.example.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "example.com", Scope: apiextensionsv1.NamespaceScoped,
			Names:    apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList", ShortNames: []string{"wd"}},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{version("v1", true), version("v1beta1", false)},
		},
	}
}

func widget(name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetAPIVersion("example.com/v1")
	u.SetKind("Widget")
	u.SetNamespace("default")
	u.SetName(name)
	return u
}

func createCRD(t *testing.T, c *Cluster) {
	t.Helper()
	if _, err := c.Create(crdsGVR, "", widgetCRD(), CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func getWidget(t *testing.T, c *Cluster, gvr schema.GroupVersionResource, name string) *unstructured.Unstructured {
	t.Helper()
	obj, err := c.Get(gvr, "default", name)
	if err != nil {
		t.Fatal(err)
	}
	return obj.(*unstructured.Unstructured)
}

func TestCustomResourceDefinitionIsEstablishedAndServed(t *testing.T) {
	g := NewWithT(t)
	c := newTestCluster(t)
	_, err := c.Create(widgetsGVR, "default", widget("w", map[string]any{}), CreateOptions{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "not served before its CRD: %v", err)

	createCRD(t, c)
	obj, err := c.Get(crdsGVR, "", "widgets.example.com")
	g.Expect(err).NotTo(HaveOccurred())
	crd := obj.(*apiextensionsv1.CustomResourceDefinition)
	g.Expect(apihelpers.IsCRDConditionTrue(crd, apiextensionsv1.Established)).To(BeTrue())
	g.Expect(apihelpers.IsCRDConditionTrue(crd, apiextensionsv1.NamesAccepted)).To(BeTrue())
	g.Expect(crd.Status.AcceptedNames.Kind).To(Equal("Widget"))
	g.Expect(crd.Status.StoredVersions).To(Equal([]string{"v1"}))

	var served []string
	infos, _ := c.CustomResources()
	for _, ri := range infos {
		served = append(served, ri.GVR.String())
	}
	g.Expect(served).To(Equal([]string{widgetsGVR.String(), widgetsBetaG.String()}))
}

// Pruning, defaulting, generation, status reset on create; schema (minimum) and CEL violations
// are 422 Invalid with upstream's messages.
func TestCustomResourceSchemaSemantics(t *testing.T) {
	g := NewWithT(t)
	c := newTestCluster(t)
	createCRD(t, c)

	in := widget("w", map[string]any{"color": "red", "unknown": "x"})
	in.Object["status"] = map[string]any{"ready": true}
	in.Object["extra"] = "pruned"
	_, err := c.Create(widgetsGVR, "default", in, CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	w := getWidget(t, c, widgetsGVR, "w")
	g.Expect(w.Object["spec"]).To(Equal(map[string]any{"color": "red", "size": int64(3)}), "unknown fields pruned, size defaulted")
	g.Expect(w.Object).NotTo(HaveKey("extra"))
	g.Expect(w.Object).NotTo(HaveKey("status"), "create cannot set status")
	g.Expect(w.GetGeneration()).To(BeEquivalentTo(1))
	g.Expect(w.GetUID()).NotTo(BeEmpty())

	_, err = c.Create(widgetsGVR, "default", widget("small", map[string]any{"size": int64(0)}), CreateOptions{})
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
	g.Expect(err.Error()).To(ContainSubstring("spec.size: Invalid value: 0: spec.size in body should be greater than or equal to 1"))
	_, err = c.Create(widgetsGVR, "default", widget("big", map[string]any{"size": int64(11)}), CreateOptions{})
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
	g.Expect(err.Error()).To(ContainSubstring("size must be at most 10"))

	// Status only through /status; a spec change bumps the generation.
	w.Object["status"] = map[string]any{"ready": true}
	_, err = c.Update(widgetsGVR, "default", w, UpdateOptions{Subresource: "status"})
	g.Expect(err).NotTo(HaveOccurred())
	w = getWidget(t, c, widgetsGVR, "w")
	g.Expect(w.Object["status"]).To(Equal(map[string]any{"ready": true}))
	g.Expect(w.GetGeneration()).To(BeEquivalentTo(1))
	w.Object["status"] = map[string]any{"ready": false}
	g.Expect(unstructured.SetNestedField(w.Object, int64(5), "spec", "size")).To(Succeed())
	_, err = c.Update(widgetsGVR, "default", w, UpdateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	w = getWidget(t, c, widgetsGVR, "w")
	g.Expect(w.Object["status"]).To(Equal(map[string]any{"ready": true}), "the main resource keeps the status")
	g.Expect(w.GetGeneration()).To(BeEquivalentTo(2))

	// Merge patch works; strategic merge patch is 415, as upstream for custom resources.
	res, err := c.Patch(widgetsGVR, "default", "w", types.MergePatchType, []byte(`{"spec":{"color":"blue"}}`), PatchOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.(*unstructured.Unstructured).Object["spec"]).To(HaveKeyWithValue("color", "blue"))
	_, err = c.Patch(widgetsGVR, "default", "w", types.StrategicMergePatchType, []byte(`{"spec":{"color":"green"}}`), PatchOptions{})
	g.Expect(apierrors.IsUnsupportedMediaType(err)).To(BeTrue(), "%v", err)

	// Server-side apply creates, with managed fields.
	applied, err := c.Patch(widgetsGVR, "default", "applied", types.ApplyYAMLPatchType,
		[]byte("apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: applied\nspec:\n  size: 2\n"), PatchOptions{FieldManager: "kubectl"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(applied.(*unstructured.Unstructured).GetManagedFields()).NotTo(BeEmpty())
}

// Every served version reads and writes the one collection; the "None" conversion changes only
// apiVersion.
func TestCustomResourceVersionsShareOneCollection(t *testing.T) {
	g := NewWithT(t)
	c := newTestCluster(t)
	createCRD(t, c)
	_, err := c.Create(widgetsGVR, "default", widget("w", map[string]any{"size": int64(4)}), CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	beta := getWidget(t, c, widgetsBetaG, "w")
	g.Expect(beta.GetAPIVersion()).To(Equal("example.com/v1beta1"))
	g.Expect(beta.Object["spec"]).To(HaveKeyWithValue("size", int64(4)))

	list, err := c.List(widgetsBetaG, "default", ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	ul := list.(*unstructured.UnstructuredList)
	g.Expect(ul.GetKind()).To(Equal("WidgetList"))
	g.Expect(ul.Items).To(HaveLen(1))
	g.Expect(ul.Items[0].GetAPIVersion()).To(Equal("example.com/v1beta1"))

	w, err := c.Watch(widgetsGVR, "default", ListOptions{ResourceVersion: ul.GetResourceVersion()})
	g.Expect(err).NotTo(HaveOccurred())
	defer w.Stop()
	nb := widget("second", map[string]any{})
	nb.SetAPIVersion("example.com/v1beta1")
	_, err = c.Create(widgetsBetaG, "default", nb, CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	ev := nextEvent(t, w)
	g.Expect(ev.Object.(*unstructured.Unstructured).GetAPIVersion()).To(Equal("example.com/v1"))
	g.Expect(ev.Object.(*unstructured.Unstructured).GetName()).To(Equal("second"))
}

// Deleting a CRD deletes its objects; one held by a finalizer keeps the CRD Terminating (new
// objects refused with 405) until it is gone, then the CRD and its resources go.
func TestDeletingACustomResourceDefinitionDeletesItsObjects(t *testing.T) {
	g := NewWithT(t)
	c := newTestCluster(t)
	createCRD(t, c)
	_, err := c.Create(widgetsGVR, "default", widget("plain", map[string]any{}), CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	held := widget("held", map[string]any{})
	held.SetFinalizers([]string{"example.com/hold"})
	_, err = c.Create(widgetsGVR, "default", held, CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())

	_, err = c.Delete(crdsGVR, "", "widgets.example.com", DeleteOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	obj, err := c.Get(crdsGVR, "", "widgets.example.com")
	g.Expect(err).NotTo(HaveOccurred())
	crd := obj.(*apiextensionsv1.CustomResourceDefinition)
	g.Expect(crd.DeletionTimestamp).NotTo(BeNil())
	g.Expect(crd.Finalizers).To(ContainElement(crdCleanupFinalizer))
	g.Expect(apihelpers.IsCRDConditionTrue(crd, apiextensionsv1.Terminating)).To(BeTrue())
	_, err = c.Get(widgetsGVR, "default", "plain")
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue())
	h := getWidget(t, c, widgetsGVR, "held")
	g.Expect(h.GetDeletionTimestamp()).NotTo(BeNil())
	_, err = c.Create(widgetsGVR, "default", widget("new", map[string]any{}), CreateOptions{})
	g.Expect(apierrors.IsMethodNotSupported(err)).To(BeTrue(), "%v", err)

	h.SetFinalizers(nil)
	_, err = c.Update(widgetsGVR, "default", h, UpdateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = c.Get(crdsGVR, "", "widgets.example.com")
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%v", err)
	_, err = c.Get(widgetsGVR, "default", "held")
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the resource is no longer served: %v", err)
	infos, _ := c.CustomResources()
	g.Expect(infos).To(BeEmpty())
}

// A CRD and its objects survive a restart, served again.
func TestCustomResourcesSurviveRestart(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	m, closeDB := durableManager(t, dir)
	c, err := m.AddCluster("ns/c", ClusterOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	createCRD(t, c)
	_, err = c.Create(widgetsGVR, "default", widget("w", map[string]any{"size": int64(7)}), CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	closeDB()

	m, closeDB = durableManager(t, dir)
	defer closeDB()
	c, err = m.AddCluster("ns/c", ClusterOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	w := getWidget(t, c, widgetsGVR, "w")
	g.Expect(w.Object["spec"]).To(HaveKeyWithValue("size", int64(7)))
	g.Expect(w.GetKind()).To(Equal("Widget"))
	_, err = c.Create(widgetsGVR, "default", widget("small", map[string]any{"size": int64(0)}), CreateOptions{})
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "validated after the restart too: %v", err)
}

// Clusters holding an identical CRD share one build of it (schemas, validators, CEL programs);
// the build goes with its last user.
func TestIdenticalCustomResourceDefinitionsShareOneBuild(t *testing.T) {
	g := NewWithT(t)
	crd := widgetCRD()
	crd.Name, crd.Spec.Group = "widgets.shared.example.com", "shared.example.com"
	m := NewManager()
	var clusters []*Cluster
	for _, name := range []string{"ns/a", "ns/b", "ns/c"} {
		c, err := m.AddCluster(name, ClusterOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		_, err = c.Create(crdsGVR, "", crd.DeepCopy(), CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		clusters = append(clusters, c)
	}
	stored, err := clusters[0].Get(crdsGVR, "", crd.Name)
	g.Expect(err).NotTo(HaveOccurred())
	crd = stored.(*apiextensionsv1.CustomResourceDefinition) // as defaulted
	g.Expect(customKindUsers(crd)).To(Equal(3))
	a, _, _ := clusters[0].CustomResource(schema.GroupVersionResource{Group: "shared.example.com", Version: "v1", Resource: "widgets"})
	b, _, _ := clusters[1].CustomResource(schema.GroupVersionResource{Group: "shared.example.com", Version: "v1", Resource: "widgets"})
	g.Expect(a).To(Equal(b))

	_, err = clusters[0].Delete(crdsGVR, "", crd.Name, DeleteOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(customKindUsers(crd)).To(Equal(2))
	m.DeleteCluster("ns/b")
	g.Expect(customKindUsers(crd)).To(Equal(1), "a deleted cluster gives its builds back")
	m.DeleteCluster("ns/c")
	g.Expect(customKindUsers(crd)).To(BeZero())
}

// A CRD converting through a webhook serves its storage version; other versions answer that
// the webhook is not simulated.
func TestWebhookConversionIsAnsweredAsNotSimulated(t *testing.T) {
	g := NewWithT(t)
	c := newTestCluster(t)
	crd := widgetCRD()
	crd.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.WebhookConverter,
		Webhook: &apiextensionsv1.WebhookConversion{ConversionReviewVersions: []string{"v1"},
			ClientConfig: &apiextensionsv1.WebhookClientConfig{URL: ptr.To("https://conversion.example.com")}}}
	_, err := c.Create(crdsGVR, "", crd, CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = c.Create(widgetsGVR, "default", widget("w", map[string]any{}), CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = c.Get(widgetsBetaG, "default", "w")
	g.Expect(apierrors.IsInternalError(err)).To(BeTrue(), "%v", err)
	g.Expect(err.Error()).To(ContainSubstring("conversion webhook for example.com/v1beta1, Kind=Widget is not simulated by Goofy"))
}

// Server-side apply merges a custom resource's lists as its schema declares them: two managers
// own two entries of a list-type map, neither removing the other's.
func TestServerSideApplyUsesTheCRDSchema(t *testing.T) {
	g := NewWithT(t)
	c := newTestCluster(t)
	crd := widgetCRD()
	spec := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	spec.Properties["ports"] = apiextensionsv1.JSONSchemaProps{
		Type: "array", XListType: ptr.To("map"), XListMapKeys: []string{"name"},
		Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &apiextensionsv1.JSONSchemaProps{
			Type: "object", Required: []string{"name"},
			Properties: map[string]apiextensionsv1.JSONSchemaProps{"name": {Type: "string"}, "port": {Type: "integer"}},
		}},
	}
	crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"] = spec
	_, err := c.Create(crdsGVR, "", crd, CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	apply := func(manager, port string) {
		t.Helper()
		_, err := c.Patch(widgetsGVR, "default", "w", types.ApplyYAMLPatchType, []byte(
			"apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\nspec:\n  ports:\n  - {name: "+port+", port: 80}\n"),
			PatchOptions{FieldManager: manager})
		g.Expect(err).NotTo(HaveOccurred())
	}
	apply("a", "http")
	apply("b", "metrics")
	w := getWidget(t, c, widgetsGVR, "w")
	ports, _, _ := unstructured.NestedSlice(w.Object, "spec", "ports")
	g.Expect(ports).To(HaveLen(2), "a list-type map keeps both managers' entries")
	g.Expect(w.GetManagedFields()).To(HaveLen(2))
}

// CRDs are validated by apiextensions-apiserver's rules: a schema that is not structural, or a
// CEL rule that does not compile, is refused with 422.
func TestInvalidCustomResourceDefinitionsAreRefused(t *testing.T) {
	g := NewWithT(t)
	c := newTestCluster(t)
	crd := widgetCRD()
	crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"] = apiextensionsv1.JSONSchemaProps{} // no type
	_, err := c.Create(crdsGVR, "", crd, CreateOptions{})
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
	g.Expect(err.Error()).To(ContainSubstring("spec.validation.openAPIV3Schema.properties[spec].type: Required value: must not be empty for specified object fields"))

	crd = widgetCRD()
	spec := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	spec.XValidations = apiextensionsv1.ValidationRules{{Rule: "self.nosuchfield > 1"}}
	crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"] = spec
	_, err = c.Create(crdsGVR, "", crd, CreateOptions{})
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
	g.Expect(err.Error()).To(ContainSubstring("compilation failed"))
}

// A CRD's selectableFields can be used in field selectors; other fields cannot, as upstream.
func TestCustomResourceSelectableFields(t *testing.T) {
	g := NewWithT(t)
	c := newTestCluster(t)
	crd := widgetCRD()
	for i := range crd.Spec.Versions {
		crd.Spec.Versions[i].SelectableFields = []apiextensionsv1.SelectableField{{JSONPath: ".spec.color"}}
	}
	_, err := c.Create(crdsGVR, "", crd, CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	for name, color := range map[string]string{"r": "red", "b": "blue"} {
		_, err := c.Create(widgetsGVR, "default", widget(name, map[string]any{"color": color}), CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
	}
	sel, err := fields.ParseSelector("spec.color=red")
	g.Expect(err).NotTo(HaveOccurred())
	list, err := c.List(widgetsGVR, "default", ListOptions{FieldSelector: sel})
	g.Expect(err).NotTo(HaveOccurred())
	items := list.(*unstructured.UnstructuredList).Items
	g.Expect(items).To(HaveLen(1))
	g.Expect(items[0].GetName()).To(Equal("r"))

	sel, err = fields.ParseSelector("spec.size=3")
	g.Expect(err).NotTo(HaveOccurred())
	_, err = c.List(widgetsGVR, "default", ListOptions{FieldSelector: sel})
	g.Expect(apierrors.IsBadRequest(err)).To(BeTrue(), "%v", err)
}

// A cluster-scoped CRD serves objects without a namespace; deletecollection removes them.
func TestClusterScopedCustomResources(t *testing.T) {
	g := NewWithT(t)
	c := newTestCluster(t)
	crd := widgetCRD()
	crd.Spec.Scope = apiextensionsv1.ClusterScoped
	_, err := c.Create(crdsGVR, "", crd, CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	for _, name := range []string{"a", "b"} {
		w := widget(name, map[string]any{})
		w.SetNamespace("")
		_, err := c.Create(widgetsGVR, "", w, CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
	}
	obj, err := c.Get(widgetsGVR, "", "a")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(obj.(*unstructured.Unstructured).GetNamespace()).To(BeEmpty())
	_, err = c.DeleteCollection(widgetsGVR, "", ListOptions{}, DeleteOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	list, err := c.List(widgetsGVR, "", ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(list.(*unstructured.UnstructuredList).Items).To(BeEmpty())
}
