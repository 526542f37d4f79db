package storage

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

var (
	configMaps  = schema.GroupResource{Resource: "configmaps"}
	secrets     = schema.GroupResource{Resource: "secrets"}
	testHistory = HistoryOptions{Limit: 100, TTL: time.Minute, MaxBytes: 1 << 20}
)

func cm(name, data string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Data: map[string]string{"k": data}}
}

// decodeConfigMaps is a Decoder for a store that only holds ConfigMaps; the "secrets" resource
// stands for one whose objects moved to "configmaps".
func decodeConfigMaps(gr schema.GroupResource, value []byte) (schema.GroupResource, client.Object, error) {
	obj := &corev1.ConfigMap{}
	err := DecodeValue(value, obj)
	return configMaps, obj, err
}

func TestDiskKeyRoundTrip(t *testing.T) {
	g := NewWithT(t)
	db, err := Open(t.TempDir())
	g.Expect(err).NotTo(HaveOccurred())
	defer db.Close()
	for _, tc := range []struct {
		gr  schema.GroupResource
		key string
	}{
		{configMaps, "default/x"},
		{schema.GroupResource{Group: "apps", Resource: "deployments"}, "kube-system/coredns"},
		{schema.GroupResource{Resource: "nodes"}, "n1"},
		{schema.GroupResource{Group: "rbac.authorization.k8s.io", Resource: "clusterroles"}, "system:aggregate-to-view"},
	} {
		k := db.diskKey(tc.gr, tc.key)
		g.Expect(len(k)).To(Equal(2+len(tc.key)), "a short code for the resource")
		gr, key, old, ok := db.parseKey(k)
		g.Expect(ok).To(BeTrue())
		g.Expect(old).To(BeFalse())
		g.Expect(gr).To(Equal(tc.gr))
		g.Expect(key).To(Equal(tc.key))
		g.Expect(db.diskKey(tc.gr, "other")).To(HavePrefix(k[:2]), "one code per resource")
		gr, key, old, ok = db.parseKey(legacyKey(tc.gr, tc.key))
		g.Expect(ok && old).To(BeTrue())
		g.Expect(gr).To(Equal(tc.gr))
		g.Expect(key).To(Equal(tc.key))
	}
	for _, k := range []string{"nodes", "\x01", "\x01\x7f", "\x01\x05x"} {
		_, _, _, ok := db.parseKey(k)
		g.Expect(ok).To(BeFalse(), "%q", k)
	}
}

// Every Put and Delete gets the next resourceVersion, the history holds the changes in order
// with their previous states, and the byte count follows the objects.
func TestPutDeleteAssignResourceVersionsAndRecordEvents(t *testing.T) {
	g := NewWithT(t)
	o := NewObjects("c", testHistory, nil)
	start := o.ResourceVersion()
	g.Expect(start).To(BeNumerically(">=", uint64(time.Now().Add(-time.Minute).UnixMicro())), "above any earlier life's versions")

	a := cm("a", "1")
	e := o.Put(configMaps, a, nil)
	g.Expect(e.Type).To(Equal(watch.Added))
	g.Expect(a.ResourceVersion).To(Equal(strconv.FormatUint(start+1, 10)))
	a2 := cm("a", "22")
	e = o.Put(configMaps, a2, a)
	g.Expect(e.Type).To(Equal(watch.Modified))
	g.Expect(e.Old.Object()).To(BeIdenticalTo(a))
	g.Expect(o.Get(configMaps, "default/a")).To(BeIdenticalTo(a2))
	g.Expect(o.Bytes()).To(BeEquivalentTo(SizeOf(a2)))

	last := a2.DeepCopy()
	e = o.Delete(configMaps, a2, last)
	g.Expect(e.Type).To(Equal(watch.Deleted))
	g.Expect(e.Obj.Object()).To(BeIdenticalTo(last))
	g.Expect(last.ResourceVersion).To(Equal(strconv.FormatUint(start+3, 10)))
	g.Expect(o.Get(configMaps, "default/a")).To(BeNil())
	g.Expect(o.Bytes()).To(BeZero())

	evs, ok := o.Since(configMaps, start+1, 0)
	g.Expect(ok).To(BeTrue())
	g.Expect(evs).To(HaveLen(2))
	g.Expect(evs[0].RV).To(Equal(start + 2))
	g.Expect(o.Covers(configMaps, start-1)).To(BeFalse(), "before the store started: unknown")
}

// Load restores objects and continues resourceVersions above the disk's; objects the decoder
// moves to another resource are rewritten there, durably.
func TestLoadRestoresAndMovesObjects(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	db, err := Open(dir)
	g.Expect(err).NotTo(HaveOccurred())
	o := NewObjects("c", testHistory, db)
	found, err := o.Load(decodeConfigMaps)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(found).To(BeFalse())
	o.Put(configMaps, cm("a", "1"), nil)
	o.Put(secrets, cm("moved", "2"), nil)
	g.Expect(o.LastCommit().Wait()).To(Succeed())
	lastRV := o.ResourceVersion()
	g.Expect(db.Close()).To(Succeed())

	for range 2 { // the move is durable: the second load finds it done
		db, err = Open(dir)
		g.Expect(err).NotTo(HaveOccurred())
		o = NewObjects("c", testHistory, db)
		found, err = o.Load(decodeConfigMaps)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(found).To(BeTrue())
		g.Expect(o.ResourceVersion()).To(BeNumerically(">", lastRV))
		g.Expect(o.Get(configMaps, "default/a").(*corev1.ConfigMap).Data["k"]).To(Equal("1"))
		g.Expect(o.Get(configMaps, "default/moved")).NotTo(BeNil())
		g.Expect(o.Resource(secrets)).To(BeEmpty())
		g.Expect(o.LastCommit().Wait()).To(Succeed())
		keys, _, _ := load(t, db, "c")
		g.Expect(keys).To(HaveKey(db.diskKey(configMaps, "default/moved")))
		g.Expect(keys).NotTo(HaveKey(db.diskKey(secrets, "default/moved")))
		g.Expect(db.Close()).To(Succeed())
	}
}

// A value that cannot be decoded fails the load with ErrUnreadable, naming the key.
func TestLoadOfAnUnreadableValueFails(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	db, err := Open(dir)
	g.Expect(err).NotTo(HaveOccurred())
	defer db.Close()
	g.Expect(db.Put("c", "/configmaps/default/x", 7, value("not an encoding")).Wait()).To(Succeed())
	_, err = NewObjects("c", testHistory, db).Load(decodeConfigMaps)
	g.Expect(err).To(MatchError(ErrUnreadable))
	g.Expect(err.Error()).To(ContainSubstring("/configmaps/default/x"))
}

// The cache of encodings stays within its bound, counts its bytes exactly, keeps no encoding
// larger than an entry may be, and forgets an object's encodings when it changes.
func TestEncodingCacheStaysBounded(t *testing.T) {
	g := NewWithT(t)
	o := NewObjects("c", testHistory, nil)
	data := []byte(strings.Repeat("x", MaxEncodedEntryBytes/2))
	for i := range 20 {
		obj := cm(fmt.Sprint(i), "")
		o.Put(configMaps, obj, nil)
		o.KeepEncoding(configMaps, "default/"+fmt.Sprint(i), obj, "json", data)
	}
	_, bytes := o.CachedEncodings()
	g.Expect(bytes).To(BeNumerically("<=", MaxEncodedCacheBytes))
	g.Expect(bytes).To(BeNumerically(">", MaxEncodedCacheBytes/2), "the cache is used up to its bound")
	sum := 0
	for _, ent := range o.enc.entries {
		for _, f := range ent.formats {
			sum += len(f.data)
		}
	}
	g.Expect(sum).To(Equal(bytes), "the byte count matches the entries")

	huge := cm("huge", "")
	o.Put(configMaps, huge, nil)
	o.KeepEncoding(configMaps, "default/huge", huge, "json", make([]byte, MaxEncodedEntryBytes+1))
	g.Expect(o.Encoding(configMaps, "default/huge", huge, "json")).To(BeNil(), "too large to keep")

	// A stale version is not cached, and a change drops the cached encodings.
	obj := cm("fresh", "")
	o.Put(configMaps, obj, nil)
	o.KeepEncoding(configMaps, "default/fresh", obj, "json", []byte("v1"))
	g.Expect(o.Encoding(configMaps, "default/fresh", obj, "json")).To(Equal([]byte("v1")))
	next := cm("fresh", "2")
	o.Put(configMaps, next, obj)
	o.KeepEncoding(configMaps, "default/fresh", obj, "json", []byte("stale"))
	g.Expect(o.Encoding(configMaps, "default/fresh", obj, "json")).To(BeNil())
	g.Expect(o.Encoding(configMaps, "default/fresh", next, "json")).To(BeNil())
}

// TestIdleClusterKeepsNoUnsettledChanges: once an idle cluster's events expire, the log of changes
// not yet seen on disk keeps none of its last writes' object versions alive either.
func TestIdleClusterKeepsNoUnsettledChanges(t *testing.T) {
	g := NewWithT(t)
	o, _ := durableObjects(t)
	first := cm("a", "1")
	o.Put(configMaps, first, nil)
	o.Put(configMaps, cm("a", "2"), first)
	g.Expect(o.LastCommit().Wait()).To(Succeed())
	g.Expect(o.unsettled).NotTo(BeEmpty(), "settled at the next write or expiry")

	_, pending := o.ExpireEvents(time.Now().Add(time.Hour).UnixNano())
	g.Expect(pending).To(BeFalse())
	g.Expect(o.unsettled).To(BeEmpty())
}

// TestEventsShareTheirResource: the events of every cluster point at one copy of their
// resource's name, so an event is 96 bytes (the runtime's size class of 96, not 128): a fleet's
// histories hold a few hundred thousand of them while its clusters are set up.
func TestEventsShareTheirResource(t *testing.T) {
	g := NewWithT(t)
	a, b := NewObjects("a", testHistory, nil), NewObjects("b", testHistory, nil)
	ea := a.Put(configMaps, cm("x", "1"), nil)
	eb := b.Put(schema.GroupResource{Resource: "configmaps"}, cm("x", "1"), nil)
	es := b.Put(secrets, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "s"}}, nil)
	g.Expect(ea.gr).To(BeIdenticalTo(eb.gr))
	g.Expect(ea.GroupResource()).To(Equal(configMaps))
	g.Expect(es.GroupResource()).To(Equal(secrets))
	g.Expect(int(unsafe.Sizeof(Event{}))).To(BeNumerically("<=", 96))
}
