package portforward_test

import (
	"fmt"
	"runtime"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/streaming/pkg/httpstream"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/portforward"
)

// BenchmarkSPDYConnectionMemory measures the heap an open SPDY port-forward connection holds, with
// one forwarded stream pair as KCP's etcd client keeps: client and server side together, since
// both live in this process (each side has a zlib header compressor and decompressor). It
// reports in-use heap bytes per connection after a GC.
func BenchmarkSPDYConnectionMemory(b *testing.B) {
	echo := newEchoServer(b)
	e := newEnv(b, portforward.Options{DisableWebSockets: true})
	e.addPod("default", "echo", corev1.PodRunning, map[int32]string{8080: echo.addr()})
	const conns = 40 // the echo server records at most 100 closed connections
	var ms runtime.MemStats
	for b.Loop() {
		runtime.GC()
		runtime.ReadMemStats(&ms)
		before := ms.HeapInuse
		open := make([]httpstream.Connection, 0, conns)
		for i := range conns {
			conn, _, err := e.spdyDialer("default", "echo").Dial(portforward.ProtocolV1)
			if err != nil {
				b.Fatal(err)
			}
			_, data := openPair(b, conn, 8080, fmt.Sprint(i))
			if _, err := data.Write([]byte("ping")); err != nil {
				b.Fatal(err)
			}
			buf := make([]byte, 4)
			if _, err := data.Read(buf); err != nil {
				b.Fatal(err)
			}
			open = append(open, conn)
		}
		runtime.GC()
		runtime.ReadMemStats(&ms)
		b.ReportMetric(float64(ms.HeapInuse-before)/conns, "heap-B/conn")
		for _, c := range open {
			_ = c.Close()
		}
	}
}
