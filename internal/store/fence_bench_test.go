package store

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/storage"
)

// BenchmarkGetDuringDurableWrites reads one ConfigMap while another goroutine creates ConfigMaps
// in the same durable cluster without pause: what a read costs while writes wait for the disk.
func BenchmarkGetDuringDurableWrites(b *testing.B) {
	db, err := storage.Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	c, err := NewManager(WithStorage(db)).AddCluster("bench", ClusterOptions{StorageQuota: -1})
	if err != nil {
		b.Fatal(err)
	}
	mustCreate(b, c, configMap("default", "read", map[string]string{"k": "v"}))
	var stop atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; !stop.Load(); i++ {
			_, _ = c.Create(configMapsGVR, "default", configMap("default", fmt.Sprintf("w-%d", i), nil), CreateOptions{})
		}
	}()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := c.Get(configMapsGVR, "default", "read"); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	stop.Store(true)
	<-done
}
