package simulate

import (
	"context"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// eventTTL is kube-apiserver's --event-ttl: an Event (core or events.k8s.io, one collection) is
// deleted EventTTL after it was last written, as etcd's lease on it ends. The store keeps events
// until deleted, so this is what bounds the memory the scheduler's and other clients' events
// take. It runs in every cluster; an event costs it one timer until it goes.
type eventTTL struct {
	c   *cluster
	idx int
}

var eventsGR = schema.GroupResource{Resource: "events"}

// DefaultEventTTL is kube-apiserver's default --event-ttl.
const DefaultEventTTL = time.Hour

func newEventTTL(c *cluster, idx int) *eventTTL { return &eventTTL{c: c, idx: idx} }

func (e *eventTTL) resources() []schema.GroupResource { return []schema.GroupResource{eventsGR} }

func (e *eventTTL) uncached() {}

func (e *eventTTL) observe(ch store.Change) {
	if ch.New == nil {
		return
	}
	e.c.after(e.c.opts.EventTTL-time.Since(lastWritten(ch.New)), e.idx, ch.Key)
}

// lastWritten is when an event was last recorded: the latest of its creation and its reported times.
func lastWritten(obj client.Object) time.Time {
	t := obj.GetCreationTimestamp().Time
	if ev, ok := obj.(*corev1.Event); ok {
		for _, u := range []time.Time{ev.LastTimestamp.Time, ev.EventTime.Time} {
			if u.After(t) {
				t = u
			}
		}
		if ev.Series != nil && ev.Series.LastObservedTime.After(t) {
			t = ev.Series.LastObservedTime.Time
		}
	}
	return t
}

func (e *eventTTL) sync(ctx context.Context, key string) error {
	ns, name, _ := strings.Cut(key, "/")
	ev := &corev1.Event{}
	if err := e.c.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, ev); err != nil {
		return err // gone already: nothing to do (not found is not retried)
	}
	if wait := e.c.opts.EventTTL - time.Since(lastWritten(ev)); wait > 0 {
		e.c.after(wait, e.idx, key) // written again since
		return nil
	}
	err := e.c.client.Delete(ctx, ev, client.Preconditions{UID: &ev.UID, ResourceVersion: &ev.ResourceVersion})
	if isGone(err) {
		return nil // gone or written again: that write armed its own timer
	}
	return err
}
