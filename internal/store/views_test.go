package store

import (
	"bytes"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	bolt "go.etcd.io/bbolt"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/storage"
)

var (
	coreEventsGVR   = corev1.SchemeGroupVersion.WithResource("events")
	regardingNodeN1 = corev1.ObjectReference{Kind: "Node", Name: "n1", APIVersion: "v1"}
)

// core/v1 and events.k8s.io/v1 Events are one collection, as upstream: an event written through
// either API is read, listed, watched, patched and deleted through the other.
func TestEventsAreOneCollection(t *testing.T) {
	g := NewWithT(t)
	c := newTestCluster(t)
	w, err := c.Watch(eventsV1GVR, "default", ListOptions{ResourceVersion: "0"})
	g.Expect(err).NotTo(HaveOccurred())
	defer w.Stop()

	core := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "default"}, InvolvedObject: regardingNodeN1,
		Reason: "Rebooted", Message: "node n1 rebooted", Type: corev1.EventTypeWarning, Count: 3,
		Source: corev1.EventSource{Component: "kubelet"}, ReportingController: "kubelet", ReportingInstance: "n1"}
	created := mustCreate(t, c, core).(*corev1.Event)

	got, err := c.Get(eventsV1GVR, "default", "a")
	g.Expect(err).NotTo(HaveOccurred())
	ev := got.(*eventsv1.Event)
	g.Expect(ev.UID).To(Equal(created.UID))
	g.Expect(ev.ResourceVersion).To(Equal(created.ResourceVersion))
	g.Expect(ev.Kind).To(Equal("Event"))
	g.Expect(ev.APIVersion).To(Equal("events.k8s.io/v1"))
	g.Expect(ev.Note).To(Equal("node n1 rebooted"))
	g.Expect(ev.Regarding).To(Equal(regardingNodeN1))
	g.Expect(ev.DeprecatedCount).To(BeEquivalentTo(3))
	g.Expect(ev.DeprecatedSource.Component).To(Equal("kubelet"))

	e := nextEvent(t, w)
	g.Expect(e.Type).To(Equal(watch.Added))
	g.Expect(e.Object).To(BeAssignableToTypeOf(&eventsv1.Event{}))
	g.Expect(e.Object.(*eventsv1.Event).Note).To(Equal("node n1 rebooted"))

	// Written through events.k8s.io, read through core.
	v1 := &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "default"}, EventTime: metav1.NowMicro(),
		Regarding: regardingNodeN1, Reason: "Started", Note: "started", Type: "Normal", Action: "Start",
		ReportingController: "example.com/ctl", ReportingInstance: "ctl-1"}
	_, err = c.Create(eventsV1GVR, "default", v1, CreateOptions{FieldManager: "ctl"})
	g.Expect(err).NotTo(HaveOccurred())
	back, err := c.Get(coreEventsGVR, "default", "b")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(back.(*corev1.Event).Message).To(Equal("started"))
	g.Expect(back.(*corev1.Event).InvolvedObject).To(Equal(regardingNodeN1))
	g.Expect(nextEvent(t, w).Type).To(Equal(watch.Added))

	list, err := c.List(coreEventsGVR, "default", ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(list.(*corev1.EventList).Items).To(HaveLen(2))
	// events.k8s.io's field names select on the same fields.
	viewList, err := c.List(eventsV1GVR, "default", ListOptions{FieldSelector: fields.OneTermEqualSelector("reason", "Started")})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(viewList.(*eventsv1.EventList).Items).To(ConsistOf(HaveField("Name", "b")))
	g.Expect(viewList.(*eventsv1.EventList).Items[0].Kind).To(BeEmpty(), "list items carry no kind")
	_, err = c.List(eventsV1GVR, "default", ListOptions{FieldSelector: fields.OneTermEqualSelector("involvedObject.name", "n1")})
	g.Expect(apierrors.IsBadRequest(err)).To(BeTrue(), "core field names are not events.k8s.io's: %v", err)

	// A merge patch applies to the object as the view shows it.
	patched, err := c.Patch(eventsV1GVR, "default", "a", types.MergePatchType, []byte(`{"note":"rebooted twice"}`), PatchOptions{FieldManager: "p"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(patched.(*eventsv1.Event).Note).To(Equal("rebooted twice"))
	back, _ = c.Get(coreEventsGVR, "default", "a")
	g.Expect(back.(*corev1.Event).Message).To(Equal("rebooted twice"))
	e = nextEvent(t, w)
	g.Expect(e.Type).To(Equal(watch.Modified))
	g.Expect(e.Object.(*eventsv1.Event).Note).To(Equal("rebooted twice"))

	// Server-side apply through the view.
	applied, err := c.Patch(eventsV1GVR, "default", "c", types.ApplyYAMLPatchType, []byte(`{"apiVersion":"events.k8s.io/v1","kind":"Event",
		"metadata":{"name":"c"},"eventTime":"2026-12-01T00:00:00.000000Z","reportingController":"x/y","reportingInstance":"i",
		"action":"Act","reason":"R","type":"Normal","regarding":{"kind":"Node","name":"n1"},"note":"applied"}`), PatchOptions{FieldManager: "applier"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(applied.(*eventsv1.Event).ManagedFields).To(ContainElement(HaveField("Manager", "applier")))
	back, err = c.Get(coreEventsGVR, "default", "c")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(back.(*corev1.Event).Message).To(Equal("applied"))

	// Deleted through one, gone from both; errors name the resource the client asked for.
	_, err = c.Delete(eventsV1GVR, "default", "a", DeleteOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = c.Get(coreEventsGVR, "default", "a")
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue())
	_, err = c.Get(eventsV1GVR, "default", "a")
	g.Expect(err).To(MatchError(`events.events.k8s.io "a" not found`))
	g.Expect(err.(apierrors.APIStatus).Status().Details.Group).To(Equal("events.k8s.io"))
}

// State written while events.k8s.io Events were a collection of their own is moved to the core
// Events on load, and stays there.
func TestLoadMovesViewObjectsToTheirStoredResource(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	m, closeDB := durableManager(t, dir)
	_, err := m.AddCluster("ns/c", ClusterOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	closeDB()
	old := &eventsv1.Event{TypeMeta: metav1.TypeMeta{APIVersion: "events.k8s.io/v1", Kind: "Event"},
		ObjectMeta: metav1.ObjectMeta{Name: "e", Namespace: "default", UID: "u-e", ResourceVersion: "5"},
		Regarding:  regardingNodeN1, Reason: "R", Note: "kept apart once", Type: "Normal"}
	// Written as that version did, through the storage layer: the key names the view's resource.
	oldKey := "events.k8s.io/events/default/e"
	db, err := storage.Open(dir)
	g.Expect(err).NotTo(HaveOccurred())
	objs := storage.NewObjects("ns/c", storage.HistoryOptions{Limit: 1, TTL: time.Minute, MaxBytes: 1 << 20}, db)
	objs.Put(eventsV1GVR.GroupResource(), old, nil)
	g.Expect(objs.LastCommit().Wait()).To(Succeed())
	g.Expect(db.Close()).To(Succeed())
	// That version's keys named the resource in full: the object goes under its key of then.
	raw, err := bolt.Open(dir+"/"+storage.FileName, 0o600, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(raw.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("ns/c"))
		var keys [][]byte
		_ = b.ForEach(func(k, _ []byte) error {
			if strings.HasSuffix(string(k), "default/e") {
				keys = append(keys, bytes.Clone(k))
			}
			return nil
		})
		g.Expect(keys).To(HaveLen(1))
		v := bytes.Clone(b.Get(keys[0]))
		g.Expect(b.Delete(keys[0])).To(Succeed())
		return b.Put([]byte(oldKey), v)
	})).To(Succeed())
	g.Expect(raw.Close()).To(Succeed())

	for range 2 { // the move is itself durable
		m, closeDB = durableManager(t, dir)
		c, err := m.AddCluster("ns/c", ClusterOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		core, err := c.Get(coreEventsGVR, "default", "e")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(core.(*corev1.Event).Message).To(Equal("kept apart once"))
		g.Expect(core.(*corev1.Event).UID).To(BeEquivalentTo("u-e"))
		view, err := c.Get(eventsV1GVR, "default", "e")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(view.(*eventsv1.Event).Note).To(Equal("kept apart once"))
		// A write waits for everything queued before it, the move included.
		mustCreate(t, c, configMap("default", "sync", nil))
		_, _ = c.Delete(corev1.SchemeGroupVersion.WithResource("configmaps"), "default", "sync", DeleteOptions{})
		closeDB()
	}
	raw, err = bolt.Open(dir+"/"+storage.FileName, 0o600, nil)
	g.Expect(err).NotTo(HaveOccurred())
	defer raw.Close()
	g.Expect(raw.View(func(tx *bolt.Tx) error {
		g.Expect(tx.Bucket([]byte("ns/c")).Get([]byte(oldKey))).To(BeNil(), "the old key is gone")
		return nil
	})).To(Succeed())
}
