package storage

import (
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"
	"unsafe"
	"weak"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TestSettledVersionMovesToFreshMemory: once the history drops the event that wrote the stored
// version, the version moves to a new object of the same content and resourceVersion, the old
// one is no longer held, cached encodings and optimistic writes follow the move, and nothing is
// written or emitted for it.
func TestSettledVersionMovesToFreshMemory(t *testing.T) {
	g := NewWithT(t)
	o, db := durableObjects(t)
	var moved []string
	var newest *corev1.ConfigMap
	o.OnRelocate(func(r Relocation) {
		g.Expect(r.GR).To(Equal(configMaps))
		g.Expect(r.New).NotTo(BeIdenticalTo(r.Old))
		g.Expect(r.New).To(Equal(r.Old))
		moved = append(moved, r.Key)
		newest = r.New.(*corev1.ConfigMap)
	})

	// "a": written twice, so only its second version is stored when both events go; "gone":
	// deleted; "b": written once, its encoding cached.
	var stored weak.Pointer[corev1.ConfigMap]
	func() {
		a1 := cm("a", "1")
		o.Put(configMaps, a1, nil)
		a2 := cm("a", "2")
		o.Put(configMaps, a2, a1)
		stored = weak.Make(a2)
		gone := cm("gone", "x")
		o.Put(configMaps, gone, nil)
		o.Delete(configMaps, gone, cm("gone", "x"))
	}()
	b := cm("b", "1")
	o.Put(configMaps, b, nil)
	o.KeepEncoding(configMaps, "default/b", b, "json", []byte(`{"kind":"ConfigMap"}`))
	g.Expect(o.LastCommit().Wait()).To(Succeed())
	rv, written := o.ResourceVersion(), db.Stats().Writes

	_, pending := o.ExpireEvents(time.Now().Add(time.Hour).UnixNano())
	g.Expect(pending).To(BeFalse())
	g.Expect(moved).To(Equal([]string{"default/a", "default/b"}), "each stored version once, in the order of their events")
	g.Expect(o.ResourceVersion()).To(Equal(rv))
	g.Expect(db.Stats().Writes).To(Equal(written), "the same version: nothing to write")
	events, ok := o.Since(configMaps, rv, 0)
	g.Expect(ok).To(BeTrue())
	g.Expect(events).To(BeEmpty())

	movedB := o.Get(configMaps, "default/b")
	g.Expect(movedB).To(BeIdenticalTo(newest))
	g.Expect(movedB).NotTo(BeIdenticalTo(b))
	g.Expect(movedB).To(Equal(b))
	g.Expect(o.IsCurrent(configMaps, "default/b", b)).To(BeFalse(), "a write prepared on the old memory computes again")
	g.Expect(o.IsCurrent(configMaps, "default/b", movedB)).To(BeTrue())
	g.Expect(string(o.Encoding(configMaps, "default/b", movedB, "json"))).To(Equal(`{"kind":"ConfigMap"}`))
	g.Expect(o.Get(configMaps, "default/a").(*corev1.ConfigMap).Data).To(HaveKeyWithValue("k", "2"))

	// Nothing of the store holds the old memory of "a" any more.
	g.Eventually(func() bool {
		runtime.GC()
		return stored.Value() == nil
	}).WithTimeout(10 * time.Second).Should(BeTrue())

	// Later writes build on the moved version as on any other.
	o.Put(configMaps, cm("b", "2"), movedB)
	g.Expect(o.LastCommit().Wait()).To(Succeed())
	g.Expect(o.Get(configMaps, "default/b").(*corev1.ConfigMap).Data).To(HaveKeyWithValue("k", "2"))
}

// TestUnconfirmedVersionStaysForRollback: a version whose commit failed is not moved when its
// event expires, so the rollback finds and undoes exactly what it wrote.
func TestUnconfirmedVersionStaysForRollback(t *testing.T) {
	g := NewWithT(t)
	o, db := durableObjects(t)
	moved := 0
	o.OnRelocate(func(Relocation) { moved++ })
	first := cm("a", "1")
	o.Put(configMaps, first, nil)
	g.Expect(o.LastCommit().Wait()).To(Succeed())

	db.InjectFault(func(string, string) error { return errors.New("disk full") })
	o.Put(configMaps, cm("a", "2"), first)
	g.Expect(o.LastCommit().Wait()).To(HaveOccurred())
	db.InjectFault(nil)
	o.ExpireEvents(time.Now().Add(time.Hour).UnixNano())
	g.Expect(moved).To(BeZero())

	g.Expect(o.Rollback()).To(HaveLen(1))
	g.Expect(o.Get(configMaps, "default/a")).To(BeIdenticalTo(first))
}

// durableObjects is a cluster's objects with their state on disk, loaded (empty).
func durableObjects(t *testing.T) (*Objects, *DB) {
	t.Helper()
	db, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	o := NewObjects("c", testHistory, db)
	if _, err := o.Load(decodeConfigMaps); err != nil {
		t.Fatal(err)
	}
	return o, db
}

// TestSharedVersionIsNotMoved: a reference to shared content is small already.
func TestSharedVersionIsNotMoved(t *testing.T) {
	g := NewWithT(t)
	o := NewObjects("c", testHistory, nil)
	o.Share(configMaps)
	moved := 0
	o.OnRelocate(func(Relocation) { moved++ })
	o.Put(configMaps, created("policy", t.Name()), nil)
	g.Expect(o.Value(configMaps, "default/policy").Shared()).To(BeTrue())
	o.ExpireEvents(time.Now().Add(time.Hour).UnixNano())
	g.Expect(moved).To(BeZero())
}

// TestSettledVersionsSharePages: versions that settle together move into arrays of a page each,
// one after the other, not into the free slots of their size class among other objects: a
// Pod's struct is 1,192 bytes and its size class 1,280, so only an array puts two of them 1,192
// bytes apart.
func TestSettledVersionsSharePages(t *testing.T) {
	g := NewWithT(t)
	podSize := unsafe.Sizeof(corev1.Pod{})
	perPage := pageBytes / podSize
	g.Expect(int(perPage*podSize)).To(BeNumerically(">", belowPage), "a page of Pods is an 8 KiB size-class object")

	o := NewObjects("c", testHistory, nil)
	pods := schema.GroupResource{Resource: "pods"}
	var moved []uintptr
	o.OnRelocate(func(r Relocation) { moved = append(moved, uintptr(unsafe.Pointer(r.New.(*corev1.Pod)))) })
	const n = 30
	for i := range n {
		o.Put(pods, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("p%d", i)}}, nil)
	}
	o.ExpireEvents(time.Now().Add(time.Hour).UnixNano())
	g.Expect(moved).To(HaveLen(n))

	// Each next version is the next element of the page, but where a new page begins (and the
	// first, which may continue a page started before).
	adjacent := 0
	for i := 1; i < n; i++ {
		if moved[i]-moved[i-1] == podSize {
			adjacent++
		}
	}
	g.Expect(adjacent).To(BeNumerically(">=", n-1-(n/int(perPage)+1)))
}
