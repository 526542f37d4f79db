package storage

import "github.com/prometheus/client_golang/prometheus"

var (
	commitsDesc = prometheus.NewDesc("goofy_state_commits_total",
		"Transactions committed to the state file (bbolt syncs the file twice for each).", nil, nil)
	writesDesc = prometheus.NewDesc("goofy_state_writes_total",
		"Writes (object puts and deletions) committed to the state file.", nil, nil)
	bytesDesc = prometheus.NewDesc("goofy_state_written_bytes_total",
		"Bytes of values committed to the state file.", nil, nil)
)

// Collector exports a DB's Stats as Prometheus counters: writes per commit tell how well the
// group commit batches the fleet's writes.
type Collector struct{ DB *DB }

// Describe implements prometheus.Collector.
func (c Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- commitsDesc
	ch <- writesDesc
	ch <- bytesDesc
}

// Collect implements prometheus.Collector.
func (c Collector) Collect(ch chan<- prometheus.Metric) {
	s := c.DB.Stats()
	ch <- prometheus.MustNewConstMetric(commitsDesc, prometheus.CounterValue, float64(s.Batches))
	ch <- prometheus.MustNewConstMetric(writesDesc, prometheus.CounterValue, float64(s.Writes))
	ch <- prometheus.MustNewConstMetric(bytesDesc, prometheus.CounterValue, float64(s.Bytes))
}
