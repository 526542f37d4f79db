package storage

import (
	"slices"
	"sort"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
)

// Event is one change of one object. Events and the objects they point at are immutable once
// recorded, so watchers and snapshot readers use them without holding the owner's lock.
type Event struct {
	Type watch.EventType // Added, Modified or Deleted
	RV   uint64
	At   int64                 // unix nanoseconds when recorded
	gr   *schema.GroupResource // the process's one copy (resourceOf): a history holds many events
	Key  string
	Obj  Value // state after the change; for Deleted the last state stamped with the deletion RV
	Old  Value // state before the change; the zero Value for Added
	// Size is what retaining the event keeps alive: Obj's size (Old's for Deleted, whose Obj
	// differs from Old only in its resourceVersion).
	Size int
}

// GroupResource is the resource of the object that changed.
func (e *Event) GroupResource() schema.GroupResource { return *e.gr }

// resources holds one copy of each resource's name for the events of every cluster: an event
// pointing at it is 96 bytes, not 128 (a fleet's histories hold a few hundred thousand events
// while its clusters are set up).
var resources sync.Map // schema.GroupResource -> *schema.GroupResource

func resourceOf(gr schema.GroupResource) *schema.GroupResource {
	if p, ok := resources.Load(gr); ok {
		return p.(*schema.GroupResource)
	}
	p, _ := resources.LoadOrStore(gr, &gr)
	return p.(*schema.GroupResource)
}

// history is the cluster's bounded event log: a ring that grows lazily up to limit entries and
// drops events older than ttl, so an idle cluster only pays for the few events it has
// seen. It serves watch resume, watch delivery and paginated snapshots.
type history struct {
	buf   []*Event
	head  int // index of the oldest event
	n     int // number of retained events
	limit int
	ttl   time.Duration
	// bytes is the size of the retained events; maxBytes bounds it, so a few large objects
	// written often cannot pin many of their versions (the newest event is always kept).
	bytes, maxBytes int
	// evicted records, per kind, the RV of the newest dropped event: reading that kind's changes
	// after an older RV is no longer possible. One entry per kind that ever dropped an event (a
	// few dozen at most), searched in turn: a map of them took 1.7 KiB in every cluster.
	evicted []evictedRV
	// floor is the resourceVersion the store started at: changes before it are unknown.
	floor uint64
}

type evictedRV struct {
	gr *schema.GroupResource // resourceOf's
	rv uint64
}

// evictedBefore is the RV of gr's newest dropped event, 0 if none was dropped.
func (h *history) evictedBefore(gr schema.GroupResource) uint64 {
	for _, e := range h.evicted {
		if *e.gr == gr {
			return e.rv
		}
	}
	return 0
}

// at returns the i-th oldest retained event.
func (h *history) at(i int) *Event { return h.buf[(h.head+i)%len(h.buf)] }

// add appends e, first dropping the events that expired, handing each to dropped.
func (h *history) add(e *Event, dropped func(*Event)) {
	h.expire(e.At, dropped)
	if h.n == len(h.buf) {
		if len(h.buf) < h.limit {
			h.grow()
		} else {
			h.dropOldest()
		}
	}
	h.buf[(h.head+h.n)%len(h.buf)] = e
	h.n++
	h.bytes += e.Size
	for h.bytes > h.maxBytes && h.n > 1 {
		h.dropOldest()
	}
}

// expire drops events older than the ttl at time now (unix nanoseconds), handing each to
// dropped, and gives back the ring's memory once it is mostly empty.
func (h *history) expire(now int64, dropped func(*Event)) {
	for h.n > 0 && now-h.at(0).At > int64(h.ttl) {
		e := h.at(0)
		h.dropOldest()
		dropped(e)
	}
	if h.n == 0 {
		h.buf, h.head = nil, 0
	} else if h.n < len(h.buf)/4 {
		buf := make([]*Event, 2*h.n)
		for i := 0; i < h.n; i++ {
			buf[i] = h.at(i)
		}
		h.buf, h.head = buf, 0
	}
}

// oldest returns when the oldest retained event was recorded, and false if there is none.
func (h *history) oldest() (int64, bool) {
	if h.n == 0 {
		return 0, false
	}
	return h.at(0).At, true
}

func (h *history) grow() {
	size := 2 * len(h.buf)
	if size < 4 {
		size = 4
	}
	if size > h.limit {
		size = h.limit
	}
	buf := make([]*Event, size)
	for i := 0; i < h.n; i++ {
		buf[i] = h.at(i)
	}
	h.buf, h.head = buf, 0
}

func (h *history) dropOldest() {
	e := h.at(0)
	if i := slices.IndexFunc(h.evicted, func(ev evictedRV) bool { return *ev.gr == *e.gr }); i >= 0 {
		h.evicted[i].rv = e.RV
	} else {
		h.evicted = append(h.evicted, evictedRV{gr: e.gr, rv: e.RV})
	}
	h.bytes -= e.Size
	h.buf[h.head] = nil // let the old object versions go
	h.head = (h.head + 1) % len(h.buf)
	h.n--
}

// dropNewest forgets e if it is the newest retained event (a change undone after its commit
// failed; see Objects.Rollback).
func (h *history) dropNewest(e *Event) {
	if h.n == 0 {
		return
	}
	i := (h.head + h.n - 1) % len(h.buf)
	if h.buf[i] != e {
		return
	}
	h.bytes -= e.Size
	h.buf[i] = nil
	h.n--
}

// covers reports whether every change of the kind after rv is still retained.
func (h *history) covers(gr schema.GroupResource, rv uint64) bool {
	return rv >= h.floor && rv >= h.evictedBefore(gr)
}

// oldestCovered is the oldest resourceVersion of the kind whose later changes are all retained.
func (h *history) oldestCovered(gr schema.GroupResource) uint64 {
	return max(h.floor, h.evictedBefore(gr))
}

// since returns up to max retained events (of all kinds) with RV > rv (max <= 0: all), and false
// when a change of kind gr after rv was already dropped.
func (h *history) since(gr schema.GroupResource, rv uint64, max int) ([]*Event, bool) {
	if !h.covers(gr, rv) {
		return nil, false
	}
	i := sort.Search(h.n, func(i int) bool { return h.at(i).RV > rv })
	count := h.n - i
	if max > 0 && count > max {
		count = max
	}
	if count == 0 {
		return nil, true
	}
	out := make([]*Event, count)
	for j := range out {
		out[j] = h.at(i + j)
	}
	return out, true
}

// Since returns up to max retained events (of all resources) with resourceVersions after rv
// (max <= 0: all), and false when a change of gr after rv is no longer retained.
func (o *Objects) Since(gr schema.GroupResource, rv uint64, max int) ([]*Event, bool) {
	return o.hist.since(gr, rv, max)
}

// Covers reports whether every change of gr after rv is still retained.
func (o *Objects) Covers(gr schema.GroupResource, rv uint64) bool { return o.hist.covers(gr, rv) }

// OldestCovered is the oldest resourceVersion of gr whose later changes are all retained.
func (o *Objects) OldestCovered(gr schema.GroupResource) uint64 { return o.hist.oldestCovered(gr) }

// ExpireEvents drops the events older than the history's TTL at now (unix nanoseconds) and
// returns when the next one expires, false if none is left: an idle cluster keeps no old
// object versions alive and needs no timer.
func (o *Objects) ExpireEvents(now int64) (time.Time, bool) {
	o.settle() // nor does the log of unsettled changes keep the last writes' objects alive
	o.hist.expire(now, o.expired)
	return o.NextExpiry()
}

// NextExpiry is when the oldest retained event outlives the TTL, false if there is none.
func (o *Objects) NextExpiry() (time.Time, bool) {
	at, ok := o.hist.oldest()
	if !ok {
		return time.Time{}, false
	}
	return time.Unix(0, at+int64(o.hist.ttl)), true
}

// RetainedEvents is the number of retained events, the SizeOf what they keep alive, and the
// capacity of the ring that holds them.
func (o *Objects) RetainedEvents() (n, bytes, capacity int) {
	return o.hist.n, o.hist.bytes, len(o.hist.buf)
}
