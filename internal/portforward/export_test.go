package portforward

import "github.com/prometheus/client_golang/prometheus"

// Test-only access to the metrics.
func StreamsTotal() *prometheus.CounterVec { return streamsTotal }
func ActiveStreams() *prometheus.GaugeVec  { return activeStreams }
