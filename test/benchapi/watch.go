package benchapi

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// watchLoad is the watch fan-out: every watcher watches the ConfigMaps of WatchNamespace, from
// the resourceVersion of a fresh list as an informer does, while every writer merge-patches its
// own ConfigMap as fast as it is answered. A window lasts from the first write until every
// watcher has seen every write of the window (or drain has passed); its count is the events
// delivered, watchers × writes.
type watchLoad struct {
	ws      []*watcher
	writers []kubernetes.Interface
	drain   time.Duration
	writes  atomic.Int64
	cancel  context.CancelFunc
	close   func()
}

// watcher counts the MODIFIED events of WatchNamespace's ConfigMaps one watch receives.
type watcher struct {
	seen  atomic.Int64
	mu    sync.Mutex
	since time.Time       // start of the current window
	lat   []time.Duration // write sent → event received, for writes sent since then
	last  time.Time       // when the latest event arrived
}

func newWatchLoad(ctx context.Context, watchers, writers []kubernetes.Interface, drain time.Duration) (*watchLoad, error) {
	ctx, cancel := context.WithCancel(ctx) // the watches stay open until Close
	l := &watchLoad{writers: writers, drain: drain, cancel: cancel}
	for i, cs := range watchers {
		wi, err := startWatch(ctx, cs)
		if err != nil {
			cancel()
			return nil, fmt.Errorf("watcher %d: %w", i, err)
		}
		w := &watcher{}
		l.ws = append(l.ws, w)
		go w.run(wi)
	}
	return l, nil
}

func (l *watchLoad) Close() { l.cancel(); l.close() }

// Run writes for d, then waits for the watchers to catch up.
func (l *watchLoad) Run(ctx context.Context, d time.Duration) (Window, error) {
	before := l.writes.Load()
	start := time.Now()
	baseline := make([]int64, len(l.ws))
	for i, w := range l.ws {
		w.mu.Lock()
		w.lat, w.since, w.last = w.lat[:0], start, start
		baseline[i] = w.seen.Load()
		w.mu.Unlock()
	}
	err := l.write(ctx, start.Add(d))
	win := Window{Writes: l.writes.Load() - before, WriteSeconds: time.Since(start).Seconds()}
	win.FirstError = caughtUp(l.ws, baseline, win.Writes, l.drain)
	end := start
	for i, w := range l.ws {
		w.mu.Lock()
		seen := w.seen.Load() - baseline[i]
		win.Count += min(seen, win.Writes)
		win.Errors += max(0, win.Writes-seen)
		win.Lat = append(win.Lat, w.lat...)
		if w.last.After(end) {
			end = w.last
		}
		w.mu.Unlock()
	}
	win.Seconds = end.Sub(start).Seconds()
	return win, err
}

// write patches from every writer until the deadline; each write carries its send time.
func (l *watchLoad) write(ctx context.Context, until time.Time) error {
	var wg sync.WaitGroup
	errs := make([]error, len(l.writers))
	for i, cs := range l.writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := WatchObjectName(i % WatchObjects)
			for time.Now().Before(until) {
				patch := `{"data":{"t":"` + strconv.FormatInt(time.Now().UnixNano(), 10) + `"}}`
				_, err := cs.CoreV1().ConfigMaps(WatchNamespace).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
				if err != nil {
					errs[i] = fmt.Errorf("writer %d: %w", i, err)
					return
				}
				l.writes.Add(1)
			}
		}()
	}
	wg.Wait()
	return firstErr(errs...)
}

// startWatch lists WatchNamespace's ConfigMaps and watches them from that list's
// resourceVersion.
func startWatch(ctx context.Context, cs kubernetes.Interface) (watch.Interface, error) {
	l, err := cs.CoreV1().ConfigMaps(WatchNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	return cs.CoreV1().ConfigMaps(WatchNamespace).Watch(ctx, metav1.ListOptions{ResourceVersion: l.ResourceVersion})
}

func (w *watcher) run(wi watch.Interface) {
	defer wi.Stop()
	for ev := range wi.ResultChan() {
		cm, ok := ev.Object.(*corev1.ConfigMap)
		// CAPD's in-memory watch also sends the events of other namespaces and a bookmark.
		if !ok || ev.Type != watch.Modified || cm.Namespace != WatchNamespace {
			continue
		}
		now := time.Now()
		w.mu.Lock()
		if sent, err := strconv.ParseInt(cm.Data["t"], 10, 64); err == nil && sent >= w.since.UnixNano() {
			w.lat = append(w.lat, now.Sub(time.Unix(0, sent)))
		}
		w.last = now
		w.seen.Add(1)
		w.mu.Unlock()
	}
}

// caughtUp waits until every watcher has seen n events past its baseline, for at most drain; it
// describes the first watcher that has not.
func caughtUp(ws []*watcher, baseline []int64, n int64, drain time.Duration) string {
	deadline := time.Now().Add(drain)
	for i, w := range ws {
		for w.seen.Load()-baseline[i] < n {
			if time.Now().After(deadline) {
				return fmt.Sprintf("watcher %d saw %d of %d events within %s", i, w.seen.Load()-baseline[i], n, drain)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return ""
}
