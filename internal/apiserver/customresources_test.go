package apiserver

import (
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

// widgetCRDYAML: a namespaced kind with a stored v1 and a served v1beta1, a minimum, a default,
// a CEL rule, a status subresource and a printer column.
const widgetCRDYAML = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, listKind: WidgetList, shortNames: [wd]}
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
      scale: {specReplicasPath: .spec.size, statusReplicasPath: .status.replicas}
    additionalPrinterColumns:
    - {name: Size, type: integer, jsonPath: .spec.size}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            x-kubernetes-validations:
            - {rule: "self.size <= 10", message: "size must be at most 10"}
            properties:
              size: {type: integer, minimum: 1, default: 3}
              color: {type: string}
          status:
            type: object
            properties:
              ready: {type: boolean}
              replicas: {type: integer}
  - name: v1beta1
    served: true
    storage: false
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
`

// The real kubectl applies a CRD, waits for it to be Established, finds the kind through
// discovery, applies, lists (with the CRD's columns), patches and deletes its objects; schema
// and CEL violations and unknown fields are refused as upstream; deleting the CRD removes the
// objects and the resource.
func TestKubectlCustomResources(t *testing.T) {
	g := NewWithT(t)
	env := newTestEnv(t, Options{})
	k := newKubectl(t, env)

	k.run(widgetCRDYAML, "apply", "-f", "-")
	k.run("", "wait", "--for=condition=Established", "crd/widgets.example.com", "--timeout=10s")
	out, _ := k.run("", "api-resources", "--api-group=example.com")
	g.Expect(out).To(MatchRegexp(`widgets\s+wd\s+example.com/v1\s+true\s+Widget`))

	k.run("apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w1}\nspec: {color: red}\n", "apply", "-f", "-")
	out, _ = k.run("", "get", "widgets")
	g.Expect(out).To(MatchRegexp(`^NAME\s+SIZE\n`), "Name and the CRD's columns, no Age: as upstream")
	g.Expect(out).To(MatchRegexp(`w1\s+3\s+`), "defaulted size in the printer column")
	out, _ = k.run("", "get", "wd", "w1", "-o", "jsonpath={.spec.size}/{.metadata.generation}")
	g.Expect(out).To(Equal("3/1"))

	_, stderr := k.runExpecting(false, "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w0}\nspec: {size: 0}\n", "apply", "-f", "-")
	g.Expect(stderr).To(ContainSubstring("spec.size: Invalid value: 0: spec.size in body should be greater than or equal to 1"))
	_, stderr = k.runExpecting(false, "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w11}\nspec: {size: 11}\n", "apply", "-f", "-")
	g.Expect(stderr).To(ContainSubstring("size must be at most 10"))
	_, stderr = k.runExpecting(false, "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: wx}\nspec: {shape: round}\n", "create", "-f", "-")
	g.Expect(stderr).To(ContainSubstring(`unknown field "spec.shape"`))

	k.run("", "patch", "widget", "w1", "--type=merge", "-p", `{"spec":{"size":5}}`)
	out, _ = k.run("", "get", "widgets.v1beta1.example.com", "w1", "-o", "jsonpath={.apiVersion} {.spec.size} {.metadata.generation}")
	g.Expect(out).To(Equal("example.com/v1beta1 5 2"))

	// client-go's dynamic client: the status subresource and a watch.
	dyn, err := dynamic.NewForConfig(env.protobufConfig())
	g.Expect(err).NotTo(HaveOccurred())
	widgets := dyn.Resource(schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}).Namespace("default")
	w, err := widgets.Get(ctx(t), "w1", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(unstructured.SetNestedField(w.Object, true, "status", "ready")).To(Succeed())
	_, err = widgets.UpdateStatus(ctx(t), w, metav1.UpdateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	out, _ = k.run("", "get", "widget", "w1", "-o", "jsonpath={.status.ready}")
	g.Expect(out).To(Equal("true"))

	// kubectl scale through the CRD's scale subresource (spec.size is its replicas path).
	k.run("", "scale", "widget", "w1", "--replicas=4")
	out, _ = k.run("", "get", "widget", "w1", "-o", "jsonpath={.spec.size}")
	g.Expect(out).To(Equal("4"))
	out, _ = k.run("", "get", "--raw", "/apis/example.com/v1/namespaces/default/widgets/w1/scale")
	g.Expect(out).To(ContainSubstring(`"kind":"Scale"`))
	g.Expect(out).To(ContainSubstring(`"spec":{"replicas":4}`))
	_, stderr = k.runExpecting(false, "", "scale", "widget", "w1", "--replicas=11")
	g.Expect(stderr).To(ContainSubstring("size must be at most 10"), "the scaled object is validated by the CRD's rules")

	// kubectl explain reads the CRD's schema from OpenAPI v3; server-side apply tracks fields.
	out, _ = k.run("", "explain", "widgets.spec.size")
	g.Expect(out).To(ContainSubstring("KIND:       Widget"))
	g.Expect(out).To(ContainSubstring("FIELD: size <integer>"))
	k.run("apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: ssa}\nspec: {color: green}\n", "apply", "--server-side", "-f", "-")
	out, _ = k.run("", "get", "widget", "ssa", "-o", "jsonpath={.metadata.managedFields[0].manager}/{.metadata.managedFields[0].operation}")
	g.Expect(out).To(Equal("kubectl/Apply"))
	code, _, body := env.do(t, "GET", "/openapi/v2", "", "application/json", "")
	g.Expect(code).To(Equal(200))
	g.Expect(body).To(ContainSubstring(`"com.example.v1.Widget"`), "v2 merges the CRD's definitions")
	g.Expect(body).To(ContainSubstring(`"io.k8s.api.core.v1.Pod"`), "and keeps the built-in ones")

	k.run("", "delete", "crd", "widgets.example.com")
	_, stderr = k.runFailing("get", "widgets")
	g.Expect(stderr).To(ContainSubstring("the server could not find the requested resource"))
	out, _ = k.run("", "api-resources", "--api-group=example.com")
	g.Expect(out).NotTo(ContainSubstring("widgets"), "gone from discovery")
}
