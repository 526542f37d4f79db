package mux

import (
	"fmt"
	"math"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/authentication/user"
	genericfilters "k8s.io/apiserver/pkg/endpoints/filters"
	"k8s.io/apiserver/pkg/endpoints/request"
	serverfilters "k8s.io/apiserver/pkg/server/filters"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/apiserver"
)

// Limits bound what the clients of one workload cluster's listener can hold of the process
// (docs/limits.md). Zero (or less) turns a limit off.
type Limits struct {
	// MaxConnectionsPerListener bounds the open connections of one listener with a verified
	// client certificate that is not system:masters (nor an etcd client's); connections without
	// a client certificate get a quarter of it, counted apart, and as many may be in their TLS
	// handshake at once (listenerConns). system:masters and etcd clients, port-forward tunnels
	// to etcd included, are not limited.
	MaxConnectionsPerListener int
	// MaxRequestsInFlight and MaxMutatingRequestsInFlight are kube-apiserver's
	// --max-requests-inflight and --max-mutating-requests-inflight, per workload cluster: past
	// them a request is answered 429 with Retry-After, except for system:masters and for
	// long-running requests (watch, port-forward, exec, attach, log, proxy), as upstream.
	MaxRequestsInFlight         int
	MaxMutatingRequestsInFlight int
	// RequestTimeout is kube-apiserver's --request-timeout: a request that is not long-running
	// is answered 504 after it (or after its own shorter ?timeout=).
	RequestTimeout time.Duration
	// MaxWatchesPerCluster bounds the open watches of one workload cluster; one more is
	// answered 429 with Retry-After. system:masters is exempt and not counted, as upstream's
	// API Priority and Fairness exempts it.
	MaxWatchesPerCluster int
	// WatchWriteTimeout ends a watch whose event could not be written for that long: its
	// client stopped reading.
	WatchWriteTimeout time.Duration
	// MaxPortForwardStreams bounds the forwarded streams of one port-forward connection (each
	// one is a connection back into the listener).
	MaxPortForwardStreams int
	// MaxConnections bounds the connections open at once across all the mux's listeners (one
	// process serves them all, and each connection is one of its open files), whoever their
	// clients: system:masters, etcd clients and port-forward tunnels count too. A connection
	// past it waits up to connectionWait for a place, before its TLS handshake, then is closed.
	// Unlike the other limits, zero (the default) does not turn it off but sizes it from the open
	// file limit (RLIMIT_NOFILE): that limit less one file per serving listener and
	// reservedFiles for the rest of the process (connectionCap); less than zero turns it off.
	MaxConnections int
}

// DefaultLimits are sized for a workload cluster used by CAPI's controllers and a few people
// (docs/limits.md says why each is what it is). They bound what one listener's clients may hold
// and allocate nothing ahead: an idle listener costs none of them, so they hold for 10,000
// listeners as for 1,000; what bounds a process of many listeners is its open files (FilesFor).
func DefaultLimits() Limits {
	return Limits{
		MaxConnectionsPerListener:   256,
		MaxRequestsInFlight:         100,
		MaxMutatingRequestsInFlight: 50,
		RequestTimeout:              60 * time.Second,
		MaxWatchesPerCluster:        100,
		WatchWriteTimeout:           10 * time.Second,
		MaxPortForwardStreams:       32,
	}
}

// reservedFiles are the open files MaxConnections' default leaves to all but the listeners and
// their connections: the management cluster's client and watches, the state file, the webhook,
// metrics and probe servers (the 1,024 of FilesFor).
const reservedFiles = 1024

// connectionWait is how long a connection waits for a place under MaxConnections before it is
// closed. A variable for tests.
var connectionWait = time.Second

// maxConnectionWaiters bounds the connections waiting for a place at once (each holds its
// file meanwhile): past it, a connection is closed at once.
const maxConnectionWaiters = 64

// connectionCap is the mux's process-wide bound on open connections (Limits.MaxConnections): a
// counting semaphore every accepted connection takes a place of until it is closed.
type connectionCap struct {
	open, waiting atomic.Int64
	limit         func() int64 // places in all; 0 or less: none left

	mu    sync.Mutex
	freed chan struct{} // closed, and replaced, when a place is freed while connections wait
}

// newConnectionCap returns the bound of Limits.MaxConnections max (nil: none): max, or for 0
// files (the open file limit) less one per serving listener (listeners) and reservedFiles.
func newConnectionCap(max int, files uint64, listeners *atomic.Int64) *connectionCap {
	switch {
	case max < 0, max == 0 && (files == 0 || files > math.MaxInt32):
		return nil
	case max > 0:
		n := int64(max)
		return &connectionCap{limit: func() int64 { return n }, freed: make(chan struct{})}
	}
	return &connectionCap{limit: func() int64 { return int64(files) - listeners.Load() - reservedFiles }, freed: make(chan struct{})}
}

// tryAcquire takes a place if one is free.
func (c *connectionCap) tryAcquire() bool {
	limit := c.limit()
	for {
		n := c.open.Load()
		if n >= limit {
			return false
		}
		if c.open.CompareAndSwap(n, n+1) {
			connectionsOpen.Inc()
			return true
		}
	}
}

// acquire takes a place, waiting up to wait (or until done is closed) for one, unless
// maxConnectionWaiters are waiting already.
func (c *connectionCap) acquire(wait time.Duration, done <-chan struct{}) bool {
	if c.tryAcquire() {
		return true
	}
	if c.waiting.Add(1) > maxConnectionWaiters {
		c.waiting.Add(-1)
		return false
	}
	defer c.waiting.Add(-1)
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		c.mu.Lock()
		freed := c.freed
		c.mu.Unlock()
		if c.tryAcquire() {
			return true
		}
		select {
		case <-freed:
		case <-timer.C:
			return false
		case <-done:
			return false
		}
	}
}

// release frees a place, and wakes the connections waiting for one.
func (c *connectionCap) release() {
	c.open.Add(-1)
	connectionsOpen.Dec()
	if c.waiting.Load() > 0 {
		c.mu.Lock()
		close(c.freed)
		c.freed = make(chan struct{})
		c.mu.Unlock()
	}
}

// FilesPerCluster is how many open files a serving workload cluster takes in steady state: its
// listener, the connection of CAPI's cluster cache (its watches and reads share one HTTP/2
// connection), and one more for a health check's port-forward tunnel or another client.
const FilesPerCluster = 3

// FilesFor is the open file limit (RLIMIT_NOFILE) a process serving clusters workload clusters
// needs: FilesPerCluster each, and 1,024 for the rest (the management cluster's client, its
// watches, the state file, the webhook and metrics servers).
func FilesFor(clusters int) uint64 { return uint64(clusters)*FilesPerCluster + 1024 }

// WithLimits sets the listeners' limits (default: DefaultLimits).
func WithLimits(l Limits) Option { return func(m *WorkloadClustersMux) { m.limits = l } }

// longRunning is kube-apiserver's LongRunningFunc: watches and the streaming subresources are
// exempt from max-in-flight and from the request timeout.
var longRunning = serverfilters.BasicLongRunningRequestCheck(sets.NewString("watch", "proxy"),
	sets.NewString("attach", "exec", "proxy", "log", "portforward"))

// withLimits wraps the API server's handler in the request limits, in kube-apiserver's order:
// the watch limit and max-in-flight first (they answer at once), then the request's deadline
// and, around the handler, the timeout filter. The faults come between the two: their latency
// counts against the deadline, and they answer the 504 themselves when it passes while they
// wait, so the handler the timeout filter runs in its own goroutine is only the API server's.
//
// Long-running requests (watches, port-forward, proxy) go around max-in-flight, the deadline and
// the timeout filter, which would pass them through as kube-apiserver's do: an open watch's
// goroutine then waits on a stack without their frames, small enough for the runtime to keep at
// 8 KiB (see apiserver's watchStream).
func (l *WorkloadClusterListener) withLimits(faults func(http.Handler) http.Handler, api http.Handler) http.Handler {
	timeout := l.mux.limits.RequestTimeout
	api = withTestHook(api)
	limited := l.limitInFlight(withRequestDeadline(faults(withTimeout(api, timeout)), timeout))
	streaming := faults(api)
	return l.limitWatches(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if info, ok := request.RequestInfoFrom(r.Context()); ok && longRunning(r, info) {
			streaming.ServeHTTP(w, r)
			return
		}
		limited.ServeHTTP(w, r)
	}))
}

// testHookServing, when set, runs for every request just before the API server's handler
// (tests hold requests in flight with it).
var testHookServing atomic.Pointer[func(*http.Request)]

func withTestHook(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hook := testHookServing.Load(); hook != nil {
			(*hook)(r)
		}
		next.ServeHTTP(w, r)
	})
}

// limitWatches answers a watch past MaxWatchesPerCluster with 429, and hands the others the
// watch write timeout. system:masters' watches are neither limited nor counted: upstream's APF
// puts them in its exempt priority level.
func (l *WorkloadClusterListener) limitWatches(next http.Handler) http.Handler {
	lim := l.mux.limits
	if lim.MaxWatchesPerCluster <= 0 && lim.WatchWriteTimeout <= 0 {
		return next
	}
	writeLimit := apiserver.WatchWriteLimit{Timeout: lim.WatchWriteTimeout, Exceeded: func() { refused(reasonWatchWriteTimeout) }}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		info, ok := request.RequestInfoFrom(r.Context())
		if !ok || info.Verb != "watch" {
			next.ServeHTTP(w, r)
			return
		}
		if lim.MaxWatchesPerCluster > 0 && !isPrivileged(r) {
			if l.watches.Add(1) > int64(lim.MaxWatchesPerCluster) {
				l.watches.Add(-1)
				refused(reasonWatches)
				tooMany(w, fmt.Sprintf("Too many watches on this cluster (at most %d), please try again later.", lim.MaxWatchesPerCluster))
				return
			}
			defer l.watches.Add(-1)
		}
		if lim.WatchWriteTimeout > 0 {
			r = r.WithContext(apiserver.WithWatchWriteLimit(r.Context(), writeLimit))
		}
		next.ServeHTTP(w, r)
	})
}

// isPrivileged reports whether r's user is in system:masters.
func isPrivileged(r *http.Request) bool {
	u, ok := request.UserFrom(r.Context())
	return ok && slices.Contains(u.GetGroups(), user.SystemPrivilegedGroup)
}

// tooMany answers 429 with Retry-After, as kube-apiserver's limits do.
func tooMany(w http.ResponseWriter, msg string) {
	err := apierrors.NewTooManyRequests(msg, 1)
	w.Header().Set("Retry-After", "1")
	writeStatus(w, &err.ErrStatus)
}

// limitInFlight is kube-apiserver's max-in-flight filter (WithMaxInFlightLimit) over this
// listener's own counters, counting its refusals.
func (l *WorkloadClusterListener) limitInFlight(next http.Handler) http.Handler {
	lim := l.mux.limits
	if lim.MaxRequestsInFlight <= 0 && lim.MaxMutatingRequestsInFlight <= 0 {
		return next
	}
	admit := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := w.(*admission)
		a.admitted = true
		next.ServeHTTP(a.ResponseWriter, r)
	})
	limited := serverfilters.WithMaxInFlightLimit(admit, max(lim.MaxRequestsInFlight, 0), max(lim.MaxMutatingRequestsInFlight, 0), longRunning)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := &admission{ResponseWriter: w}
		limited.ServeHTTP(a, r)
		if a.admitted {
			return
		}
		// The filter answered 429 itself.
		if info, ok := request.RequestInfoFrom(r.Context()); ok && (info.Verb == "get" || info.Verb == "list" || info.Verb == "watch") {
			refused(reasonInflightReadOnly)
		} else {
			refused(reasonInflightMutating)
		}
	})
}

// admission tells limitInFlight whether the filter let the request through.
type admission struct {
	http.ResponseWriter
	admitted bool
}

// withRequestDeadline is kube-apiserver's request deadline (WithRequestDeadline): a request
// that is not long-running must be done by the lesser of timeout and its own ?timeout=.
func withRequestDeadline(next http.Handler, timeout time.Duration) http.Handler {
	if timeout <= 0 {
		return next
	}
	return genericfilters.WithRequestDeadline(next, nil, nil, longRunning, clientgoscheme.Codecs, timeout)
}

// withTimeout is kube-apiserver's timeout filter (WithTimeoutForNonLongRunningRequests): once the
// request's deadline passes, 504, whatever the handler is still doing. Its refusals are counted.
//
// Reads (get, list, and GETs of discovery and OpenAPI) skip the filter: the simulated API server
// answers them from memory, waiting on nothing but the cluster's lock, whose holds are bounded
// (docs/state.md), so the deadline alone bounds them, and an injected latency, which waits
// before the handler, answers the 504 itself. The filter runs every request in a goroutine of
// its own and hands the response over: that tripled a GET's cost through the listener's chain
// (BenchmarkListenerGET, 8 to 24 µs). Writes wait on the disk (durable state) and keep it.
func withTimeout(next http.Handler, timeout time.Duration) http.Handler {
	if timeout <= 0 {
		return next
	}
	return serverfilters.WithTimeout(next, func(r *http.Request) (*http.Request, bool, func(), *apierrors.StatusError) {
		info, ok := request.RequestInfoFrom(r.Context())
		if !ok || longRunning(r, info) || info.Verb == "get" || info.Verb == "list" {
			return r, true, nil, nil
		}
		return r, false, func() { refused(reasonRequestTimeout) },
			apierrors.NewTimeoutError("request did not complete within the allotted timeout", 0)
	})
}
