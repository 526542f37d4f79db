package spdyconn_test

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"runtime"
	"testing"

	"github.com/moby/spdystream/spdy"
	"k8s.io/streaming/pkg/httpstream"
	k8sspdy "k8s.io/streaming/pkg/httpstream/spdy"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/portforward/spdyconn"
)

// The server side allocates no flate compressor per connection: spdystream's costs
// ~814 KB on the first SYN_REPLY. The same measurement of k8s.io/streaming's server
// connection shows the test can see it.
func TestNoHeaderCompressorPerConnection(t *testing.T) {
	if raceDetector {
		t.Skip("the race detector changes what allocates")
	}
	// The client's SYN_STREAM is the same bytes on every fresh connection: encode it
	// once, outside the measurement, and read the replies without decompressing.
	var syn bytes.Buffer
	f, err := spdy.NewFramer(&syn, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.WriteFrame(synStream(1, 0)); err != nil {
		t.Fatal(err)
	}
	ours := allocatedPerConnection(t, syn.Bytes(), func(c net.Conn) io.Closer {
		return spdyconn.NewServer(c, httpstream.NoOpNewStreamHandler)
	})
	theirs := allocatedPerConnection(t, syn.Bytes(), func(c net.Conn) io.Closer {
		conn, err := k8sspdy.NewServerConnection(c, httpstream.NoOpNewStreamHandler)
		if err != nil {
			t.Fatal(err)
		}
		return conn
	})
	t.Logf("allocated per connection: ours %d B, k8s.io/streaming's %d B", ours, theirs)
	if ours > 256<<10 {
		t.Errorf("our server connection allocates %d B per connection, want < 256 KiB", ours)
	}
	if theirs < 700<<10 {
		t.Errorf("k8s.io/streaming's server connection allocates %d B per connection: the measurement no longer sees its compressor", theirs)
	}
}

// allocatedPerConnection is the bytes allocated, on average, by a server connection
// that accepts one stream, replies and closes.
func allocatedPerConnection(t *testing.T, syn []byte, serve func(net.Conn) io.Closer) uint64 {
	t.Helper()
	const conns = 20
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range conns {
		cc, sc := net.Pipe()
		server := serve(sc)
		if _, err := cc.Write(syn); err != nil {
			t.Fatal(err)
		}
		var hdr [8]byte // SYN_REPLY: control header, then its length's worth
		if _, err := io.ReadFull(cc, hdr[:]); err != nil {
			t.Fatal(err)
		}
		if _, err := io.CopyN(io.Discard, cc, int64(binary.BigEndian.Uint32(hdr[4:])&0xffffff)); err != nil {
			t.Fatal(err)
		}
		drained := make(chan struct{})
		go func() {
			defer close(drained)
			_, _ = io.Copy(io.Discard, cc) // RST_STREAM and GOAWAY, until the server closed its end
		}()
		_ = server.Close()
		<-drained
		_ = cc.Close()
	}
	runtime.ReadMemStats(&after)
	return (after.TotalAlloc - before.TotalAlloc) / conns
}
