package store

import (
	"fmt"
	"strconv"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
)

func podNames(l *corev1.PodList) []string {
	var out []string
	for _, p := range l.Items {
		out = append(out, p.Namespace+"/"+p.Name)
	}
	return out
}

func TestListSelectors(t *testing.T) {
	c := newTestCluster(t)
	a := pod("default", "a", map[string]string{"app": "web", "tier": "fe"})
	a.Spec.NodeName = "node-1"
	b := pod("default", "b", map[string]string{"app": "db"})
	b.Spec.NodeName = "node-2"
	b.Status.Phase = corev1.PodRunning
	k := pod("kube-system", "k", map[string]string{"app": "web"})
	k.Spec.NodeName = "node-1"
	for _, p := range []*corev1.Pod{a, b, k} {
		mustCreate(t, c, p)
	}
	// status is kept on create; set phase through the status subresource as a kubelet would.
	bs := mustGet(t, c, b).(*corev1.Pod)
	bs.Status.Phase = corev1.PodRunning
	if _, err := c.Update(podsGVR, "default", bs, UpdateOptions{Subresource: "status"}); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name      string
		namespace string
		label     string
		field     string
		want      []string
	}{
		{"all namespaces", "", "", "", []string{"default/a", "default/b", "kube-system/k"}},
		{"one namespace", "default", "", "", []string{"default/a", "default/b"}},
		{"label equality", "", "app=web", "", []string{"default/a", "kube-system/k"}},
		{"label set", "", "app in (db),!tier", "", []string{"default/b"}},
		{"spec.nodeName", "", "", "spec.nodeName=node-1", []string{"default/a", "kube-system/k"}},
		{"spec.host alias", "", "", "spec.host=node-2", []string{"default/b"}},
		{"status.phase", "", "", "status.phase=Running", []string{"default/b"}},
		{"not equal", "", "", "status.phase!=Running", []string{"default/a", "kube-system/k"}},
		{"metadata.name and label", "", "app=web", "metadata.name=k", []string{"kube-system/k"}},
		{"metadata.namespace", "", "", "metadata.namespace=kube-system", []string{"kube-system/k"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			opts := ListOptions{}
			if tt.label != "" {
				sel, err := labels.Parse(tt.label)
				g.Expect(err).NotTo(HaveOccurred())
				opts.LabelSelector = sel
			}
			if tt.field != "" {
				sel, err := fields.ParseSelector(tt.field)
				g.Expect(err).NotTo(HaveOccurred())
				opts.FieldSelector = sel
			}
			out, err := c.List(podsGVR, tt.namespace, opts)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(podNames(out.(*corev1.PodList))).To(Equal(tt.want))
		})
	}
}

func TestFieldSelectorSupport(t *testing.T) {
	c := newTestCluster(t)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: corev1.NodeSpec{Unschedulable: true}}
	mustCreate(t, c, node)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "tok"}, Type: corev1.SecretTypeBootstrapToken}
	mustCreate(t, c, secret)
	ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "e"},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: "p"}, Reason: "Started", Type: "Normal"}
	mustCreate(t, c, ev)
	tests := []struct {
		gvr      schemaGVR
		field    string
		count    int
		badField string // non-empty: expect a 400 naming this field
	}{
		{nodesGVR, "spec.unschedulable=true", 1, ""},
		{nodesGVR, "spec.unschedulable=false", 0, ""},
		{nodesGVR, "spec.providerID=x", 0, "spec.providerID"},
		{secretsGVR, "type=bootstrap.kubernetes.io/token", 1, ""},
		{secretsGVR, "data.x=y", 0, "data.x"},
		{configMapsGVR, "metadata.name=x", 0, ""},
		{configMapsGVR, "data.a=b", 0, "data.a"},
		{corev1.SchemeGroupVersion.WithResource("events"), "involvedObject.kind=Pod,reason=Started", 1, ""},
		{corev1.SchemeGroupVersion.WithResource("events"), "involvedObject.bogus=x", 0, "involvedObject.bogus"},
		{namespacesGVR, "status.phase=Active", 4, ""},
		{podsGVR, "spec.containers=x", 0, "spec.containers"},
	}
	for _, tt := range tests {
		t.Run(tt.gvr.Resource+" "+tt.field, func(t *testing.T) {
			g := NewWithT(t)
			sel, err := fields.ParseSelector(tt.field)
			g.Expect(err).NotTo(HaveOccurred())
			out, err := c.List(tt.gvr, "", ListOptions{FieldSelector: sel})
			if tt.badField != "" {
				g.Expect(apierrors.IsBadRequest(err)).To(BeTrue(), "got %v", err)
				g.Expect(err.Error()).To(Equal("field label not supported: " + tt.badField))
				_, err = c.Watch(tt.gvr, "", ListOptions{FieldSelector: sel})
				g.Expect(apierrors.IsBadRequest(err)).To(BeTrue(), "watch validates too")
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			items, _ := metaItems(out)
			g.Expect(items).To(Equal(tt.count))
		})
	}
}

func TestPagination(t *testing.T) {
	g := NewWithT(t)
	c := newTestCluster(t)
	for i := 0; i < 25; i++ {
		mustCreate(t, c, configMap("default", fmt.Sprintf("cm-%02d", i), nil))
	}
	first, err := c.List(configMapsGVR, "default", ListOptions{Limit: 10})
	g.Expect(err).NotTo(HaveOccurred())
	page := first.(*corev1.ConfigMapList)
	g.Expect(page.Items).To(HaveLen(10))
	g.Expect(page.Continue).NotTo(BeEmpty())
	g.Expect(*page.RemainingItemCount).To(Equal(int64(15)))
	snapshotRV := page.ResourceVersion

	// Changes after the first page do not show in later pages: they come from the same snapshot.
	if _, err := c.Delete(configMapsGVR, "default", "cm-15", DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, c, configMap("default", "cm-99", nil))
	cm := mustGet(t, c, configMap("default", "cm-20", nil)).(*corev1.ConfigMap)
	cm.Data = map[string]string{"changed": "yes"}
	if _, err := c.Update(configMapsGVR, "default", cm, UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	names := []string{}
	for _, it := range page.Items {
		names = append(names, it.Name)
	}
	cont := page.Continue
	for cont != "" {
		out, err := c.List(configMapsGVR, "default", ListOptions{Limit: 10, Continue: cont})
		g.Expect(err).NotTo(HaveOccurred())
		l := out.(*corev1.ConfigMapList)
		g.Expect(l.ResourceVersion).To(Equal(snapshotRV))
		for _, it := range l.Items {
			names = append(names, it.Name)
			if it.Name == "cm-20" {
				g.Expect(it.Data).To(BeEmpty(), "snapshot state, not the later update")
			}
		}
		cont = l.Continue
	}
	want := []string{}
	for i := 0; i < 25; i++ {
		want = append(want, fmt.Sprintf("cm-%02d", i))
	}
	g.Expect(names).To(Equal(want))

	// With a selector the page still fills up, and no remaining count is given.
	sel, _ := fields.ParseSelector("metadata.name!=cm-01")
	out, err := c.List(configMapsGVR, "default", ListOptions{Limit: 2, FieldSelector: sel})
	g.Expect(err).NotTo(HaveOccurred())
	l := out.(*corev1.ConfigMapList)
	g.Expect([]string{l.Items[0].Name, l.Items[1].Name}).To(Equal([]string{"cm-00", "cm-02"}))
	g.Expect(l.RemainingItemCount).To(BeNil())

	// Bad tokens are 400s.
	_, err = c.List(configMapsGVR, "default", ListOptions{Continue: "garbage"})
	g.Expect(apierrors.IsBadRequest(err)).To(BeTrue())
	_, err = c.List(configMapsGVR, "default", ListOptions{Continue: page.Continue, ResourceVersion: "5"})
	g.Expect(apierrors.IsBadRequest(err)).To(BeTrue())
}

func TestPaginationTokenExpires(t *testing.T) {
	g := NewWithT(t)
	c := newTestCluster(t, ClusterOptions{EventHistory: 8})
	for i := 0; i < 4; i++ {
		mustCreate(t, c, configMap("default", fmt.Sprintf("cm-%d", i), nil))
	}
	out, err := c.List(configMapsGVR, "default", ListOptions{Limit: 2})
	g.Expect(err).NotTo(HaveOccurred())
	cont := out.(*corev1.ConfigMapList).Continue
	// Push the snapshot out of the bounded history.
	for i := 0; i < 10; i++ {
		mustCreate(t, c, configMap("default", fmt.Sprintf("more-%d", i), nil))
	}
	_, err = c.List(configMapsGVR, "default", ListOptions{Limit: 2, Continue: cont})
	g.Expect(apierrors.IsResourceExpired(err)).To(BeTrue(), "got %v", err)
	status := err.(apierrors.APIStatus).Status()
	g.Expect(status.Code).To(Equal(int32(410)))
	g.Expect(status.Message).To(ContainSubstring("use the continue token in this response to retrieve the remainder of the results"))

	// As kube-apiserver's 410 does, it carries a token that continues after the same key at the
	// latest state: what was created since shows up (an inconsistent list), and the pages after
	// it are consistent with that state.
	g.Expect(status.ListMeta.Continue).NotTo(BeEmpty())
	rv, after, err := decodeContinue(status.ListMeta.Continue)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(rv).To(BeEquivalentTo(-1))
	g.Expect(after).To(Equal("default/cm-1"))
	out, err = c.List(configMapsGVR, "default", ListOptions{Limit: 5, Continue: status.ListMeta.Continue})
	g.Expect(err).NotTo(HaveOccurred())
	page := out.(*corev1.ConfigMapList)
	g.Expect(names(page.Items)).To(Equal([]string{"cm-2", "cm-3", "more-0", "more-1", "more-2"}))
	g.Expect(page.ResourceVersion).To(Equal(strconv.FormatUint(c.objs.ResourceVersion(), 10)))
	mustCreate(t, c, configMap("default", "zz-later", nil))
	out, err = c.List(configMapsGVR, "default", ListOptions{Limit: 100, Continue: page.Continue})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(names(out.(*corev1.ConfigMapList).Items)).To(HaveLen(7), "more-3 to more-9, not what was created after that page")
}

func names(items []corev1.ConfigMap) []string {
	out := make([]string, len(items))
	for i := range items {
		out[i] = items[i].Name
	}
	return out
}

func TestListResourceVersionSemantics(t *testing.T) {
	g := NewWithT(t)
	c := newTestCluster(t, ClusterOptions{EventHistory: 8})
	mustCreate(t, c, configMap("default", "a", nil))
	l0, _ := c.List(configMapsGVR, "", ListOptions{})
	rvA := l0.(*corev1.ConfigMapList).ResourceVersion
	mustCreate(t, c, configMap("default", "b", nil))

	// Exact: the state at that version.
	out, err := c.List(configMapsGVR, "", ListOptions{ResourceVersion: rvA, ResourceVersionMatch: metav1.ResourceVersionMatchExact})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out.(*corev1.ConfigMapList).Items).To(HaveLen(1))
	g.Expect(out.(*corev1.ConfigMapList).ResourceVersion).To(Equal(rvA))
	// NotOlderThan: the latest state.
	out, err = c.List(configMapsGVR, "", ListOptions{ResourceVersion: rvA, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out.(*corev1.ConfigMapList).Items).To(HaveLen(2))
	// "0": any, served from the latest.
	out, err = c.List(configMapsGVR, "", ListOptions{ResourceVersion: "0"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out.(*corev1.ConfigMapList).Items).To(HaveLen(2))

	cur, _ := strconv.Atoi(out.(*corev1.ConfigMapList).ResourceVersion)
	_, err = c.List(configMapsGVR, "", ListOptions{ResourceVersion: strconv.Itoa(cur + 100)})
	g.Expect(apierrors.IsTimeout(err)).To(BeTrue(), "too large resource version")
	g.Expect(apierrors.HasStatusCause(err, metav1.CauseTypeResourceVersionTooLarge)).To(BeTrue())
	// A continue token no list of this cluster handed out (a future resourceVersion) is refused
	// the same way, not served as a snapshot of a state that never existed.
	_, err = c.List(configMapsGVR, "", ListOptions{Limit: 1, Continue: encodeContinue(int64(cur+100), "default/a")})
	g.Expect(apierrors.IsTimeout(err)).To(BeTrue(), "%v", err)
	g.Expect(err).To(MatchError(ContainSubstring(fmt.Sprintf("Too large resource version: %d, current: %d", cur+100, cur))))

	_, err = c.List(configMapsGVR, "", ListOptions{ResourceVersionMatch: metav1.ResourceVersionMatchExact})
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "match without resourceVersion")
	_, err = c.List(configMapsGVR, "", ListOptions{ResourceVersion: "abc"})
	g.Expect(apierrors.IsBadRequest(err)).To(BeTrue())

	for i := 0; i < 10; i++ {
		mustCreate(t, c, configMap("default", fmt.Sprintf("x-%d", i), nil))
	}
	_, err = c.List(configMapsGVR, "", ListOptions{ResourceVersion: rvA, ResourceVersionMatch: metav1.ResourceVersionMatchExact})
	g.Expect(apierrors.IsResourceExpired(err)).To(BeTrue())
}

// A list with shared items has the same content as a copied one, and clearing the items'
// apiVersion/kind (lists carry none) leaves the stored objects alone.
func TestListShareItems(t *testing.T) {
	g := NewWithT(t)
	c := newTestCluster(t)
	for _, n := range []string{"a", "b"} {
		mustCreate(t, c, pod("default", n, map[string]string{"app": "x"}))
	}
	podsGVR := corev1.SchemeGroupVersion.WithResource("pods")
	copied, err := c.List(podsGVR, "default", ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	shared, err := c.List(podsGVR, "default", ListOptions{ShareItems: true})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(shared).To(Equal(copied))
	g.Expect(shared.(*corev1.PodList).Items[0].Kind).To(BeEmpty())
	got, err := c.Get(podsGVR, "default", "a")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.GetObjectKind().GroupVersionKind().Kind).To(Equal("Pod"), "the stored object keeps its kind")
}
