package store

import (
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/storage"
)

// bookmarkInterval is how often a watch that allows bookmarks gets one (upstream: about a minute).
var bookmarkInterval = time.Minute

// watchBatch bounds how many history events a watcher takes per pass.
const watchBatch = 256

// Watcher delivers the cluster's events of one kind to one client.
//
// Writers never block on it: they only append to the cluster's bounded history and wake the
// watcher, which reads the history at its own pace. A watcher that falls so far behind that the
// history no longer holds its next event is ended, as the real API server ends slow watchers;
// the client then resumes from its last resourceVersion or relists.
//
// It is read in one of two ways, not both: Next, called by the consumer's own goroutine (the
// HTTP handler: no goroutine of the store per watch), or ResultChan, the watch.Interface way,
// for which a goroutine feeds the channel from Next.
type Watcher struct {
	c *Cluster
	b *servedResource
	// view, when set, is the resource the client watches: events are converted to it (views.go).
	view    *servedResource
	gr      schema.GroupResource
	ns      string
	sel     selection
	cursor  uint64          // every event up to this RV has been handled
	initial []client.Object // objects to send as synthetic ADDED events first
	// initialEnd: send the "k8s.io/initial-events-end" bookmark after the initial events.
	initialEnd bool
	pending    []*storage.Event // history events read but not yet handled

	timer       *time.Timer  // nil: no timeoutSeconds
	ticker      *time.Ticker // nil: no bookmarks
	bookmarkDue bool
	ended       bool // Next returned false

	wakeCh      chan struct{} // capacity 1: a pending "history grew" signal
	out         chan watch.Event
	done        chan struct{}
	stopOnce    sync.Once
	startOnce   sync.Once
	releaseOnce sync.Once
}

func (w *Watcher) wake() {
	select {
	case w.wakeCh <- struct{}{}:
	default:
	}
}

// Stop ends the watch: Next returns false and ResultChan, if used, is closed shortly after.
func (w *Watcher) Stop() {
	w.stopLocked()
	w.release()
}

// stopLocked ends the watch without touching the cluster's watcher set; callers hold c.mu.
func (w *Watcher) stopLocked() { w.stopOnce.Do(func() { close(w.done) }) }

// release forgets the watcher in its cluster and stops its timers. It is idempotent.
func (w *Watcher) release() {
	w.releaseOnce.Do(func() {
		w.c.mu.Lock()
		delete(w.c.watchers, w)
		if len(w.c.watchers) == 0 {
			w.c.watchers = nil // an idle cluster keeps no watcher map
		}
		w.c.mu.Unlock()
		if w.timer != nil {
			w.timer.Stop()
		}
		if w.ticker != nil {
			w.ticker.Stop()
		}
	})
}

// ResultChan delivers the events; the first call starts the goroutine that feeds it.
func (w *Watcher) ResultChan() <-chan watch.Event {
	w.startOnce.Do(func() { go w.run() })
	return w.out
}

// Watch streams changes of a kind, filtered by namespace and selectors. Without a
// resourceVersion (or with "0") it first sends the current objects as ADDED events; with
// sendInitialEvents=true it does so and then, if bookmarks are allowed, a BOOKMARK annotated
// "k8s.io/initial-events-end"; with a resourceVersion it resumes after it, or answers 410 Gone
// when the history no longer reaches back that far.
func (c *Cluster) Watch(gvr schema.GroupVersionResource, namespace string, opts ListOptions) (*Watcher, error) {
	w, commit, err := c.watch(gvr, namespace, opts)
	if err != nil {
		return nil, err
	}
	if !c.settled(commit) { // its initial state held changes that were undone: start again
		w.Stop()
		return c.Watch(gvr, namespace, opts)
	}
	return w, nil
}

// watch starts a Watch and returns the last write queued when it took its initial state.
func (c *Cluster) watch(gvr schema.GroupVersionResource, namespace string, opts ListOptions) (_ *Watcher, commit storage.Commit, err error) {
	b, err := c.lookup(gvr)
	if err != nil {
		return nil, commit, err
	}
	if b.storedAs != nil {
		w, err := c.watchView(b, namespace, opts)
		return w, storage.Commit{}, err // settled by the stored resource's Watch
	}
	if !b.info.Namespaced {
		namespace = ""
	}
	if err := validateListOptions(opts, true); err != nil {
		return nil, commit, err
	}
	c.beforeRead(gvr.GroupResource(), namespace)
	sel, err := b.selectors(opts)
	if err != nil {
		return nil, commit, err
	}
	var rv uint64
	if opts.ResourceVersion != "" && opts.ResourceVersion != "0" {
		if rv, err = parseRV(opts.ResourceVersion); err != nil {
			return nil, commit, err
		}
	}
	initialEvents := opts.SendInitialEvents != nil && *opts.SendInitialEvents
	if initialEvents && rv != 0 {
		// The initial state must be at least rv: wait for it a little, as the watch cache does
		// (a plain watch from a future rv just waits for the changes after it).
		if err := c.waitFresh(rv); err != nil {
			return nil, commit, err
		}
	}
	w := &Watcher{
		c: c, b: b, gr: gvr.GroupResource(), ns: namespace, sel: sel,
		wakeCh: make(chan struct{}, 1),
		out:    make(chan watch.Event),
		done:   make(chan struct{}),
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, commit, apierrors.NewServiceUnavailable("cluster " + c.name + " is being deleted")
	}
	withInitial := false
	switch {
	case initialEvents:
		withInitial, w.initialEnd = true, opts.AllowWatchBookmarks
	case opts.SendInitialEvents == nil && rv == 0:
		withInitial = true // legacy: "" and "0" start with the current state
	}
	if withInitial || rv == 0 {
		w.cursor = c.objs.ResourceVersion()
	} else {
		if !c.objs.Covers(w.gr, rv) {
			return nil, commit, tooOldRV(rv, c.objs.OldestCovered(w.gr))
		}
		w.cursor = rv
	}
	if withInitial {
		m := c.objs.Resource(w.gr)
		for _, k := range storage.Keys(m, namespace) {
			w.initial = append(w.initial, m[k].Object())
		}
	}
	if opts.TimeoutSeconds != nil && *opts.TimeoutSeconds > 0 {
		w.timer = time.NewTimer(time.Duration(*opts.TimeoutSeconds) * time.Second)
	}
	if opts.AllowWatchBookmarks {
		w.ticker = time.NewTicker(bookmarkInterval)
	}
	if c.watchers == nil {
		c.watchers = map[*Watcher]struct{}{}
	}
	c.watchers[w] = struct{}{}
	return w, c.objs.LastCommit(), nil
}

// run feeds ResultChan from Next.
func (w *Watcher) run() {
	defer close(w.out)
	defer w.release()
	for {
		ev, ok := w.Next(nil)
		if !ok {
			return
		}
		select {
		case w.out <- ev:
		case <-w.done:
			return
		case <-w.timeoutC():
			return
		}
	}
}

func (w *Watcher) timeoutC() <-chan time.Time {
	if w.timer == nil {
		return nil
	}
	return w.timer.C
}

// Next returns the watch's next event, waiting for one. It returns false once the watch has
// ended: stopped, timed out, its cluster deleted, fallen behind the history, or cancel closed
// (cancel may be nil). Only one goroutine may call it, and not alongside ResultChan.
func (w *Watcher) Next(cancel <-chan struct{}) (watch.Event, bool) {
	if w.ended {
		return watch.Event{}, false
	}
	ev, ok := w.next(cancel)
	if !ok {
		w.ended = true
		w.release()
		return ev, ok
	}
	if w.view != nil && ev.Type != watch.Error {
		// The event's object is this watcher's own copy, so the view may share it.
		v, err := w.view.toView(ev.Object)
		if err != nil {
			return watch.Event{Type: watch.Error, Object: &apierrors.NewInternalError(err).ErrStatus}, true
		}
		ev.Object = v
	}
	return ev, ok
}

func (w *Watcher) next(cancel <-chan struct{}) (watch.Event, bool) {
	select {
	case <-w.done:
		return watch.Event{}, false
	case <-w.timeoutC():
		return watch.Event{}, false
	case <-cancel:
		return watch.Event{}, false
	default:
	}
	for {
		if ev, ok, ready := w.poll(); ready {
			return ev, ok
		}
		if !w.wait(cancel) {
			return watch.Event{}, false
		}
	}
}

// poll returns the next event when one is ready (ready: ok false when the watch ended), or
// ready false when the watcher has caught up and must wait for a change.
func (w *Watcher) poll() (ev watch.Event, ok, ready bool) {
	for len(w.initial) > 0 {
		obj := w.initial[0]
		w.initial[0], w.initial = nil, w.initial[1:]
		if w.sel.matches(w.b, obj) {
			return watch.Event{Type: watch.Added, Object: obj.DeepCopyObject()}, true, true
		}
	}
	w.initial = nil
	if w.initialEnd {
		w.initialEnd = false
		return w.bookmark(true), true, true
	}
	for {
		for len(w.pending) > 0 {
			e := w.pending[0]
			w.pending[0], w.pending = nil, w.pending[1:]
			w.cursor = e.RV
			if e.GroupResource() == w.gr {
				if ev, ok := w.convert(e); ok {
					return ev, true, true
				}
			}
		}
		w.pending = nil
		w.c.mu.RLock()
		closed := w.c.closed
		evs, ok := w.c.objs.Since(w.gr, w.cursor, watchBatch)
		commit := w.c.objs.LastCommit()
		w.c.mu.RUnlock()
		if closed || !ok {
			return watch.Event{}, false, true // cluster gone, or this watcher fell behind the history
		}
		if len(evs) > 0 {
			// Only changes on disk are delivered; undone ones are gone when it reads again.
			if w.c.settled(commit) {
				w.pending = evs
			}
			continue
		}
		// Caught up: every event up to the cursor was handled, so a bookmark may carry it.
		if w.bookmarkDue {
			w.bookmarkDue = false
			return w.bookmark(false), true, true
		}
		return watch.Event{}, false, false
	}
}

// wait waits for a change, the bookmark tick, or the watch's end (false). It is a function of
// its own, and next a small one, so that an idle watch's goroutine waits on a small stack.
func (w *Watcher) wait(cancel <-chan struct{}) bool {
	var tick <-chan time.Time
	if w.ticker != nil {
		tick = w.ticker.C
	}
	select {
	case <-w.wakeCh:
	case <-tick:
		w.bookmarkDue = true
	case <-w.done:
		return false
	case <-w.timeoutC():
		return false
	case <-cancel:
		return false
	}
	return true
}

// convert turns a history event into what this watcher's client sees. An object that stops
// matching the selectors is reported DELETED, one that starts matching ADDED, as the real
// watch cache does.
func (w *Watcher) convert(e *storage.Event) (watch.Event, bool) {
	obj := e.Obj.Object()
	if w.ns != "" && obj.GetNamespace() != w.ns {
		return watch.Event{}, false
	}
	switch e.Type {
	case watch.Added, watch.Deleted:
		if w.sel.matches(w.b, obj) {
			return watch.Event{Type: e.Type, Object: obj.DeepCopyObject()}, true
		}
	case watch.Modified:
		prev := e.Old.Object()
		now, before := w.sel.matches(w.b, obj), w.sel.matches(w.b, prev)
		switch {
		case now && before:
			return watch.Event{Type: watch.Modified, Object: obj.DeepCopyObject()}, true
		case now:
			return watch.Event{Type: watch.Added, Object: obj.DeepCopyObject()}, true
		case before:
			// The previous state, stamped with the RV of the change that made it leave.
			old := prev.DeepCopyObject().(client.Object)
			old.SetResourceVersion(formatRV(e.RV))
			return watch.Event{Type: watch.Deleted, Object: old}, true
		}
	}
	return watch.Event{}, false
}

func (w *Watcher) bookmark(initialEnd bool) watch.Event {
	obj := w.b.newObject()
	obj.GetObjectKind().SetGroupVersionKind(w.b.info.GVK())
	obj.SetResourceVersion(formatRV(w.cursor))
	if initialEnd {
		obj.SetAnnotations(map[string]string{metav1.InitialEventsAnnotationKey: "true"})
	}
	return watch.Event{Type: watch.Bookmark, Object: obj}
}
