package store

import (
	"net/http"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func TestPatchTypes(t *testing.T) {
	twoContainers := func() *corev1.Pod {
		p := pod("default", "p", map[string]string{"keep": "yes"})
		p.Spec.Containers = []corev1.Container{{Name: "a", Image: "a:1"}, {Name: "b", Image: "b:1"}}
		return p
	}
	tests := []struct {
		name  string
		pt    types.PatchType
		patch string
		check func(g Gomega, p *corev1.Pod)
	}{
		{"json patch", types.JSONPatchType,
			`[{"op":"replace","path":"/spec/containers/1/image","value":"b:2"},{"op":"add","path":"/metadata/labels/new","value":"x"}]`,
			func(g Gomega, p *corev1.Pod) {
				g.Expect(p.Spec.Containers[1].Image).To(Equal("b:2"))
				g.Expect(p.Labels).To(Equal(map[string]string{"keep": "yes", "new": "x"}))
			}},
		{"merge patch replaces lists", types.MergePatchType,
			`{"metadata":{"labels":{"keep":null,"m":"1"}},"spec":{"containers":[{"name":"b","image":"b:3"}]}}`,
			func(g Gomega, p *corev1.Pod) {
				g.Expect(p.Spec.Containers).To(HaveLen(1))
				g.Expect(p.Labels).To(Equal(map[string]string{"m": "1"}))
			}},
		{"strategic merge patch merges lists by key", types.StrategicMergePatchType,
			`{"spec":{"containers":[{"name":"b","image":"b:4"}]}}`,
			func(g Gomega, p *corev1.Pod) {
				g.Expect(p.Spec.Containers).To(HaveLen(2))
				g.Expect(p.Spec.Containers[0].Image).To(Equal("a:1"))
				g.Expect(p.Spec.Containers[1].Image).To(Equal("b:4"))
			}},
		{"strategic merge patch delete directive", types.StrategicMergePatchType,
			`{"spec":{"containers":[{"name":"a","$patch":"delete"}]}}`,
			func(g Gomega, p *corev1.Pod) {
				g.Expect(p.Spec.Containers).To(HaveLen(1))
				g.Expect(p.Spec.Containers[0].Name).To(Equal("b"))
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			c := newTestCluster(t)
			before := mustCreate(t, c, twoContainers())
			out, err := c.Patch(podsGVR, "default", "p", tt.pt, []byte(tt.patch), PatchOptions{FieldManager: "patcher"})
			g.Expect(err).NotTo(HaveOccurred())
			p := out.(*corev1.Pod)
			tt.check(g, p)
			g.Expect(p.ResourceVersion).NotTo(Equal(before.GetResourceVersion()))
			if tt.pt != types.StrategicMergePatchType || p.Spec.Containers[0].Name == "a" {
				// A manager that only deleted fields owns nothing, so only setters are recorded.
				g.Expect(p.ManagedFields).To(ContainElement(And(HaveField("Manager", "patcher"), HaveField("Operation", metav1.ManagedFieldsOperationUpdate))))
			}
		})
	}
}

func TestPatchErrors(t *testing.T) {
	c := newTestCluster(t)
	mustCreate(t, c, pod("default", "p", nil))
	code := func(err error) int32 {
		if err == nil {
			return 0
		}
		return err.(apierrors.APIStatus).Status().Code
	}
	tests := []struct {
		name  string
		pod   string
		pt    types.PatchType
		patch string
		opts  PatchOptions
		code  int32
	}{
		{"missing object", "nope", types.MergePatchType, `{}`, PatchOptions{}, http.StatusNotFound},
		{"malformed json patch", "p", types.JSONPatchType, `{`, PatchOptions{}, http.StatusBadRequest},
		{"json patch test fails", "p", types.JSONPatchType, `[{"op":"test","path":"/metadata/name","value":"x"}]`, PatchOptions{}, http.StatusUnprocessableEntity},
		{"malformed merge patch", "p", types.MergePatchType, `{`, PatchOptions{}, http.StatusBadRequest},
		{"malformed strategic patch", "p", types.StrategicMergePatchType, `[`, PatchOptions{}, http.StatusBadRequest},
		{"stale resourceVersion", "p", types.MergePatchType, `{"metadata":{"resourceVersion":"1"}}`, PatchOptions{}, http.StatusConflict},
		{"rename", "p", types.MergePatchType, `{"metadata":{"name":"q"}}`, PatchOptions{}, http.StatusBadRequest},
		{"unknown field strict", "p", types.MergePatchType, `{"spec":{"bogus":1}}`, PatchOptions{FieldValidation: "Strict"}, http.StatusUnprocessableEntity}, // upstream: Invalid, field "patch"
		{"unknown field warned", "p", types.MergePatchType, `{"spec":{"bogus":2}}`, PatchOptions{FieldValidation: "Warn"}, 0},
		{"unknown field ignored", "p", types.MergePatchType, `{"spec":{"bogus":1}}`, PatchOptions{FieldValidation: "Ignore"}, 0},
		{"unknown patch type", "p", types.PatchType("text/plain"), `x`, PatchOptions{}, http.StatusUnsupportedMediaType},
		{"force on non-apply", "p", types.MergePatchType, `{}`, PatchOptions{Force: true}, http.StatusUnprocessableEntity},
		{"apply without manager", "p", types.ApplyYAMLPatchType, `{"apiVersion":"v1","kind":"Pod"}`, PatchOptions{}, http.StatusUnprocessableEntity},
		{"apply wrong kind", "p", types.ApplyYAMLPatchType, `{"apiVersion":"v1","kind":"Secret"}`, PatchOptions{FieldManager: "m"}, http.StatusBadRequest},
		{"apply bad yaml", "p", types.ApplyYAMLPatchType, "a: [", PatchOptions{FieldManager: "m"}, http.StatusBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.Patch(podsGVR, "default", tt.pod, tt.pt, []byte(tt.patch), tt.opts)
			NewWithT(t).Expect(code(err)).To(Equal(tt.code), "error: %v", err)
		})
	}
}

func TestServerSideApply(t *testing.T) {
	g := NewWithT(t)
	c := newTestCluster(t)
	apply := func(manager string, force bool, body string) (*appsv1.Deployment, error) {
		out, err := c.Patch(deploymentsGVR, "default", "web", types.ApplyYAMLPatchType, []byte(body), PatchOptions{FieldManager: manager, Force: force})
		if err != nil {
			return nil, err
		}
		return out.(*appsv1.Deployment), nil
	}
	const base = `
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels: {team: a}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: main
        image: web:1
`
	// Apply creates.
	d, err := apply("alice", false, base)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(d.Generation).To(Equal(int64(1)))
	g.Expect(d.ManagedFields).To(ContainElement(And(HaveField("Manager", "alice"), HaveField("Operation", metav1.ManagedFieldsOperationApply))))

	// Another manager adds a sidecar: list-map merge by container name keeps alice's container.
	d, err = apply("bob", false, `
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  template:
    spec:
      containers:
      - name: sidecar
        image: side:1
`)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(d.Spec.Template.Spec.Containers).To(HaveLen(2))

	// Bob changing alice's field conflicts with a 409 naming the field and manager.
	_, err = apply("bob", false, `
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 5
`)
	g.Expect(apierrors.IsConflict(err)).To(BeTrue())
	causes := err.(apierrors.APIStatus).Status().Details.Causes
	g.Expect(causes).To(ContainElement(And(HaveField("Field", ".spec.replicas"), HaveField("Message", ContainSubstring(`"alice"`)))))

	// Force takes ownership.
	d, err = apply("bob", true, `
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 5
`)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(*d.Spec.Replicas).To(Equal(int32(5)))
	g.Expect(d.Generation).To(Equal(int64(3)))

	// Alice re-applying without replicas now conflicts no more and leaves bob's value.
	d, err = apply("alice", false, `
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels: {team: a}
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: main
        image: web:1
`)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(*d.Spec.Replicas).To(Equal(int32(5)))

	// An update (non-apply) operation from another manager takes fields without conflicts,
	// and re-applying the identical config is a no-op.
	rv := d.ResourceVersion
	d2, err := apply("alice", false, `
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels: {team: a}
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: main
        image: web:1
`)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(d2.ResourceVersion).To(Equal(rv))

	// Status apply on the status subresource does not touch spec.
	out, err := c.Patch(deploymentsGVR, "default", "web", types.ApplyYAMLPatchType,
		[]byte(`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web"},"status":{"replicas":5}}`),
		PatchOptions{FieldManager: "ctrl", Subresource: "status"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out.(*appsv1.Deployment).Status.Replicas).To(Equal(int32(5)))
	g.Expect(out.(*appsv1.Deployment).ManagedFields).To(ContainElement(And(HaveField("Manager", "ctrl"), HaveField("Subresource", "status"))))

	// Apply with a dry run creates nothing.
	_, err = c.Patch(deploymentsGVR, "default", "dry", types.ApplyYAMLPatchType,
		[]byte(`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"dry"},"spec":{"selector":{"matchLabels":{"app":"dry"}},`+
			`"template":{"metadata":{"labels":{"app":"dry"}},"spec":{"containers":[{"name":"c","image":"img"}]}}}}`), PatchOptions{FieldManager: "m", DryRun: true})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(exists(c, deployment("default", "dry"))).To(BeFalse())
}

func TestServerSideApplyOtherGroups(t *testing.T) {
	c := newTestCluster(t)
	tests := []struct {
		name string
		gvr  schemaGVR
		ns   string
		obj  string
	}{
		{"crd uses the apiextensions schema", customResourceDefinitionsGVR, "", `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  names: {kind: Widget, plural: widgets, singular: widget, listKind: WidgetList}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
`},
		{"lease", leasesGVR, "kube-node-lease", `
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata: {name: node-1, namespace: kube-node-lease}
spec: {holderIdentity: node-1, leaseDurationSeconds: 40}
`},
		{"events.k8s.io event", eventsV1GVR, "default", `
apiVersion: events.k8s.io/v1
kind: Event
metadata: {name: e1}
eventTime: "2026-01-01T00:00:00.000000Z"
reason: Started
action: Start
reportingController: test
reportingInstance: test-1
regarding: {kind: Pod, name: p, namespace: default}
`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			var name string
			for _, f := range []string{"widgets.example.com", "node-1", "e1"} {
				if containsString(tt.obj, f) {
					name = f
					break
				}
			}
			out, err := c.Patch(tt.gvr, tt.ns, name, types.ApplyYAMLPatchType, []byte(tt.obj), PatchOptions{FieldManager: "a"})
			g.Expect(err).NotTo(HaveOccurred())
			mf := out.(metav1.Object).GetManagedFields()
			g.Expect(mf).To(ContainElement(HaveField("Operation", metav1.ManagedFieldsOperationApply)))
			// A second manager taking a field owned by the first conflicts.
			_, err = c.Patch(tt.gvr, tt.ns, name, types.ApplyYAMLPatchType, []byte(tt.obj), PatchOptions{FieldManager: "b"})
			g.Expect(err).NotTo(HaveOccurred(), "applying the same values is shared ownership, not a conflict")
		})
	}
}

// One patch path: PatchObject reports fieldValidation=Warn findings (the patch's duplicate fields
// and the result's unknown ones) and whether apply created the object.
func TestPatchObjectWarningsAndCreated(t *testing.T) {
	g := NewWithT(t)
	c := newTestCluster(t)
	mustCreate(t, c, pod("default", "p", nil))
	podsGVR := corev1.SchemeGroupVersion.WithResource("pods")

	res, err := c.PatchObject(podsGVR, "default", "p", types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"a":"1","a":"2"}},"spec":{"bogus":1}}`), PatchOptions{FieldValidation: "Warn"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Created).To(BeFalse())
	g.Expect(res.Warnings).To(ConsistOf(ContainSubstring(`duplicate field "metadata.labels.a"`), ContainSubstring(`unknown field "spec.bogus"`)))
	g.Expect(res.Object.(*corev1.Pod).Labels).To(HaveKeyWithValue("a", "2"))

	_, err = c.PatchObject(podsGVR, "default", "p", types.JSONPatchType,
		[]byte(`[{"op":"add","path":"/spec/bogus","value":1,"op":"add"}]`), PatchOptions{FieldValidation: "Strict"})
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
	g.Expect(err.Error()).To(And(ContainSubstring(`json patch duplicate field "[0].op"`), ContainSubstring(`unknown field "spec.bogus"`)))

	cm := `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"applied"},"data":{"k":"v"}}`
	cmGVR := corev1.SchemeGroupVersion.WithResource("configmaps")
	res, err = c.PatchObject(cmGVR, "default", "applied", types.ApplyYAMLPatchType, []byte(cm), PatchOptions{FieldManager: "m"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Created).To(BeTrue())
	res, err = c.PatchObject(cmGVR, "default", "applied", types.ApplyYAMLPatchType, []byte(cm), PatchOptions{FieldManager: "m"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Created).To(BeFalse())
}
