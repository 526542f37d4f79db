package storage

import (
	"reflect"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Settled versions move to fresh memory. A stored version is allocated while it is written, among
// the short-lived objects of its request and of the versions before it (a pod is created, bound,
// then started within a second), which the watch history keeps for its TTL and then drops
// together. Once they are gone the version is alone in heap spans that are otherwise empty: the
// Go runtime cannot move it, so each such version held several times its size (a fleet of
// Running pods kept three bytes of heap for each live byte). When the history drops the event
// that wrote the version still stored, nothing but the map of objects (and the owner's caches)
// holds it any more, and it is copied once, its top-level struct (the bulk of a Pod) into a
// page beside the other versions moved at the same time (pages.go); its fields are shared, so
// the copy costs at most one allocation. The version is the same (resourceVersion, content): no event,
// no disk write.

// Relocation is a stored version moved to fresh memory: New is Old's copy, the same version.
// Whoever keeps Old (an informer's cache) should keep New instead, or Old's memory stays held.
type Relocation struct {
	GR       schema.GroupResource
	Key      string
	Old, New client.Object
}

// OnRelocate makes f hear of every stored version moved to fresh memory, as it moves: while the
// owner's lock is held for writing, in the order of the events dropped.
func (o *Objects) OnRelocate(f func(Relocation)) { o.relocated = f }

// expired is called with each event the history drops once its TTL is over.
func (o *Objects) expired(e *Event) {
	if r, ok := o.relocate(e); ok && o.relocated != nil {
		o.relocated(r)
	}
}

// relocate moves the version e wrote to fresh memory if it is still the stored one and nothing
// else of the store's holds it: not a reference to shared content (already small), not a change
// whose commit is still unconfirmed (a rollback puts back what its event holds).
func (o *Objects) relocate(e *Event) (Relocation, bool) {
	if e.Type == watch.Deleted {
		return Relocation{}, false
	}
	gr := e.GroupResource()
	cur := o.objects[gr][e.Key]
	old, ok := cur.x.(client.Object)
	if !ok || e.Obj.x != cur.x {
		return Relocation{}, false
	}
	if len(o.unsettled) > 0 && e.RV >= o.unsettled[0].ev.RV {
		return Relocation{}, false
	}
	rt := reflect.TypeOf(old)
	if rt.Kind() != reflect.Pointer || rt.Elem().Kind() != reflect.Struct {
		return Relocation{}, false
	}
	moved := relocatedCopy(old)
	v := fullValue(moved)
	o.objects[gr][e.Key] = v
	o.enc.relocated(objectRef{gr: gr, key: e.Key}, cur, v)
	return Relocation{GR: gr, Key: e.Key, Old: old, New: moved}, true
}

// relocated keeps the cached encodings of a version that moved: they encode the same object.
func (e *encodedCache) relocated(ref objectRef, from, to Value) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if ent := e.entries[ref]; ent != nil && ent.v == from {
		ent.v = to
	}
}
