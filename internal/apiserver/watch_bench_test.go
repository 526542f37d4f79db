package apiserver

import (
	"bytes"
	"context"
	"net/http"
	"runtime"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// heapAfterGC returns the live heap.
func heapAfterGC() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkWatchIdleMemory measures the heap an idle HTTP watch keeps after it has streamed
// one large (~100 KB) event: 100 watches get a small event, then the large one, and the live
// heap grown in between is reported per watch. The client side reads into a fixed buffer, so
// what grows is the server's per-watch state (and the one stored object, shared by all). It
// also reports the goroutines each open watch adds to the process.
func BenchmarkWatchIdleMemory(b *testing.B) {
	const watches = 100
	cl := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: watches, DisableCompression: true}}
	var perWatch, goroutines float64
	for i := 0; i < b.N; i++ {
		env := newTestEnv(b, Options{})
		idle := runtime.NumGoroutine()
		sc := env.cluster.Client()
		ctx, cancel := context.WithCancel(context.Background())
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "big"}}
		if err := sc.Create(ctx, cm); err != nil {
			b.Fatal(err)
		}
		events := make(chan struct{}, 2*watches)
		done := make(chan struct{}, watches)
		for w := 0; w < watches; w++ {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet,
				env.server.URL+"/api/v1/namespaces/default/configmaps?watch=1&resourceVersion="+cm.ResourceVersion, nil)
			req.Header.Set("Accept", "application/json")
			resp, err := cl.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			go func() {
				defer func() { resp.Body.Close(); done <- struct{}{} }()
				buf := make([]byte, 4096)
				for {
					n, err := resp.Body.Read(buf)
					for j := bytes.IndexByte(buf[:n], '\n'); j >= 0; j = bytes.IndexByte(buf[:n], '\n') {
						events <- struct{}{}
						buf2 := buf[j+1 : n]
						n = copy(buf, buf2)
					}
					if err != nil {
						return
					}
				}
			}()
		}
		update := func(size int) {
			cm.Data = map[string]string{"v": strings.Repeat("x", size)}
			if err := sc.Update(ctx, cm); err != nil {
				b.Fatal(err)
			}
			for w := 0; w < watches; w++ {
				<-events
			}
		}
		update(10)
		goroutines = float64(runtime.NumGoroutine()-idle) / watches
		before := heapAfterGC()
		update(100 << 10)
		after := heapAfterGC()
		perWatch = (float64(after) - float64(before)) / watches
		cancel()
		for w := 0; w < watches; w++ {
			<-done
		}
		env.server.CloseClientConnections()
	}
	b.ReportMetric(perWatch, "B/watch-retained")
	// Client side included: the reader and the transport's two connection loops are 3 of them.
	b.ReportMetric(goroutines, "goroutines/watch")
}
