package store

import (
	"strconv"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

func TestNewClusterHasDefaultNamespaces(t *testing.T) {
	g := NewWithT(t)
	m := NewManager()
	c, err := m.AddCluster("one", ClusterOptions{KubernetesVersion: "v1.36.3"})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = m.AddCluster("one", ClusterOptions{})
	g.Expect(apierrors.IsAlreadyExists(err)).To(BeTrue())
	g.Expect(c.KubernetesVersion()).To(Equal("v1.36.3"))
	c.SetKubernetesVersion("v1.36.4")
	g.Expect(c.KubernetesVersion()).To(Equal("v1.36.4"))

	list, err := c.List(namespacesGVR, "", ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	var names []string
	for _, ns := range list.(*corev1.NamespaceList).Items {
		names = append(names, ns.Name)
		g.Expect(ns.Status.Phase).To(Equal(corev1.NamespaceActive))
		g.Expect(ns.Labels).To(HaveKeyWithValue(corev1.LabelMetadataName, ns.Name))
		g.Expect(ns.Spec.Finalizers).To(ConsistOf(corev1.FinalizerKubernetes))
	}
	g.Expect(names).To(Equal([]string{"default", "kube-node-lease", "kube-public", "kube-system"}))

	got, ok := m.GetCluster("one")
	g.Expect(ok).To(BeTrue())
	g.Expect(got).To(BeIdenticalTo(c))
	g.Expect(m.ClusterNames()).To(Equal([]string{"one"}))
	m.DeleteCluster("one")
	_, ok = m.GetCluster("one")
	g.Expect(ok).To(BeFalse())
}

func TestCreateSetsSystemMetadata(t *testing.T) {
	g := NewWithT(t)
	c := newTestCluster(t)
	a := mustCreate(t, c, configMap("default", "a", map[string]string{"k": "v"}))
	b := mustCreate(t, c, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", GenerateName: "gen-"}})

	g.Expect(a.GetUID()).NotTo(BeEmpty())
	g.Expect(b.GetUID()).NotTo(Equal(a.GetUID()))
	g.Expect(a.GetCreationTimestamp().Time.IsZero()).To(BeFalse())
	rvA, _ := strconv.Atoi(a.GetResourceVersion())
	rvB, _ := strconv.Atoi(b.GetResourceVersion())
	g.Expect(rvB).To(BeNumerically(">", rvA), "resourceVersion is monotonic per cluster")
	g.Expect(b.GetName()).To(MatchRegexp(`^gen-[bcdfghjklmnpqrstvwxz2456789]{5}$`))
	g.Expect(b.GetGenerateName()).To(Equal("gen-"))
	g.Expect(a.GetManagedFields()).To(HaveLen(1))
	g.Expect(a.GetManagedFields()[0].Manager).To(Equal("test"))
	g.Expect(a.GetManagedFields()[0].Operation).To(Equal(metav1.ManagedFieldsOperationUpdate))

	// Client-provided system fields are overwritten.
	in := configMap("default", "c", nil)
	in.UID = "mine"
	in.ResourceVersion = "999"
	in.DeletionTimestamp = &metav1.Time{}
	out := mustCreate(t, c, in)
	g.Expect(out.GetUID()).NotTo(Equal(types.UID("mine")))
	g.Expect(out.GetDeletionTimestamp()).To(BeNil())

	// The caller's object is not aliased by the store.
	in.Data = map[string]string{"x": "y"}
	g.Expect(mustGet(t, c, in).(*corev1.ConfigMap).Data).To(BeEmpty())

	_, err := c.Create(configMapsGVR, "default", configMap("default", "a", nil), CreateOptions{})
	g.Expect(apierrors.IsAlreadyExists(err)).To(BeTrue())
	_, err = c.Create(configMapsGVR, "nope", configMap("nope", "a", nil), CreateOptions{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "namespace must exist")
	_, err = c.Create(configMapsGVR, "default", configMap("other", "a", nil), CreateOptions{})
	g.Expect(apierrors.IsBadRequest(err)).To(BeTrue(), "namespace mismatch")
	_, err = c.Create(configMapsGVR, "default", &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"}}, CreateOptions{})
	g.Expect(apierrors.IsBadRequest(err)).To(BeTrue(), "kind mismatch")
	_, err = c.Create(configMapsGVR, "default", (*corev1.ConfigMap)(nil), CreateOptions{})
	g.Expect(apierrors.IsBadRequest(err)).To(BeTrue(), "nil object")
	_, err = c.Create(schemaGVR{Resource: "widgets", Version: "v1"}, "default", configMap("default", "w", nil), CreateOptions{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "unknown resource")
	_, err = c.Get(configMapsGVR, "default", "missing")
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue())
}

func TestNameValidation(t *testing.T) {
	long := make([]byte, 254)
	for i := range long {
		long[i] = 'a'
	}
	tests := []struct {
		name  string
		obj   client.Object
		valid bool
	}{
		{"subdomain with dots", configMap("default", "a.b-c", nil), true},
		{"uppercase", configMap("default", "Abc", nil), false},
		{"underscore", configMap("default", "a_b", nil), false},
		{"too long subdomain", configMap("default", string(long), nil), false},
		{"empty name", configMap("default", "", nil), false},
		{"namespace is a DNS label", &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "a.b"}}, false},
		{"namespace label ok", &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ab-c"}}, true},
		{"service is a DNS-1035 label", &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "1svc"}}, false},
		{"service ok", &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "svc"}}, true},
		{"rbac allows colons", &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "kubeadm:apiserver-kubelet-client"},
			RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "x"}}, true},
		{"rbac forbids slash", &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "a/b"}}, false},
		{"node subdomain", &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1.example"}}, true},
		{"bad label", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "l", Labels: map[string]string{"a b": "c"}}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			c := newTestCluster(t)
			info, _ := resourceOf(tt.obj)
			_, err := c.Create(info.GVR, tt.obj.GetNamespace(), tt.obj, CreateOptions{})
			if tt.valid {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "got %v", err)
		})
	}
	// The 422 names the field.
	g := NewWithT(t)
	c := newTestCluster(t)
	_, err := c.Create(configMapsGVR, "default", configMap("default", "Bad", nil), CreateOptions{})
	status := err.(apierrors.APIStatus).Status()
	g.Expect(status.Code).To(Equal(int32(422)))
	g.Expect(status.Details.Causes).To(ContainElement(HaveField("Field", "metadata.name")))
}

func TestGenerationRules(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(d *appsv1.Deployment)
		sub    string
		bump   bool
	}{
		{"spec change bumps", func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To[int32](5) }, "", true},
		{"label change does not", func(d *appsv1.Deployment) { d.Labels = map[string]string{"x": "y"} }, "", false},
		{"annotation change does not", func(d *appsv1.Deployment) { d.Annotations = map[string]string{"x": "y"} }, "", false},
		{"status via status subresource does not", func(d *appsv1.Deployment) { d.Status.Replicas = 3 }, "status", false},
		{"spec via status subresource is ignored", func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To[int32](9) }, "status", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			c := newTestCluster(t)
			d := mustCreate(t, c, deployment("default", "d")).(*appsv1.Deployment)
			g.Expect(d.Generation).To(Equal(int64(1)))
			tt.mutate(d)
			out, err := c.Update(deploymentsGVR, "default", d, UpdateOptions{Subresource: tt.sub})
			g.Expect(err).NotTo(HaveOccurred())
			want := int64(1)
			if tt.bump {
				want = 2
			}
			g.Expect(out.(*appsv1.Deployment).Generation).To(Equal(want))
		})
	}
	t.Run("kinds without generation keep zero", func(t *testing.T) {
		g := NewWithT(t)
		c := newTestCluster(t)
		cm := mustCreate(t, c, configMap("default", "cm", nil)).(*corev1.ConfigMap)
		g.Expect(cm.Generation).To(BeZero())
		cm.Data = map[string]string{"a": "b"}
		out, err := c.Update(configMapsGVR, "default", cm, UpdateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(out.(*corev1.ConfigMap).Generation).To(BeZero())
	})
}

func deployment(ns, name string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "img"}}},
			},
		},
	}
}

func TestStatusSubresource(t *testing.T) {
	g := NewWithT(t)
	c := newTestCluster(t)
	d := mustCreate(t, c, deployment("default", "d")).(*appsv1.Deployment)

	// Main resource: status changes are dropped, spec changes kept.
	d.Status.Replicas = 7
	d.Spec.Replicas = ptr.To[int32](3)
	out, err := c.Update(deploymentsGVR, "default", d, UpdateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	d = out.(*appsv1.Deployment)
	g.Expect(d.Status.Replicas).To(BeZero())
	g.Expect(*d.Spec.Replicas).To(Equal(int32(3)))

	// Status subresource: spec and labels are kept, status changes.
	d.Status.Replicas = 7
	d.Spec.Replicas = ptr.To[int32](10)
	d.Labels = map[string]string{"ignored": "yes"}
	out, err = c.Update(deploymentsGVR, "default", d, UpdateOptions{Subresource: "status", FieldManager: "ctrl"})
	g.Expect(err).NotTo(HaveOccurred())
	d = out.(*appsv1.Deployment)
	g.Expect(d.Status.Replicas).To(Equal(int32(7)))
	g.Expect(*d.Spec.Replicas).To(Equal(int32(3)))
	g.Expect(d.Labels).To(BeEmpty())
	g.Expect(d.ManagedFields).To(ContainElement(And(HaveField("Manager", "ctrl"), HaveField("Subresource", "status"))))

	// Kinds without a status subresource refuse it.
	cm := mustCreate(t, c, configMap("default", "cm", nil))
	_, err = c.Update(configMapsGVR, "default", cm, UpdateOptions{Subresource: "status"})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue())
}

func TestOptimisticConcurrency(t *testing.T) {
	g := NewWithT(t)
	c := newTestCluster(t)
	cm := mustCreate(t, c, configMap("default", "cm", nil)).(*corev1.ConfigMap)
	stale := cm.DeepCopy()

	cm.Data = map[string]string{"a": "1"}
	_, err := c.Update(configMapsGVR, "default", cm, UpdateOptions{})
	g.Expect(err).NotTo(HaveOccurred())

	stale.Data = map[string]string{"a": "2"}
	_, err = c.Update(configMapsGVR, "default", stale, UpdateOptions{})
	g.Expect(apierrors.IsConflict(err)).To(BeTrue())
	g.Expect(err.Error()).To(ContainSubstring("the object has been modified"))

	// An empty resourceVersion is an unconditional update.
	stale.ResourceVersion = ""
	out, err := c.Update(configMapsGVR, "default", stale, UpdateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out.(*corev1.ConfigMap).Data).To(HaveKeyWithValue("a", "2"))

	// A no-op update writes nothing.
	before := out.(*corev1.ConfigMap)
	again, err := c.Update(configMapsGVR, "default", before, UpdateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again.(*corev1.ConfigMap).ResourceVersion).To(Equal(before.ResourceVersion))

	// Immutable metadata cannot change.
	before.UID = "other"
	_, err = c.Update(configMapsGVR, "default", before, UpdateOptions{})
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue())

	// Missing object: NotFound, except kinds that create on update.
	_, err = c.Update(configMapsGVR, "default", configMap("default", "missing", nil), UpdateOptions{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue())
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "r"}}
	_, err = c.Update(rbacv1.SchemeGroupVersion.WithResource("roles"), "default", role, UpdateOptions{})
	g.Expect(err).NotTo(HaveOccurred())

	// Delete preconditions.
	_, err = c.Delete(configMapsGVR, "default", "cm", DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: ptr.To("1")}})
	g.Expect(apierrors.IsConflict(err)).To(BeTrue())
	_, err = c.Delete(configMapsGVR, "default", "cm", DeleteOptions{Preconditions: &metav1.Preconditions{UID: ptr.To(types.UID("x"))}})
	g.Expect(apierrors.IsConflict(err)).To(BeTrue())
}

func TestDryRun(t *testing.T) {
	g := NewWithT(t)
	c := newTestCluster(t)
	rv := func() string {
		l, _ := c.List(configMapsGVR, "", ListOptions{})
		return l.(*corev1.ConfigMapList).ResourceVersion
	}
	start := rv()

	out, err := c.Create(configMapsGVR, "default", configMap("default", "dry", nil), CreateOptions{DryRun: true})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out.(*corev1.ConfigMap).UID).NotTo(BeEmpty())
	g.Expect(exists(c, configMap("default", "dry", nil))).To(BeFalse())
	_, err = c.Create(configMapsGVR, "default", configMap("default", "Bad", nil), CreateOptions{DryRun: true})
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "dry run still validates")

	cm := mustCreate(t, c, configMap("default", "real", map[string]string{"a": "1"})).(*corev1.ConfigMap)
	afterCreate := rv()
	g.Expect(afterCreate).NotTo(Equal(start))

	cm.Data["a"] = "2"
	out, err = c.Update(configMapsGVR, "default", cm, UpdateOptions{DryRun: true})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out.(*corev1.ConfigMap).Data["a"]).To(Equal("2"))
	_, err = c.Patch(configMapsGVR, "default", "real", types.MergePatchType, []byte(`{"data":{"a":"3"}}`), PatchOptions{DryRun: true})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = c.Delete(configMapsGVR, "default", "real", DeleteOptions{DryRun: true})
	g.Expect(err).NotTo(HaveOccurred())

	g.Expect(mustGet(t, c, cm).(*corev1.ConfigMap).Data["a"]).To(Equal("1"))
	g.Expect(rv()).To(Equal(afterCreate), "dry runs write nothing")
}

func TestFinalizers(t *testing.T) {
	g := NewWithT(t)
	c := newTestCluster(t)
	in := configMap("default", "f", nil)
	in.Finalizers = []string{"example.com/a", "example.com/b"}
	mustCreate(t, c, in)

	out, err := c.Delete(configMapsGVR, "default", "f", DeleteOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	cm := out.(*corev1.ConfigMap)
	g.Expect(cm.DeletionTimestamp).NotTo(BeNil())
	g.Expect(exists(c, in)).To(BeTrue())

	// Deleting again changes nothing; new finalizers cannot be added.
	_, err = c.Delete(configMapsGVR, "default", "f", DeleteOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	cm.Finalizers = append(cm.Finalizers, "example.com/c")
	_, err = c.Update(configMapsGVR, "default", cm, UpdateOptions{})
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue())

	// The deletionTimestamp cannot be cleared by an update.
	cm = mustGet(t, c, in).(*corev1.ConfigMap)
	cm.DeletionTimestamp = nil
	cm.Finalizers = []string{"example.com/b"}
	out, err = c.Update(configMapsGVR, "default", cm, UpdateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out.(*corev1.ConfigMap).DeletionTimestamp).NotTo(BeNil())

	// Removing the last finalizer removes the object.
	_, err = c.Patch(configMapsGVR, "default", "f", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), PatchOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(exists(c, in)).To(BeFalse())
}

func TestDeleteCollection(t *testing.T) {
	g := NewWithT(t)
	c := newTestCluster(t)
	mustCreate(t, c, pod("default", "a", map[string]string{"x": "1"}))
	mustCreate(t, c, pod("default", "b", map[string]string{"x": "2"}))
	mustCreate(t, c, pod("kube-system", "c", map[string]string{"x": "1"}))
	sel, _ := labelsParse("x=1")
	out, err := c.DeleteCollection(podsGVR, "default", ListOptions{LabelSelector: sel}, DeleteOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out.(*corev1.PodList).Items).To(HaveLen(1))
	g.Expect(exists(c, pod("default", "a", nil))).To(BeFalse())
	g.Expect(exists(c, pod("default", "b", nil))).To(BeTrue())
	g.Expect(exists(c, pod("kube-system", "c", nil))).To(BeTrue())
}

func TestUnstructuredInput(t *testing.T) {
	g := NewWithT(t)
	c := newTestCluster(t)
	u := map[string]interface{}{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]interface{}{"name": "u"}, "data": map[string]interface{}{"k": "v"}}
	out, err := c.Create(configMapsGVR, "default", &unstructuredObj{Object: u}, CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out.(*corev1.ConfigMap).Data).To(HaveKeyWithValue("k", "v"))
	var _ runtime.Object = out
}

func TestCreateResetsStatusLikeTheRegistry(t *testing.T) {
	g := NewWithT(t)
	c := newTestCluster(t)
	d := deployment("default", "d")
	d.Status.Replicas = 3
	g.Expect(mustCreate(t, c, d).(*appsv1.Deployment).Status.Replicas).To(BeZero())

	p := pod("default", "p", nil)
	p.Status.Phase = corev1.PodRunning
	g.Expect(mustCreate(t, c, p).(*corev1.Pod).Status.Phase).To(Equal(corev1.PodPending))

	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	g.Expect(mustCreate(t, c, n).(*corev1.Node).Status.Conditions).To(HaveLen(1), "kubelet registers nodes with status")

	cm := configMap("default", "cm", map[string]string{"a": "b"})
	g.Expect(mustCreate(t, c, cm).(*corev1.ConfigMap).Data).To(HaveLen(1), "kinds without status are untouched")
}

func TestDefaults(t *testing.T) {
	g := NewWithT(t)
	c := newTestCluster(t)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}
	out := mustCreate(t, c, svc).(*corev1.Service)
	g.Expect(out.Spec.Type).To(Equal(corev1.ServiceTypeClusterIP))
	g.Expect(out.Spec.Ports[0].Protocol).To(Equal(corev1.ProtocolTCP))
	g.Expect(out.Spec.Ports[0].TargetPort.IntValue()).To(Equal(80))
	g.Expect(out.Spec.ClusterIP).To(Equal("10.96.0.2"))
	g.Expect(out.Spec.ClusterIPs).To(Equal([]string{"10.96.0.2"}))
	other := mustCreate(t, c, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "other"}}).(*corev1.Service)
	g.Expect(other.Spec.ClusterIP).To(Equal("10.96.0.3"), "addresses are not reused")

	// An update that omits the defaulted and allocated fields changes nothing.
	bare := svc.DeepCopy()
	bare.ResourceVersion = ""
	again, err := c.Update(servicesGR.WithVersion("v1"), "default", bare, UpdateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again.(*corev1.Service).ResourceVersion).To(Equal(out.ResourceVersion))

	d := mustCreate(t, c, deployment("default", "d")).(*appsv1.Deployment)
	g.Expect(d.Spec.Strategy.Type).To(Equal(appsv1.RollingUpdateDeploymentStrategyType))
	g.Expect(*d.Spec.RevisionHistoryLimit).To(Equal(int32(10)))
	g.Expect(d.Spec.Template.Spec.RestartPolicy).To(Equal(corev1.RestartPolicyAlways))
	g.Expect(d.Spec.Template.Spec.Containers[0].ImagePullPolicy).To(Equal(corev1.PullAlways), "untagged image")
	// Resending the undefaulted spec is not a spec change: no generation bump.
	bareD := deployment("default", "d")
	out2, err := c.Update(deploymentsGVR, "default", bareD, UpdateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out2.(*appsv1.Deployment).Generation).To(Equal(int64(1)))

	p := mustCreate(t, c, pod("default", "p", nil)).(*corev1.Pod)
	g.Expect(p.Spec.Containers[0].ImagePullPolicy).To(Equal(corev1.PullIfNotPresent), "tagged image")
	g.Expect(p.Spec.SchedulerName).To(Equal(corev1.DefaultSchedulerName))
}

// A dry-run delete of a namespace answers what the delete would (Terminating, with a
// deletionTimestamp) and changes nothing.
func TestDryRunDeleteOfANamespace(t *testing.T) {
	g := NewWithT(t)
	c := newTestCluster(t)
	nsGVR := corev1.SchemeGroupVersion.WithResource("namespaces")
	mustCreate(t, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}})
	out, err := c.Delete(nsGVR, "", "team", DeleteOptions{DryRun: true})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out.(*corev1.Namespace).Status.Phase).To(Equal(corev1.NamespaceTerminating))
	g.Expect(out.(*corev1.Namespace).DeletionTimestamp).NotTo(BeNil())
	got, err := c.Get(nsGVR, "", "team")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.(*corev1.Namespace).Status.Phase).To(Equal(corev1.NamespaceActive))
	g.Expect(got.(*corev1.Namespace).DeletionTimestamp).To(BeNil())
}
