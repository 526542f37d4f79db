package mux

import (
	"bufio"
	"io"
	"log"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/endpoints/request"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Metrics of the workload cluster listeners, in controller-runtime's registry (served on the
// manager's metrics endpoint). Labels never carry cluster names, so cardinality stays bounded.
var (
	listenersOpen = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "goofy_mux_listeners_open",
		Help: "Workload cluster listeners currently serving.",
	})
	requestsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "goofy_mux_requests_total",
		Help: "API requests served by workload cluster listeners, by verb, resource and HTTP code.",
	}, []string{"verb", "resource", "code"})
	requestDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "goofy_mux_request_duration_seconds",
		Help:    "Latency of API requests served by workload cluster listeners (watches excluded).",
		Buckets: []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5},
	}, []string{"verb"})
	connectionsOpen = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "goofy_mux_connections_open",
		Help: "Connections open on workload cluster listeners, counted against --workload-max-connections (the process-wide bound).",
	})
	watchesActive = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "goofy_mux_watches_active",
		Help: "Watch requests currently open on workload cluster listeners.",
	})
	refusedTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "goofy_mux_refused_total",
		Help: "Connections, requests and streams the workload cluster listeners refused or ended at a limit (docs/limits.md), by reason.",
	}, []string{"reason"})
)

// The reasons of goofy_mux_refused_total, one per limit.
const (
	reasonConnections          = "connections"           // --workload-max-connections-per-listener
	reasonAnonymousConnections = "anonymous_connections" // a quarter of it, for connections without a client certificate
	reasonHandshakes           = "handshakes"            // as many in their TLS handshake: the oldest is closed
	reasonHandshakeTimeout     = "handshake_timeout"     // handshakeTimeout
	reasonInflightReadOnly     = "inflight_readonly"     // --workload-max-requests-inflight
	reasonInflightMutating     = "inflight_mutating"     // --workload-max-mutating-requests-inflight
	reasonRequestTimeout       = "request_timeout"       // --workload-request-timeout
	reasonWatches              = "watches"               // --workload-max-watches-per-cluster
	reasonWatchWriteTimeout    = "watch_write_timeout"   // --workload-watch-write-timeout
	reasonPortForwardStreams   = "port_forward_streams"  // --workload-max-port-forward-streams
	reasonProcessConnections   = "process_connections"   // --workload-max-connections, across all listeners
)

func refused(reason string) { refusedTotal.WithLabelValues(reason).Inc() }

func init() {
	metrics.Registry.MustRegister(listenersOpen, connectionsOpen, requestsTotal, requestDuration, watchesActive, refusedTotal)
	for _, r := range []string{reasonConnections, reasonAnonymousConnections, reasonHandshakes, reasonHandshakeTimeout,
		reasonInflightReadOnly, reasonInflightMutating, reasonRequestTimeout, reasonWatches, reasonWatchWriteTimeout, reasonPortForwardStreams,
		reasonProcessConnections} {
		refusedTotal.WithLabelValues(r) // every series from the start, at 0
	}
}

var discardLog = log.New(io.Discard, "", 0)

var requestInfoFactory = &request.RequestInfoFactory{
	APIPrefixes:          sets.NewString("api", "apis"),
	GrouplessAPIPrefixes: sets.NewString("api"),
}

// knownResources bounds the resource label: anything else is counted as "other".
var knownResources = sets.New("pods", "nodes", "namespaces", "configmaps", "secrets", "services", "endpoints",
	"events", "serviceaccounts", "deployments", "daemonsets", "replicasets", "statefulsets", "leases",
	"clusterroles", "clusterrolebindings", "roles", "rolebindings", "poddisruptionbudgets", "volumeattachments",
	"endpointslices", "customresourcedefinitions", "persistentvolumes", "persistentvolumeclaims", "storageclasses")

type statusRecorder struct {
	http.ResponseWriter
	code           int
	verb, resource string // the metrics' labels
	start          time.Time
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.code == 0 {
		s.code = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.code == 0 {
		s.code = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusRecorder) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Hijack hands the connection to an upgrade (port-forward over SPDY: its upgrader asserts
// http.Hijacker rather than asking http.ResponseController).
func (s *statusRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return http.NewResponseController(s.ResponseWriter).Hijack()
}

// Unwrap lets http.ResponseController reach the connection (hijack for port-forward upgrades).
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// instrument counts requests and records latency. It runs behind withRequestInfo.
func instrument(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w, start: time.Now()}
		rec.verb, rec.resource = metricLabels(r)
		if rec.verb == "watch" {
			watchesActive.Inc()
			defer watchesActive.Dec()
		}
		next.ServeHTTP(rec, r)
		rec.record() // in a function of its own: this frame stays on every open watch's stack
	})
}

// metricLabels are the verb and resource labels of the request's metrics.
func metricLabels(r *http.Request) (verb, resource string) {
	info, ok := request.RequestInfoFrom(r.Context())
	switch {
	case !ok:
		return "other", "other"
	case !info.IsResourceRequest:
		return "nonresource", "nonresource"
	case !knownResources.Has(info.Resource):
		return info.Verb, "other"
	case info.Subresource != "":
		return info.Verb, info.Resource + "/" + info.Subresource
	}
	return info.Verb, info.Resource
}

// record counts the finished request and its latency.
func (s *statusRecorder) record() {
	if s.code == 0 {
		s.code = http.StatusOK // hijacked (upgrades) or nothing written
	}
	requestsTotal.WithLabelValues(s.verb, s.resource, strconv.Itoa(s.code)).Inc()
	if s.verb != "watch" {
		requestDuration.WithLabelValues(s.verb).Observe(time.Since(s.start).Seconds())
	}
}
