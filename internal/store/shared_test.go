package store

import (
	"context"
	"sort"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/workload"
)

var (
	clusterRolesGVR = rbacv1.SchemeGroupVersion.WithResource("clusterroles")
	rolesGVR        = rbacv1.SchemeGroupVersion.WithResource("roles")
)

// bootstrapRBAC creates kube-apiserver's default policy and kubeadm's RBAC in c as the machine
// reconciler does (its in-process client, no managed fields), and returns the keys it created.
func bootstrapRBAC(t *testing.T, c *Cluster) []client.ObjectKey {
	t.Helper()
	cl := c.Client(WithoutManagedFields())
	var keys []client.ObjectKey
	for _, obj := range workload.DefaultRBAC() {
		if err := cl.Create(context.Background(), obj); err != nil {
			t.Fatalf("creating %s: %v", obj.GetName(), err)
		}
		keys = append(keys, client.ObjectKeyFromObject(obj))
	}
	return keys
}

// readRBAC reads every object of keys in c (nil where absent), by kind and key.
func readRBAC(t *testing.T, c *Cluster, keys []client.ObjectKey) map[string]client.Object {
	t.Helper()
	out := map[string]client.Object{}
	for _, policy := range workload.DefaultRBAC() {
		info, err := resourceOf(policy)
		if err != nil {
			t.Fatal(err)
		}
		obj, err := c.Get(info.GVR, policy.GetNamespace(), policy.GetName())
		id := info.GVR.Resource + "/" + client.ObjectKeyFromObject(policy).String()
		switch {
		case apierrors.IsNotFound(err):
			out[id] = nil
		case err != nil:
			t.Fatal(err)
		default:
			out[id] = obj.(client.Object)
		}
	}
	return out
}

// The default RBAC policy, created in three clusters, is stored once: a fresh cluster's state
// holds references only. Each cluster keeps its own identity (uid, creationTimestamp,
// resourceVersion); a change and a deletion by one cluster are its own and survive a restart
// exactly, as does everything the others hold.
func TestBootstrapObjectsAreSharedAndSurviveRestart(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	m, closeDB := durableManager(t, dir)
	names := []string{"ns/a", "ns/b", "ns/c"}
	var keys []client.ObjectKey
	for _, n := range names {
		c, err := m.AddCluster(n, ClusterOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		keys = bootstrapRBAC(t, c)
	}
	a, _ := m.GetCluster("ns/a")
	b, _ := m.GetCluster("ns/b")
	c, _ := m.GetCluster("ns/c")

	// Structural: the clusters after the first wrote no copy of the shared objects (nor of the
	// default namespaces), only references of a few dozen bytes.
	g.Expect(c.objs.LastCommit().Wait()).To(Succeed())
	for _, bucket := range []string{"ns/b", "ns/c"} {
		refs := 0
		_, _, err := m.db.Load(bucket, func(k string, v []byte) error {
			g.Expect(v[0]).To(Equal(byte('s')), "%s %s is a reference to shared content", bucket, k)
			g.Expect(len(v)).To(BeNumerically("<", 100), "%s %s", bucket, k)
			refs++
			return nil
		})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(refs).To(Equal(len(keys) + len(defaultNamespaces)))
	}

	// Each cluster has its own identity for the same object.
	roleA := mustGet(t, a, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "admin"}}).(*rbacv1.ClusterRole)
	roleB := mustGet(t, b, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "admin"}}).(*rbacv1.ClusterRole)
	g.Expect(roleA.UID).NotTo(Equal(roleB.UID))
	g.Expect(roleA.Rules).To(Equal(roleB.Rules))
	g.Expect(rvOf(t, roleA.ResourceVersion)).To(BeNumerically("<=", a.objs.ResourceVersion()))

	// b changes a shared object, c deletes one.
	view := mustGet(t, b, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "view"}}).(*rbacv1.ClusterRole)
	view.Labels = map[string]string{"changed": "by-b"}
	out, err := b.Update(clusterRolesGVR, "", view, UpdateOptions{FieldManager: "user"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(rvOf(t, out.(client.Object).GetResourceVersion())).To(BeNumerically(">", rvOf(t, view.ResourceVersion)))
	_, err = c.Delete(rolesGVR, "kube-system", "kube-proxy", DeleteOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(mustGet(t, a, view).GetLabels()).NotTo(HaveKey("changed"), "a does not see b's change")
	g.Expect(mustGet(t, c, view).GetLabels()).NotTo(HaveKey("changed"), "c does not see b's change")
	g.Expect(exists(a, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-proxy"}})).To(BeTrue())

	before := map[string]map[string]client.Object{}
	lastRV := map[string]uint64{}
	for _, n := range names {
		cl, _ := m.GetCluster(n)
		before[n] = readRBAC(t, cl, keys)
		lastRV[n] = cl.objs.ResourceVersion()
	}
	g.Expect(before["ns/b"]["clusterroles//view"].GetLabels()).To(HaveKeyWithValue("changed", "by-b"))
	g.Expect(before["ns/c"]["roles/kube-system/kube-proxy"]).To(BeNil())
	m.Close()
	closeDB()

	m, closeDB = durableManager(t, dir)
	defer closeDB()
	for _, n := range names {
		cl, err := m.AddCluster(n, ClusterOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		after := readRBAC(t, cl, keys)
		g.Expect(after).To(HaveLen(len(before[n])))
		for id, want := range before[n] {
			if want == nil {
				g.Expect(after[id]).To(BeNil(), "%s %s stays deleted", n, id)
				continue
			}
			g.Expect(equality.Semantic.DeepEqual(after[id], want)).To(BeTrue(), "%s %s reads as before the restart", n, id)
			g.Expect(after[id].GetUID()).To(Equal(want.GetUID()))
			g.Expect(after[id].GetResourceVersion()).To(Equal(want.GetResourceVersion()))
			g.Expect(after[id].GetCreationTimestamp()).To(Equal(want.GetCreationTimestamp()))
		}
		g.Expect(cl.objs.ResourceVersion()).To(BeNumerically(">", lastRV[n]), "resourceVersions go on above the shared objects'")
	}
}

// Lists and watches over shared objects and a cluster's own changes of them look as they did
// when every cluster stored its own copies: key order, selectors, resourceVersions in commit
// order, lists at an older resourceVersion, watch events of changes that make a shared object
// match or stop matching. The other cluster sees none of it.
func TestListsAndWatchesMixSharedAndChangedObjects(t *testing.T) {
	g := NewWithT(t)
	m := NewManager()
	one, err := m.AddCluster("one", ClusterOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	two, err := m.AddCluster("two", ClusterOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	names := []string{"e", "a", "d", "b", "c"}
	rvs := map[string]uint64{}
	var last uint64
	for _, cl := range []*Cluster{one, two} {
		for _, n := range names {
			cm := configMap("kube-system", "boot-"+n, map[string]string{"k": n})
			cm.Labels = map[string]string{"tier": "boot"}
			created := mustCreate(t, cl, cm)
			rv := rvOf(t, created.GetResourceVersion())
			if cl == one {
				g.Expect(rv).To(BeNumerically(">", last), "resourceVersions follow the creates")
				last, rvs[n] = rv, rv
			}
		}
	}
	for _, n := range names {
		g.Expect(one.objs.Value(configMapsGVR.GroupResource(), "kube-system/boot-"+n).Shared()).To(BeTrue(), "held as shared content")
	}
	listed := func(cl *Cluster, opts ListOptions) (*corev1.ConfigMapList, []string) {
		t.Helper()
		out, err := cl.List(configMapsGVR, "kube-system", opts)
		g.Expect(err).NotTo(HaveOccurred())
		list := out.(*corev1.ConfigMapList)
		var got []string
		for _, item := range list.Items {
			got = append(got, item.Name)
		}
		return list, got
	}
	tier := labels.SelectorFromSet(labels.Set{"tier": "boot"})
	list, got := listed(one, ListOptions{LabelSelector: tier})
	g.Expect(got).To(Equal([]string{"boot-a", "boot-b", "boot-c", "boot-d", "boot-e"}), "key order")
	for _, item := range list.Items {
		g.Expect(rvOf(t, item.ResourceVersion)).To(Equal(rvs[item.Data["k"]]))
		g.Expect(rvOf(t, item.ResourceVersion)).To(BeNumerically("<=", rvOf(t, list.ResourceVersion)))
	}
	listRV := list.ResourceVersion

	w, err := one.Watch(configMapsGVR, "kube-system", ListOptions{LabelSelector: tier, ResourceVersion: listRV})
	g.Expect(err).NotTo(HaveOccurred())
	defer w.Stop()
	// boot-b leaves the selection, a new one joins, boot-d changes within it, boot-e is deleted.
	b := mustGet(t, one, configMap("kube-system", "boot-b", nil)).(*corev1.ConfigMap)
	b.Labels = map[string]string{"tier": "other"}
	_, err = one.Update(configMapsGVR, "kube-system", b, UpdateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	extra := configMap("kube-system", "boot-f", nil)
	extra.Labels = map[string]string{"tier": "boot"}
	mustCreate(t, one, extra)
	d := mustGet(t, one, configMap("kube-system", "boot-d", nil)).(*corev1.ConfigMap)
	d.Data = map[string]string{"k": "d2"}
	_, err = one.Update(configMapsGVR, "kube-system", d, UpdateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = one.Delete(configMapsGVR, "kube-system", "boot-e", DeleteOptions{})
	g.Expect(err).NotTo(HaveOccurred())

	want := []eventSummary{{watch.Deleted, "boot-b"}, {watch.Added, "boot-f"}, {watch.Modified, "boot-d"}, {watch.Deleted, "boot-e"}}
	prev := rvOf(t, listRV)
	for _, w1 := range want {
		ev := nextEvent(t, w)
		g.Expect(summarize(ev)).To(Equal(w1))
		rv := rvOf(t, ev.Object.(client.Object).GetResourceVersion())
		g.Expect(rv).To(BeNumerically(">", prev), "events in commit order")
		prev = rv
	}
	g.Expect(w.ResultChan()).NotTo(Receive())

	_, got = listed(one, ListOptions{LabelSelector: tier})
	g.Expect(got).To(Equal([]string{"boot-a", "boot-c", "boot-d", "boot-f"}))
	_, got = listed(one, ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", "boot-c")})
	g.Expect(got).To(Equal([]string{"boot-c"}))
	// The state at the first list, rebuilt from the history over shared versions.
	old, got := listed(one, ListOptions{LabelSelector: tier, ResourceVersion: listRV, ResourceVersionMatch: metav1.ResourceVersionMatchExact})
	g.Expect(got).To(Equal([]string{"boot-a", "boot-b", "boot-c", "boot-d", "boot-e"}))
	g.Expect(old.Items[3].Data).To(HaveKeyWithValue("k", "d"))
	g.Expect(rvOf(t, old.Items[3].ResourceVersion)).To(Equal(rvs["d"]))

	// The other cluster holds its own, untouched.
	_, got = listed(two, ListOptions{LabelSelector: tier})
	g.Expect(got).To(Equal([]string{"boot-a", "boot-b", "boot-c", "boot-d", "boot-e"}))
	twoD := mustGet(t, two, configMap("kube-system", "boot-d", nil)).(*corev1.ConfigMap)
	g.Expect(twoD.Data).To(HaveKeyWithValue("k", "d"))

	// A watch from the start sends the shared objects as they are stored, in key order.
	w2, err := two.Watch(configMapsGVR, "kube-system", ListOptions{LabelSelector: tier})
	g.Expect(err).NotTo(HaveOccurred())
	defer w2.Stop()
	var initial []string
	for range names {
		ev := nextEvent(t, w2)
		g.Expect(ev.Type).To(Equal(watch.Added))
		initial = append(initial, ev.Object.(client.Object).GetName())
		if ev.Object.(client.Object).GetName() == "boot-d" {
			g.Expect(equality.Semantic.DeepEqual(ev.Object, twoD)).To(BeTrue())
		}
	}
	g.Expect(sort.StringsAreSorted(initial)).To(BeTrue())
}
