package store

import (
	"sort"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// event is one change of one object. Events and the objects they point at are immutable once
// recorded, so watchers and snapshot readers use them without holding the cluster lock.
type event struct {
	typ watch.EventType // Added, Modified or Deleted
	rv  uint64
	gr  schema.GroupResource
	key string
	obj client.Object // state after the change; for Deleted the last state stamped with the deletion RV
	old client.Object // state before the change; nil for Added
}

// history is the cluster's bounded event log: a ring that grows lazily up to limit entries, so an
// idle cluster only pays for the few events it has seen. It serves watch resume, paginated
// snapshots and watch delivery.
type history struct {
	buf     []*event
	start   int    // index of the oldest event once the ring is full
	limit   int    // maximum retained events
	evicted uint64 // RV of the newest event dropped from the ring (0: none dropped)
}

func (h *history) len() int { return len(h.buf) }

// at returns the i-th oldest retained event.
func (h *history) at(i int) *event { return h.buf[(h.start+i)%len(h.buf)] }

func (h *history) add(e *event) {
	if len(h.buf) < h.limit {
		h.buf = append(h.buf, e)
		return
	}
	h.evicted = h.buf[h.start].rv
	h.buf[h.start] = e
	h.start = (h.start + 1) % len(h.buf)
}

// covers reports whether every event after rv is still retained.
func (h *history) covers(rv uint64) bool { return rv >= h.evicted }

// since returns up to max retained events with RV > rv (max <= 0: all), and false when some of
// them were already dropped.
func (h *history) since(rv uint64, max int) ([]*event, bool) {
	if !h.covers(rv) {
		return nil, false
	}
	n := h.len()
	i := sort.Search(n, func(i int) bool { return h.at(i).rv > rv })
	count := n - i
	if max > 0 && count > max {
		count = max
	}
	if count == 0 {
		return nil, true
	}
	out := make([]*event, count)
	for j := range out {
		out[j] = h.at(i + j)
	}
	return out, true
}
