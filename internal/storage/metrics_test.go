package storage

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestCollectorExportsStats: through a Prometheus registry, the counters follow the committer's:
// three writes waited for one by one are three commits; a deletion is a write too.
func TestCollectorExportsStats(t *testing.T) {
	g := NewWithT(t)
	db, err := Open(t.TempDir())
	g.Expect(err).NotTo(HaveOccurred())
	defer db.Close()
	reg := prometheus.NewPedanticRegistry()
	g.Expect(reg.Register(Collector{DB: db})).To(Succeed())

	g.Expect(db.Put("c", "/k/1", 1, value("one")).Wait()).To(Succeed())
	g.Expect(db.Put("c", "/k/2", 2, value("two")).Wait()).To(Succeed())
	g.Expect(db.Delete("c", "/k/1", 3).Wait()).To(Succeed())

	g.Expect(testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP goofy_state_commits_total Transactions committed to the state file (bbolt syncs the file twice for each).
# TYPE goofy_state_commits_total counter
goofy_state_commits_total 3
# HELP goofy_state_writes_total Writes (object puts and deletions) committed to the state file.
# TYPE goofy_state_writes_total counter
goofy_state_writes_total 3
`), "goofy_state_commits_total", "goofy_state_writes_total")).To(Succeed())
	families, err := reg.Gather()
	g.Expect(err).NotTo(HaveOccurred())
	var written float64
	for _, f := range families {
		if f.GetName() == "goofy_state_written_bytes_total" {
			written = f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	g.Expect(written).To(BeNumerically(">=", len("one")+len("two")))
}
