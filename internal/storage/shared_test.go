package storage

import (
	"errors"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// created is cm(name, data) as the registry creates it: a uid and a creation time of its own.
func created(name, data string) *corev1.ConfigMap {
	obj := cm(name, data)
	obj.UID = uuid.NewUUID()
	obj.CreationTimestamp = metav1.NewTime(time.Now().Truncate(time.Second))
	return obj
}

func sharedObjects(name string, db *DB) *Objects {
	o := NewObjects(name, testHistory, db)
	o.Share(configMaps)
	return o
}

// refOf returns the reference o holds for key, failing when o holds the object in full.
func refOf(g Gomega, o *Objects, key string) *sharedRef {
	v := o.Value(configMaps, key)
	g.Expect(v.Exists()).To(BeTrue())
	g.Expect(v.ref()).NotTo(BeNil(), "held as a reference to shared content")
	return v.ref()
}

// Clusters storing the same content hold it once: each keeps its own identity, and reads give
// back exactly the object that was stored.
func TestEqualObjectsOfClustersShareTheirContent(t *testing.T) {
	g := NewWithT(t)
	a, b := sharedObjects("a", nil), sharedObjects("b", nil)
	objA, objB := created("policy", "same"), created("policy", "same")
	a.Put(configMaps, objA, nil)
	b.Put(configMaps, objB, nil)

	ra, rb := refOf(g, a, "default/policy"), refOf(g, b, "default/policy")
	g.Expect(ra.content).To(BeIdenticalTo(rb.content), "one content for both clusters")
	g.Expect(ra.uid).NotTo(Equal(rb.uid))

	gotA, gotB := a.Get(configMaps, "default/policy"), b.Get(configMaps, "default/policy")
	g.Expect(equality.Semantic.DeepEqual(gotA, objA)).To(BeTrue(), "cluster a reads what it stored")
	g.Expect(equality.Semantic.DeepEqual(gotB, objB)).To(BeTrue(), "cluster b reads what it stored")
	g.Expect(gotA.GetUID()).To(Equal(objA.UID))
	g.Expect(gotA.GetResourceVersion()).To(Equal(objA.ResourceVersion))
	g.Expect(gotA.GetCreationTimestamp()).To(Equal(objA.CreationTimestamp))
	g.Expect(a.IsCurrent(configMaps, "default/policy", gotA)).To(BeTrue())
	g.Expect(a.IsCurrent(configMaps, "default/policy", gotB)).To(BeFalse(), "another cluster's version")
	g.Expect(a.Bytes()).To(BeEquivalentTo(SizeOf(objA)))

	// A change in one cluster is its own: the other still reads the shared content.
	changed := objA.DeepCopy()
	changed.Data = map[string]string{"k": "mine"}
	e := a.Put(configMaps, changed, gotA)
	g.Expect(e.Type).To(Equal(watch.Modified))
	g.Expect(e.Old.Is(gotA)).To(BeTrue(), "the event's previous state is the stored reference")
	g.Expect(a.Get(configMaps, "default/policy").(*corev1.ConfigMap).Data).To(HaveKeyWithValue("k", "mine"))
	g.Expect(b.Get(configMaps, "default/policy").(*corev1.ConfigMap).Data).To(HaveKeyWithValue("k", "same"))

	// Unshared resources, and objects whose identity a reference would not give back, are kept whole.
	nameless := cm("plain", "same")
	b.Put(configMaps, nameless, nil)
	g.Expect(b.Value(configMaps, "default/plain").ref()).To(BeNil())
	g.Expect(b.Get(configMaps, "default/plain")).To(BeIdenticalTo(nameless))
	other := created("policy", "same")
	b.Put(secrets, other, nil)
	g.Expect(b.Value(secrets, "default/policy").ref()).To(BeNil())
}

// On disk, a cluster storing content another cluster holds writes a reference, and the content
// goes once into the shared bucket; content of its own is written whole, as before. A change and
// a deletion by one cluster survive a restart, and do not touch the other clusters.
func TestSharedContentOnDiskSurvivesRestart(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	db, err := Open(dir)
	g.Expect(err).NotTo(HaveOccurred())
	names := []string{"a", "b", "c"}
	clusters := map[string]*Objects{}
	stored := map[string]client.Object{}
	for _, n := range names {
		o := sharedObjects(n, db)
		_, err := o.Load(decodeConfigMaps)
		g.Expect(err).NotTo(HaveOccurred())
		obj := created("policy", t.Name()) // content no other test holds
		o.Put(configMaps, obj, nil)
		o.Put(configMaps, created("own", "of "+n), nil)
		clusters[n] = o
		stored[n] = obj
	}
	// b changes the shared object, c deletes it.
	b, c := clusters["b"], clusters["c"]
	changed := stored["b"].DeepCopyObject().(*corev1.ConfigMap)
	changed.Data = map[string]string{"k": "changed by b"}
	b.Put(configMaps, changed, b.Get(configMaps, "default/policy"))
	stored["b"] = changed
	c.Delete(configMaps, c.Get(configMaps, "default/policy"), stored["c"].DeepCopyObject().(client.Object))
	for _, o := range clusters {
		g.Expect(o.LastCommit().Wait()).To(Succeed())
	}

	raw, _, _ := load(t, db, "a")
	g.Expect(raw[db.diskKey(configMaps, "default/policy")][0]).To(Equal(encodingProtobuf), "the first to store the content writes it whole")
	raw, _, _ = load(t, db, "c")
	g.Expect(raw).NotTo(HaveKey(db.diskKey(configMaps, "default/policy")))
	g.Expect(raw[db.diskKey(configMaps, "default/own")][0]).To(Equal(encodingProtobuf), "content of its own stays in its bucket")
	n, _, err := db.SharedContents()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(n).To(Equal(1), "the shared content once, for b's reference (c's went)")
	g.Expect(db.Close()).To(Succeed())

	db, err = Open(dir)
	g.Expect(err).NotTo(HaveOccurred())
	defer db.Close()
	for _, name := range names {
		o := sharedObjects(name, db)
		found, err := o.Load(decodeConfigMaps)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(found).To(BeTrue())
		got := o.Get(configMaps, "default/policy")
		if name == "c" {
			g.Expect(got).To(BeNil(), "the deletion survives the restart")
			continue
		}
		g.Expect(equality.Semantic.DeepEqual(got, stored[name])).To(BeTrue(), "%s reads what it stored before the restart", name)
		g.Expect(o.Get(configMaps, "default/own").(*corev1.ConfigMap).Data).To(HaveKeyWithValue("k", "of "+name))
		refOf(g, o, "default/own") // held as a reference in memory, whatever the disk holds
	}
}

// A fresh cluster storing what other clusters hold writes no copy of it: its bucket holds
// references only, and the shared bucket does not grow.
func TestFreshClusterWritesNoCopyOfSharedContent(t *testing.T) {
	g := NewWithT(t)
	db, err := Open(t.TempDir())
	g.Expect(err).NotTo(HaveOccurred())
	defer db.Close()
	bootstrap := func(name string) *Objects {
		o := sharedObjects(name, db)
		_, err := o.Load(decodeConfigMaps)
		g.Expect(err).NotTo(HaveOccurred())
		for _, n := range []string{"p1", "p2", "p3"} {
			o.Put(configMaps, created(n, t.Name()+n), nil)
		}
		g.Expect(o.LastCommit().Wait()).To(Succeed())
		return o
	}
	first := bootstrap("first")
	second := bootstrap("second")
	n, size, err := db.SharedContents()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(n).To(Equal(3))
	for i := range 3 {
		bootstrap("more-" + string(rune('a'+i)))
	}
	n2, size2, err := db.SharedContents()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect([]int{n2, size2}).To(Equal([]int{n, size}), "further clusters add no content")
	for _, bucket := range []string{"second", "more-a", "more-b", "more-c"} {
		raw, _, _ := load(t, db, bucket)
		g.Expect(raw).To(HaveLen(3))
		for k, v := range raw {
			g.Expect(v).To(HaveLen(refLen), "%s %s is a reference", bucket, k)
			g.Expect(v[0]).To(Equal(encodingShared))
		}
	}
	g.Expect(first.Get(configMaps, "default/p1")).NotTo(BeNil())
	g.Expect(second.Get(configMaps, "default/p1")).NotTo(BeNil())
}

// Content no reference points at any more (its clusters deleted) is dropped when the file is
// opened again.
func TestUnreferencedSharedContentIsSweptOnOpen(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	db, err := Open(dir)
	g.Expect(err).NotTo(HaveOccurred())
	for _, name := range []string{"a", "b"} {
		o := sharedObjects(name, db)
		_, err := o.Load(decodeConfigMaps)
		g.Expect(err).NotTo(HaveOccurred())
		o.Put(configMaps, created("policy", t.Name()), nil)
		g.Expect(o.LastCommit().Wait()).To(Succeed())
	}
	n, _, err := db.SharedContents()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(n).To(Equal(1))
	g.Expect(db.DropBucket("b").Wait()).To(Succeed())
	g.Expect(db.Close()).To(Succeed())

	db, err = Open(dir)
	g.Expect(err).NotTo(HaveOccurred())
	defer db.Close()
	n, _, err = db.SharedContents()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(n).To(BeZero(), "only b referred to it (a holds its own copy)")
	g.Expect(db.Buckets()).To(ConsistOf("a"), "the shared bucket is no cluster's")
	o := sharedObjects("a", db)
	_, err = o.Load(decodeConfigMaps)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(o.Get(configMaps, "default/policy")).NotTo(BeNil())
}

// A reference whose commit failed is undone like any change: the cluster holds the previous
// version again, and no content is left behind for it.
func TestFailedSharedWriteRollsBack(t *testing.T) {
	g := NewWithT(t)
	db, err := Open(t.TempDir())
	g.Expect(err).NotTo(HaveOccurred())
	defer db.Close()
	a, b := sharedObjects("a", db), sharedObjects("b", db)
	for _, o := range []*Objects{a, b} {
		_, err := o.Load(decodeConfigMaps)
		g.Expect(err).NotTo(HaveOccurred())
	}
	a.Put(configMaps, created("policy", t.Name()), nil)
	g.Expect(a.LastCommit().Wait()).To(Succeed())
	before := b.ResourceVersion()

	db.InjectFault(func(bucket, _ string) error {
		if bucket == "b" {
			return errors.New("disk full")
		}
		return nil
	})
	b.Put(configMaps, created("policy", t.Name()), nil)
	g.Expect(b.Value(configMaps, "default/policy").ref()).NotTo(BeNil())
	g.Expect(b.LastCommit().Wait()).To(HaveOccurred())
	db.InjectFault(nil)
	undone := b.Rollback()
	g.Expect(undone).To(HaveLen(1))
	g.Expect(b.Get(configMaps, "default/policy")).To(BeNil())
	g.Expect(b.ResourceVersion()).To(Equal(before))
	g.Expect(b.Bytes()).To(BeZero())
	n, _, err := db.SharedContents()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(n).To(BeZero())
}
