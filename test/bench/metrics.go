package bench

import (
	"bytes"
	"io"
	"os"
	"sort"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// ControllerStats summarise a provider's controller-runtime metrics at the end of a run: how many
// reconciles each controller ran, how long they took and how long items waited in the queues.
type ControllerStats struct {
	// Reconciles by controller name.
	Reconciles map[string]float64 `json:"reconciles"`
	// ReconcileSeconds is the total time spent in Reconcile, by controller.
	ReconcileSeconds map[string]float64 `json:"reconcileSeconds"`
	// QueueWaitSeconds is the mean time an item waited in the work queue, by controller.
	QueueWaitSeconds map[string]float64 `json:"queueWaitMeanSeconds"`
	// ThrottledRequests counts client-go's "Waited ... due to client-side throttling" log lines:
	// requests the provider's own QPS limit delayed by more than a second (read from its log).
	ThrottledRequests int `json:"throttledRequests"`
}

// ParseControllerStats reads a Prometheus text exposition of a controller-runtime manager.
func ParseControllerStats(r io.Reader) (ControllerStats, error) {
	st := ControllerStats{Reconciles: map[string]float64{}, ReconcileSeconds: map[string]float64{}, QueueWaitSeconds: map[string]float64{}}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return st, err
	}
	label := func(m *dto.Metric, name string) string {
		for _, l := range m.GetLabel() {
			if l.GetName() == name {
				return l.GetValue()
			}
		}
		return ""
	}
	if f := fams["controller_runtime_reconcile_total"]; f != nil {
		for _, m := range f.GetMetric() {
			st.Reconciles[label(m, "controller")] += m.GetCounter().GetValue()
		}
	}
	if f := fams["controller_runtime_reconcile_time_seconds"]; f != nil {
		for _, m := range f.GetMetric() {
			st.ReconcileSeconds[label(m, "controller")] += m.GetHistogram().GetSampleSum()
		}
	}
	if f := fams["workqueue_queue_duration_seconds"]; f != nil {
		for _, m := range f.GetMetric() {
			if h := m.GetHistogram(); h.GetSampleCount() > 0 {
				st.QueueWaitSeconds[label(m, "name")] = h.GetSampleSum() / float64(h.GetSampleCount())
			}
		}
	}
	return st, nil
}

// parseControllerStatsFile is ParseControllerStats on a saved /metrics page, with the throttling
// lines counted in the provider's log.
func parseControllerStatsFile(path, logFile string) (ControllerStats, error) {
	f, err := os.Open(path)
	if err != nil {
		return ControllerStats{}, err
	}
	defer f.Close()
	st, err := ParseControllerStats(f)
	if err != nil {
		return st, err
	}
	if data, err := os.ReadFile(logFile); err == nil {
		st.ThrottledRequests = bytes.Count(data, []byte("due to client-side throttling"))
	}
	return st, nil
}

func sortedNames(m map[string]float64) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
