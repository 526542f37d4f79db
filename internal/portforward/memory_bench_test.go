package portforward_test

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"sync"
	"testing"

	"github.com/moby/spdystream/spdy"
	corev1 "k8s.io/api/core/v1"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/portforward"
)

// BenchmarkSPDYConnectionMemory measures the heap an open SPDY port-forward connection holds, with
// one forwarded stream pair as KCP's etcd client keeps. heap-B/conn is client-go's client and the
// server together, since both live in this process; server-heap-B/conn is the server side alone
// (with a TLS client of a few KB), its client a raw one that holds no zlib state. Both are in-use
// heap bytes per connection after a GC.
func BenchmarkSPDYConnectionMemory(b *testing.B) {
	echo := newEchoServer(b)
	e := newEnv(b, portforward.Options{DisableWebSockets: true})
	e.addPod("default", "echo", corev1.PodRunning, map[int32]string{8080: echo.addr()})
	clientGo := func(i int) io.Closer {
		conn, _, err := e.spdyDialer("default", "echo").Dial(portforward.ProtocolV1)
		if err != nil {
			b.Fatal(err)
		}
		_, data := openPair(b, conn, 8080, fmt.Sprint(i))
		if _, err := data.Write([]byte("ping")); err != nil {
			b.Fatal(err)
		}
		if _, err := data.Read(make([]byte, 4)); err != nil {
			b.Fatal(err)
		}
		return conn
	}
	raw := func(int) io.Closer { return dialRawSPDY(b, e) }
	for b.Loop() {
		b.ReportMetric(heapPerConnection(echo, clientGo), "heap-B/conn")
		b.ReportMetric(heapPerConnection(echo, raw), "server-heap-B/conn")
	}
}

// heapPerConnection opens connections with open, measures, closes them and waits until the pod
// side of each closed too (the echo server records only 100).
func heapPerConnection(echo *echoServer, open func(i int) io.Closer) float64 {
	const conns = 40
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	before := ms.HeapInuse
	opened := make([]io.Closer, 0, conns)
	for i := range conns {
		opened = append(opened, open(i))
	}
	runtime.GC()
	runtime.ReadMemStats(&ms)
	perConn := (float64(ms.HeapInuse) - float64(before)) / conns
	for _, c := range opened {
		_ = c.Close()
	}
	for range conns {
		<-echo.closed
	}
	return perConn
}

// rawPairFrames opens an error and a data stream for port 8080 and sends "ping" on the data
// stream. A fresh connection's zlib stream always encodes them the same, so they are encoded
// once: the raw client needs no compressor.
var rawPairFrames = sync.OnceValue(func() []byte {
	var buf bytes.Buffer
	f, err := spdy.NewFramer(&buf, nil)
	if err != nil {
		panic(err)
	}
	for _, frame := range []spdy.Frame{
		&spdy.SynStreamFrame{StreamId: 1, Headers: http.Header{
			corev1.StreamType: {corev1.StreamTypeError}, corev1.PortHeader: {"8080"}, corev1.PortForwardRequestIDHeader: {"0"}}},
		&spdy.SynStreamFrame{StreamId: 3, Headers: http.Header{
			corev1.StreamType: {corev1.StreamTypeData}, corev1.PortHeader: {"8080"}, corev1.PortForwardRequestIDHeader: {"0"}}},
		&spdy.DataFrame{StreamId: 3, Data: []byte("ping")},
	} {
		if err := f.WriteFrame(frame); err != nil {
			panic(err)
		}
	}
	return buf.Bytes()
})

// dialRawSPDY upgrades to SPDY/3.1 over TLS, opens a pair with rawPairFrames and waits for the
// echo, reading frames without decoding header blocks.
func dialRawSPDY(b *testing.B, e *env) io.Closer {
	roots := x509.NewCertPool()
	roots.AddCert(e.server.Certificate())
	conn, err := tls.Dial("tcp", e.server.Listener.Addr().String(), &tls.Config{RootCAs: roots, ServerName: "example.com", NextProtos: []string{"http/1.1"}})
	if err != nil {
		b.Fatal(err)
	}
	req := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: %s\r\nContent-Length: 0\r\n\r\n",
		e.url("default", "echo").Path, e.server.Listener.Addr(), portforward.ProtocolV1)
	if _, err := io.WriteString(conn, req); err != nil {
		b.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		b.Fatalf("upgrade: %v %v", resp, err)
	}
	if _, err := conn.Write(rawPairFrames()); err != nil {
		b.Fatal(err)
	}
	for echoed := 0; echoed < len("ping"); {
		var hdr [8]byte
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			b.Fatal(err)
		}
		length := int64(binary.BigEndian.Uint32(hdr[4:]) & 0xffffff)
		if hdr[0]&0x80 == 0 && binary.BigEndian.Uint32(hdr[:4]) == 3 {
			echoed += int(length)
		}
		if _, err := io.CopyN(io.Discard, br, length); err != nil {
			b.Fatal(err)
		}
	}
	return conn
}
