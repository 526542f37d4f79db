package store

import (
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// bookmarkInterval is how often a watch that allows bookmarks gets one (upstream: about a minute).
var bookmarkInterval = time.Minute

// watchBatch bounds how many history events a watcher takes per pass.
const watchBatch = 256

// watcher delivers the cluster's events of one kind to one client.
//
// Writers never block on it: they only append to the cluster's bounded history and wake the
// watcher, which reads the history at its own pace. A watcher that falls so far behind that the
// history no longer holds its next event is ended (its channel closed), as the real API server
// ends slow watchers; the client then resumes from its last resourceVersion or relists.
type watcher struct {
	c       *Cluster
	b       *kindBehavior
	gr      schema.GroupResource
	ns      string
	sel     selection
	cursor  uint64          // every event up to this RV has been handled
	initial []client.Object // objects to send as synthetic ADDED events first
	// initialEnd: send the "k8s.io/initial-events-end" bookmark after the initial events.
	initialEnd bool
	bookmarks  bool
	timeout    time.Duration

	wakeCh   chan struct{} // capacity 1: a pending "history grew" signal
	out      chan watch.Event
	done     chan struct{}
	stopOnce sync.Once
}

func (w *watcher) wake() {
	select {
	case w.wakeCh <- struct{}{}:
	default:
	}
}

// Stop ends the watch; ResultChan is closed shortly after.
func (w *watcher) Stop() { w.stopOnce.Do(func() { close(w.done) }) }

// ResultChan delivers the events.
func (w *watcher) ResultChan() <-chan watch.Event { return w.out }

// Watch streams changes of a kind, filtered by namespace and selectors. Without a
// resourceVersion (or with "0") it first sends the current objects as ADDED events; with
// sendInitialEvents=true it does so and then, if bookmarks are allowed, a BOOKMARK annotated
// "k8s.io/initial-events-end"; with a resourceVersion it resumes after it, or answers 410 Gone
// when the history no longer reaches back that far.
func (c *Cluster) Watch(gvr schema.GroupVersionResource, namespace string, opts ListOptions) (watch.Interface, error) {
	b, err := lookup(gvr)
	if err != nil {
		return nil, err
	}
	if !b.info.Namespaced {
		namespace = ""
	}
	if err := validateListOptions(opts, true); err != nil {
		return nil, err
	}
	sel, err := b.selectors(opts)
	if err != nil {
		return nil, err
	}
	var rv uint64
	if opts.ResourceVersion != "" && opts.ResourceVersion != "0" {
		if rv, err = parseRV(opts.ResourceVersion); err != nil {
			return nil, err
		}
	}
	w := &watcher{
		c: c, b: b, gr: gvr.GroupResource(), ns: namespace, sel: sel,
		bookmarks: opts.AllowWatchBookmarks,
		wakeCh:    make(chan struct{}, 1),
		out:       make(chan watch.Event),
		done:      make(chan struct{}),
	}
	if opts.TimeoutSeconds != nil && *opts.TimeoutSeconds > 0 {
		w.timeout = time.Duration(*opts.TimeoutSeconds) * time.Second
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, apierrors.NewServiceUnavailable("cluster " + c.name + " is being deleted")
	}
	withInitial := false
	switch {
	case opts.SendInitialEvents != nil && *opts.SendInitialEvents:
		if rv > c.rv {
			return nil, tooLargeRV(rv, c.rv)
		}
		withInitial, w.initialEnd = true, opts.AllowWatchBookmarks
	case opts.SendInitialEvents == nil && rv == 0:
		withInitial = true // legacy: "" and "0" start with the current state
	}
	if withInitial || rv == 0 {
		w.cursor = c.rv
	} else {
		if !c.hist.covers(w.gr, rv) {
			return nil, tooOldRV(rv, c.hist.evicted[w.gr])
		}
		w.cursor = rv
	}
	if withInitial {
		m := c.objects[w.gr]
		for _, k := range namespacedKeys(m, namespace) {
			w.initial = append(w.initial, m[k])
		}
	}
	if c.watchers == nil {
		c.watchers = map[*watcher]struct{}{}
	}
	c.watchers[w] = struct{}{}
	go w.run()
	return w, nil
}

func (w *watcher) run() {
	defer func() {
		w.c.mu.Lock()
		delete(w.c.watchers, w)
		if len(w.c.watchers) == 0 {
			w.c.watchers = nil // an idle cluster keeps no watcher map
		}
		w.c.mu.Unlock()
		close(w.out)
	}()
	var timeout <-chan time.Time
	if w.timeout > 0 {
		t := time.NewTimer(w.timeout)
		defer t.Stop()
		timeout = t.C
	}
	send := func(ev watch.Event) bool {
		select {
		case w.out <- ev:
			return true
		case <-w.done:
		case <-timeout:
		}
		return false
	}

	for _, obj := range w.initial {
		if w.sel.matches(w.b, obj) && !send(watch.Event{Type: watch.Added, Object: obj.DeepCopyObject()}) {
			return
		}
	}
	w.initial = nil
	if w.initialEnd && !send(w.bookmark(true)) {
		return
	}

	var tick <-chan time.Time
	if w.bookmarks {
		t := time.NewTicker(bookmarkInterval)
		defer t.Stop()
		tick = t.C
	}
	bookmarkDue := false
	for {
		w.c.mu.RLock()
		closed := w.c.closed
		evs, ok := w.c.hist.since(w.gr, w.cursor, watchBatch)
		w.c.mu.RUnlock()
		if closed || !ok {
			return // cluster gone, or this watcher fell behind the history: end the watch
		}
		for _, e := range evs {
			if e.gr == w.gr {
				if ev, ok := w.convert(e); ok && !send(ev) {
					return
				}
			}
			w.cursor = e.rv
		}
		if len(evs) > 0 {
			continue
		}
		// Caught up: every event up to the cursor was handled, so a bookmark may carry it.
		if bookmarkDue {
			bookmarkDue = false
			if !send(w.bookmark(false)) {
				return
			}
		}
		select {
		case <-w.wakeCh:
		case <-tick:
			bookmarkDue = true
		case <-w.done:
			return
		case <-timeout:
			return
		}
	}
}

// convert turns a history event into what this watcher's client sees. An object that stops
// matching the selectors is reported DELETED, one that starts matching ADDED, as the real
// watch cache does.
func (w *watcher) convert(e *event) (watch.Event, bool) {
	if w.ns != "" && e.obj.GetNamespace() != w.ns {
		return watch.Event{}, false
	}
	switch e.typ {
	case watch.Added, watch.Deleted:
		if w.sel.matches(w.b, e.obj) {
			return watch.Event{Type: e.typ, Object: e.obj.DeepCopyObject()}, true
		}
	case watch.Modified:
		now, before := w.sel.matches(w.b, e.obj), w.sel.matches(w.b, e.old)
		switch {
		case now && before:
			return watch.Event{Type: watch.Modified, Object: e.obj.DeepCopyObject()}, true
		case now:
			return watch.Event{Type: watch.Added, Object: e.obj.DeepCopyObject()}, true
		case before:
			// The previous state, stamped with the RV of the change that made it leave.
			old := e.old.DeepCopyObject().(client.Object)
			old.SetResourceVersion(formatRV(e.rv))
			return watch.Event{Type: watch.Deleted, Object: old}, true
		}
	}
	return watch.Event{}, false
}

func (w *watcher) bookmark(initialEnd bool) watch.Event {
	obj := w.b.newObject()
	obj.GetObjectKind().SetGroupVersionKind(w.b.info.GVK())
	obj.SetResourceVersion(formatRV(w.cursor))
	if initialEnd {
		obj.SetAnnotations(map[string]string{metav1.InitialEventsAnnotationKey: "true"})
	}
	return watch.Event{Type: watch.Bookmark, Object: obj}
}
