package store

import (
	"fmt"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/storage"
)

// benchWrites creates ConfigMaps (1 KiB of data) in c from par goroutines and reports the
// latency percentiles of one write.
func benchWrites(b *testing.B, c *Cluster, par int) {
	data := map[string]string{"k": string(make([]byte, 1024))}
	var next atomic.Int64
	lat := make([]time.Duration, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	b.SetParallelism(par)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := next.Add(1) - 1
			start := time.Now()
			if _, err := c.Create(configMapsGVR, "default", configMap("default", fmt.Sprintf("cm-%d", i), data), CreateOptions{FieldManager: "bench"}); err != nil {
				b.Error(err)
				return
			}
			lat[i] = time.Since(start)
		}
	})
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

// BenchmarkWrite compares a create in a memory-only store with one that is on disk before it
// returns, for one writer and for 16 concurrent writers (p = 8 per core on 2 cores), whose
// writes share commits.
func BenchmarkWrite(b *testing.B) {
	for _, durable := range []bool{false, true} {
		for _, par := range []int{1, 8} {
			b.Run(fmt.Sprintf("durable=%v/writers=%dxGOMAXPROCS", durable, par), func(b *testing.B) {
				m := NewManager()
				if durable {
					db, err := storage.Open(b.TempDir())
					if err != nil {
						b.Fatal(err)
					}
					defer db.Close()
					m = NewManager(WithStorage(db))
				}
				c, err := m.AddCluster("bench", ClusterOptions{EventHistory: 1024, StorageQuota: -1})
				if err != nil {
					b.Fatal(err)
				}
				benchWrites(b, c, par)
			})
		}
	}
}
