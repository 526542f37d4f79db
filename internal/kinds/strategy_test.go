package kinds

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/uuid"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/utils/ptr"
)

func ctxIn(ns string) context.Context {
	return genericapirequest.WithNamespace(context.Background(), ns)
}

func strategyOf(t *testing.T, obj runtime.Object) Strategy {
	t.Helper()
	gvks, _, err := Scheme().ObjectKinds(obj)
	if err != nil {
		t.Fatal(err)
	}
	s, ok := ForKind(gvks[0])
	if !ok {
		t.Fatalf("no strategy for %v", gvks[0])
	}
	return s
}

// created runs the create half of obj's strategy as the registry does.
func created(t *testing.T, obj runtime.Object) error {
	t.Helper()
	s := strategyOf(t, obj)
	m := obj.(metav1.Object)
	m.SetUID(uuid.NewUUID())
	m.SetCreationTimestamp(metav1.Now())
	s.Default(obj)
	return rest.BeforeCreate(s, ctxIn(m.GetNamespace()), obj)
}

func updated(t *testing.T, strategy rest.RESTUpdateStrategy, next, cur runtime.Object) error {
	t.Helper()
	// As stored: the registry checks the resourceVersion precondition before the strategy runs.
	cur.(metav1.Object).SetResourceVersion("1")
	next.(metav1.Object).SetResourceVersion("1")
	return rest.BeforeUpdate(strategy, ctxIn(cur.(metav1.Object).GetNamespace()), next, cur)
}

func TestEveryKindIsServableAndPrintable(t *testing.T) {
	g := NewWithT(t)
	g.Expect(All()).To(HaveLen(37), "the resources `kubectl api-resources` lists for the served groups")
	for _, s := range All() {
		info := s.Info()
		obj, err := Scheme().New(info.GVK())
		g.Expect(err).NotTo(HaveOccurred(), "%v", info.GVK())
		g.Expect(s.NamespaceScoped()).To(Equal(info.Namespaced))
		p := s.Printer()
		g.Expect(p.Cells(obj)).To(HaveLen(len(p.Columns)), "%v: one cell per column", info.GVK())
		g.Expect(s.StatusStrategy() != nil).To(Equal(info.HasSubresource("status")), "%v", info.GVK())
		g.Expect(s.Scale() != nil).To(Equal(info.HasSubresource("scale")), "%v", info.GVK())
		if sc := s.Scale(); sc != nil {
			sc.SetReplicas(obj, 7)
			g.Expect(sc.ScaleOf(obj).Spec.Replicas).To(BeEquivalentTo(7), "%v", info.GVK())
		}
		mapping, err := RESTMapper().RESTMapping(info.GVK().GroupKind(), info.GVK().Version)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(mapping.Resource).To(Equal(info.GVR))
	}
}

func TestPodCreateAndGracefulDelete(t *testing.T) {
	g := NewWithT(t)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default"},
		Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "img"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1"}}
	g.Expect(created(t, pod)).To(Succeed())
	g.Expect(pod.Status).To(Equal(corev1.PodStatus{Phase: corev1.PodPending, QOSClass: corev1.PodQOSBestEffort}),
		"status is the kubelet's, not the creator's; the QoS class is the API server's")

	qos := func(c corev1.Container) corev1.PodQOSClass {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "q", Namespace: "default"}, Spec: corev1.PodSpec{Containers: []corev1.Container{c}}}
		g.Expect(created(t, p)).To(Succeed())
		return p.Status.QOSClass
	}
	both := corev1.ResourceList{corev1.ResourceCPU: apiresource.MustParse("1"), corev1.ResourceMemory: apiresource.MustParse("1Gi")}
	g.Expect(qos(corev1.Container{Name: "c", Image: "i", Resources: corev1.ResourceRequirements{Limits: both}})).To(Equal(corev1.PodQOSGuaranteed), "requests default to limits")
	g.Expect(qos(corev1.Container{Name: "c", Image: "i", Resources: corev1.ResourceRequirements{Requests: both}})).To(Equal(corev1.PodQOSBurstable))
	g.Expect(qos(corev1.Container{Name: "c", Image: "i", Resources: corev1.ResourceRequirements{Limits: both,
		Requests: corev1.ResourceList{corev1.ResourceCPU: apiresource.MustParse("500m")}}})).To(Equal(corev1.PodQOSBurstable))
	g.Expect(pod.Generation).To(BeEquivalentTo(1))
	g.Expect(pod.Spec.TerminationGracePeriodSeconds).To(Equal(ptr.To[int64](30)))
	g.Expect(pod.Spec.Containers[0].ImagePullPolicy).To(Equal(corev1.PullAlways), "an untagged image is always pulled")

	s := strategyOf(t, pod)
	// Not on a node: deleted at once.
	opts := &metav1.DeleteOptions{}
	graceful, pending, err := rest.BeforeDelete(s, context.Background(), pod.DeepCopy(), opts)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(graceful).To(BeTrue())
	g.Expect(pending).To(BeFalse())
	g.Expect(*opts.GracePeriodSeconds).To(BeZero())

	// On a node: its terminationGracePeriodSeconds, and a later delete may only shorten it.
	pod.Spec.NodeName = "n"
	deleting := pod.DeepCopy()
	graceful, _, err = rest.BeforeDelete(s, context.Background(), deleting, &metav1.DeleteOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(graceful).To(BeTrue())
	g.Expect(*deleting.DeletionGracePeriodSeconds).To(BeEquivalentTo(30))
	g.Expect(deleting.Generation).To(BeEquivalentTo(2))
	_, pending, _ = rest.BeforeDelete(s, context.Background(), deleting.DeepCopy(), &metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](60)})
	g.Expect(pending).To(BeTrue(), "a longer grace period changes nothing")
	shorter := deleting.DeepCopy()
	graceful, _, _ = rest.BeforeDelete(s, context.Background(), shorter, &metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](5)})
	g.Expect(graceful).To(BeTrue())
	g.Expect(*shorter.DeletionGracePeriodSeconds).To(BeEquivalentTo(5))
	g.Expect(shorter.DeletionTimestamp.Before(deleting.DeletionTimestamp)).To(BeTrue())

	// Preconditions are checked by the same helper.
	_, _, err = rest.BeforeDelete(s, context.Background(), pod.DeepCopy(), &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: ptr.To(uuid.NewUUID())}})
	g.Expect(err).To(MatchError(ContainSubstring("the UID in the precondition")))
}

func TestGenerationFollowsSpecOnly(t *testing.T) {
	g := NewWithT(t)
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "d", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"a": "b"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}}}}}
	g.Expect(created(t, d)).To(Succeed())
	g.Expect(d.Generation).To(BeEquivalentTo(1))
	g.Expect(*d.Spec.Replicas).To(BeEquivalentTo(1), "defaulted")
	s := strategyOf(t, d)

	labelled := d.DeepCopy()
	labelled.Labels = map[string]string{"x": "y"}
	g.Expect(updated(t, s, labelled, d)).To(Succeed())
	g.Expect(labelled.Generation).To(BeEquivalentTo(1), "metadata is not spec")

	scaled := d.DeepCopy()
	scaled.Spec.Replicas = ptr.To[int32](3)
	scaled.Status.Replicas = 9
	g.Expect(updated(t, s, scaled, d)).To(Succeed())
	g.Expect(scaled.Generation).To(BeEquivalentTo(2))
	g.Expect(scaled.Status.Replicas).To(BeZero(), "the main resource keeps the stored status")

	status := d.DeepCopy()
	status.Status.Replicas = 3
	status.Spec.Replicas = ptr.To[int32](5)
	status.Labels = map[string]string{"x": "y"}
	g.Expect(updated(t, s.StatusStrategy(), status, d)).To(Succeed())
	g.Expect(status.Status.Replicas).To(BeEquivalentTo(3))
	g.Expect(*status.Spec.Replicas).To(BeEquivalentTo(1), "/status keeps the stored spec")
	g.Expect(status.Labels).To(BeEmpty(), "and the stored labels")
	g.Expect(status.Generation).To(BeEquivalentTo(1))
}

func TestNamespaceLifecycleFields(t *testing.T) {
	g := NewWithT(t)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}}
	g.Expect(created(t, ns)).To(Succeed())
	g.Expect(ns.Spec.Finalizers).To(Equal([]corev1.FinalizerName{corev1.FinalizerKubernetes}))
	g.Expect(ns.Status.Phase).To(Equal(corev1.NamespaceActive))
	g.Expect(ns.Labels).To(HaveKeyWithValue(corev1.LabelMetadataName, "team-a"))

	next := ns.DeepCopy()
	next.Spec.Finalizers = nil
	g.Expect(updated(t, strategyOf(t, ns), next, ns)).To(Succeed())
	g.Expect(next.Spec.Finalizers).To(Equal(ns.Spec.Finalizers), "spec.finalizers change only through /finalize")

	g.Expect(created(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "a.b"}})).To(MatchError(ContainSubstring("must not contain dots")))
}

func TestConfigMapAndSecretData(t *testing.T) {
	g := NewWithT(t)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "default"}, Immutable: ptr.To(true),
		Data: map[string]string{"k": "v"}}
	g.Expect(created(t, cm)).To(Succeed())
	next := cm.DeepCopy()
	next.Data["k"] = "changed"
	g.Expect(updated(t, strategyOf(t, cm), next, cm)).To(MatchError(And(ContainSubstring("data: Forbidden"), ContainSubstring("field is immutable when `immutable` is set"))))

	bad := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "default"}, Data: map[string]string{"not a key": "v"}}
	g.Expect(created(t, bad)).To(MatchError(ContainSubstring("data[not a key]")))

	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "default"}, StringData: map[string]string{"a": "b"}}
	g.Expect(created(t, sec)).To(Succeed())
	g.Expect(sec.Data).To(HaveKeyWithValue("a", []byte("b")), "stringData is merged into data")
	g.Expect(sec.StringData).To(BeNil())
	g.Expect(sec.Type).To(Equal(corev1.SecretTypeOpaque))
	retyped := sec.DeepCopy()
	retyped.Type = corev1.SecretTypeTLS
	g.Expect(updated(t, strategyOf(t, sec), retyped, sec)).To(MatchError(ContainSubstring("type: Invalid value")))
}

func TestSelectableFields(t *testing.T) {
	g := NewWithT(t)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}, Spec: corev1.PodSpec{NodeName: "n1"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: "10.0.0.2"}}}}
	s := strategyOf(t, pod)
	label, ok := s.FieldLabel("spec.host")
	g.Expect(ok).To(BeTrue())
	g.Expect(label).To(Equal("spec.nodeName"), "old clients' name")
	_, ok = s.FieldLabel("spec.containers")
	g.Expect(ok).To(BeFalse())
	g.Expect(s.SelectableFields(pod)).To(And(HaveKeyWithValue("spec.nodeName", "n1"), HaveKeyWithValue("status.podIP", "10.0.0.2"),
		HaveKeyWithValue("metadata.namespace", "ns")))

	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	_, ok = strategyOf(t, node).FieldLabel("metadata.namespace")
	g.Expect(ok).To(BeFalse(), "cluster-scoped kinds have no namespace field")
}

// TestWorkloadValidation: the workload specs the controllers could not act on sanely are
// refused with upstream's field errors.
func TestWorkloadValidation(t *testing.T) {
	g := NewWithT(t)
	valid := func() *appsv1.Deployment {
		return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "d", Namespace: "default"},
			Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "a"}},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "a"}},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}}}}}
	}
	for name, tc := range map[string]struct {
		mutate func(*appsv1.Deployment)
		want   string
	}{
		"selector not matching": {func(d *appsv1.Deployment) { d.Spec.Template.Labels = map[string]string{"app": "b"} }, "spec.template.metadata.labels: Invalid value: {\"app\":\"b\"}: `selector` does not match template `labels`"},
		"negative replicas":     {func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To[int32](-1) }, "spec.replicas: Invalid value: -1: must be greater than or equal to 0"},
		"no selector":           {func(d *appsv1.Deployment) { d.Spec.Selector = nil }, "spec.selector: Required value"},
		"empty selector":        {func(d *appsv1.Deployment) { d.Spec.Selector = &metav1.LabelSelector{} }, "empty selector is invalid for deployment"},
		"no containers":         {func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers = nil }, "spec.template.spec.containers: Required value"},
		"restartPolicy":         {func(d *appsv1.Deployment) { d.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyNever }, "spec.template.spec.restartPolicy: Unsupported value: \"Never\""},
		"surge and unavailable 0": {func(d *appsv1.Deployment) {
			zero := intstr.FromInt32(0)
			d.Spec.Strategy.RollingUpdate = &appsv1.RollingUpdateDeployment{MaxSurge: &zero, MaxUnavailable: &zero}
		}, "may not be 0 when `maxSurge` is 0"},
	} {
		d := valid()
		tc.mutate(d)
		err := created(t, d)
		g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%s: %v", name, err)
		g.Expect(err.Error()).To(ContainSubstring(tc.want), name)
	}
	d := valid()
	g.Expect(created(t, d)).To(Succeed())
	moved := d.DeepCopy()
	moved.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "a", "x": "y"}}
	moved.Spec.Template.Labels["x"] = "y"
	err := updated(t, strategyOf(t, d), moved, d)
	g.Expect(err).To(MatchError(ContainSubstring("spec.selector: Invalid value")))
	g.Expect(err).To(MatchError(ContainSubstring("field is immutable")))
}
