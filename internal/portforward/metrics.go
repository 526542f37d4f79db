package portforward

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Label values are fixed sets: no pod, namespace or cluster labels, so the
// series count stays bounded however many clusters one process simulates.
const (
	protocolSPDY      = "spdy"
	protocolWebSocket = "websocket" // SPDY tunneled through a WebSocket
	protocolChannels  = "websocket-channels"

	resultForwarded  = "forwarded"
	resultRejected   = "rejected"    // Lookup refused the pod or port
	resultDialFailed = "dial_failed" // Dial failed
	resultTimeout    = "timeout"     // the pair's second stream never came
	resultLimited    = "limited"     // refused at Options.MaxStreams
)

var (
	activeStreams = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "goofy_portforward_active_streams",
		Help: "Port-forward data streams currently connected to a simulated pod, by transport.",
	}, []string{"protocol"})
	streamsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "goofy_portforward_streams_total",
		Help: "Port-forward stream requests, by transport and result.",
	}, []string{"protocol", "result"})
)

func init() {
	metrics.Registry.MustRegister(activeStreams, streamsTotal)
}
