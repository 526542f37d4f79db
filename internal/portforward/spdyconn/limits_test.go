package spdyconn_test

import (
	"bytes"
	"compress/flate"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/moby/spdystream"
	"github.com/moby/spdystream/spdy"
	"k8s.io/streaming/pkg/httpstream"
	k8sspdy "k8s.io/streaming/pkg/httpstream/spdy"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/portforward/spdyconn"
)

// heapInUse is the heap in use after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// totalAlloc is the bytes allocated so far.
func totalAlloc() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.TotalAlloc
}

// growth is after-before, or 0 when the heap shrank.
func growth(before, after uint64) uint64 {
	if after < before {
		return 0
	}
	return after - before
}

// synStreamFrame is a SYN_STREAM for stream 1 around a compressed header block.
func synStreamFrame(block []byte) []byte {
	frame := []byte{0x80, 0x03, 0x00, 0x01, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(frame[4:], uint32(10+len(block))) // stream IDs, priority, slot
	return append(frame, block...)
}

// zlibBlock compresses a header block of n names and values made of units, each unit
// compressed once and repeated: a sync flush ends each on a byte boundary, and none
// refers to the data before it, so the repetitions inflate to n units without costing
// the test the time to compress them all. The server's zlib reader takes a stream
// without the SPDY dictionary (no FDICT) as well.
func zlibBlock(t *testing.T, n int, unit []byte) []byte {
	t.Helper()
	deflate := func(p []byte) []byte {
		var b bytes.Buffer
		w, err := flate.NewWriter(&b, flate.BestCompression)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = w.Write(p)
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	block := []byte{0x78, 0x01} // CMF, FLG: deflate, no dictionary
	block = append(block, deflate(binary.BigEndian.AppendUint32(nil, uint32(n)))...)
	compressed := deflate(unit)
	for range n {
		block = append(block, compressed...)
	}
	return block
}

// nameValue is one name/value pair of a header block.
func nameValue(name, value []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(len(name)))
	b = append(b, name...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(value)))
	return append(b, value...)
}

// expectClosedByServer waits until the server closed c: a read returns an error
// (EOF, or a reset for what it did not read).
func expectClosedByServer(t *testing.T, c net.Conn) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("the server did not close the connection")
	}
}

// A SYN_STREAM whose header block inflates to 2 GiB (1,000 names and values of 1 MiB,
// spdystream's default bounds), or that passes the Framer's bounds but is too much for
// a stream to keep, ends the connection before the server holds it.
func TestOversizedHeaderBlocksEndTheConnection(t *testing.T) {
	if raceDetector {
		t.Skip("the race detector changes what allocates")
	}
	mib := bytes.Repeat([]byte{'a'}, 1<<20)
	for _, tc := range []struct {
		name  string
		count int
		unit  []byte
	}{
		// ~2 MiB compressed: past the frame length, refused on the frame header.
		{"1,000 names and values of 1 MiB", 1000, nameValue(mib, mib)},
		// Under the frame length, each past the Framer's bounds.
		{"1,000 headers", 1000, nameValue([]byte("port"), []byte("80"))},
		{"a value of 1 MiB", 1, nameValue([]byte("port"), mib)},
		// Within the Framer's bounds, too much for a stream to keep.
		{"16 values of 1 KiB", 16, nameValue([]byte("port"), mib[:1<<10])},
		{"a value of 1,000 NULs", 1, nameValue([]byte("port"), make([]byte, 1000))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			frame := synStreamFrame(zlibBlock(t, tc.count, tc.unit))
			a := newAcceptor()
			cc, sc := tcpPair(t)
			defer cc.Close()
			before, allocBefore := heapInUse(), totalAlloc()
			server := spdyconn.NewServer(sc, a.handle)
			defer server.Close()
			go func() { _, _ = cc.Write(frame) }() // fails once the server closed
			expectClosedByServer(t, cc)
			waitClosed(t, "the server connection", server.CloseChan())
			allocated := totalAlloc() - allocBefore // what the parse allocated, freed or not
			after := heapInUse()
			runtime.KeepAlive(frame)
			t.Logf("SYN_STREAM of %d B: %d KiB allocated, heap grew by %d KiB", len(frame), allocated>>10, growth(before, after)>>10)
			if allocated > 50<<20 {
				t.Errorf("reading the frame allocated %d MiB", allocated>>20)
			}
			if g := growth(before, after); g > 50<<20 {
				t.Errorf("the heap grew by %d MiB", g>>20)
			}
			select {
			case s := <-a.streams:
				t.Errorf("the server accepted stream %d", s.Identifier())
			default:
			}
		})
	}
}

// DATA frames are read as their bytes arrive: clients that declare 16 MiB and send
// nothing more (64 connections, 1 GiB declared) cost the server next to nothing.
func TestSilentDataFramesHoldNoMemory(t *testing.T) {
	if raceDetector {
		t.Skip("the race detector changes what allocates")
	}
	const conns = 64
	a := newAcceptor()
	srv := upgradeServer(t, a)
	// The upgrade request, the SYN_STREAM (the same bytes on every fresh
	// connection), one DATA frame header declaring 16 MiB and one byte of it.
	var opening bytes.Buffer
	fmt.Fprintf(&opening, "POST /portforward HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nContent-Length: 0\r\n\r\n")
	f, err := spdy.NewFramer(&opening, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.WriteFrame(synStream(1, 0)); err != nil {
		t.Fatal(err)
	}
	opening.Write([]byte{0, 0, 0, 1, 0, 0xff, 0xff, 0xff, 'x'})

	clients := make([]net.Conn, 0, conns)
	defer func() {
		for _, c := range clients {
			_ = c.Close()
		}
	}()
	before := heapInUse()
	for range conns {
		c, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
		if _, err := c.Write(opening.Bytes()); err != nil {
			t.Fatal(err)
		}
	}
	for range conns {
		a.next(t) // every connection read its SYN_STREAM, and replied
	}
	time.Sleep(200 * time.Millisecond) // and the DATA frame header behind it
	after := heapInUse()
	t.Logf("%d connections, each in a DATA frame declaring 16 MiB: heap grew by %d KiB", conns, growth(before, after)>>10)
	if g := growth(before, after); g > 50<<20 {
		t.Errorf("the heap grew by %d MiB", g>>20)
	}
}

// A stream whose reader stopped is reset with FLOW_CONTROL_ERROR once past its window,
// its data dropped, while the connection's other streams go on.
func TestStalledStreamDoesNotStallTheOthers(t *testing.T) {
	a := newAcceptor()
	client, _ := serve(t, a.handle)
	stalledC, stalledS := openStream(t, client, a, "streamtype", "data", "port", "1")
	otherC, otherS := openStream(t, client, a, "streamtype", "data", "port", "2")

	sent := make(chan struct{})
	go func() {
		defer close(sent)
		chunk := make([]byte, 32<<10)
		for range 32 { // 1 MiB, eight times the stream's window; nobody reads it
			if _, err := stalledC.Write(chunk); err != nil {
				return // reset
			}
		}
	}()
	time.Sleep(100 * time.Millisecond) // the window fills
	start := time.Now()
	if _, err := otherC.Write([]byte("still flowing")); err != nil {
		t.Fatal(err)
	}
	_ = otherC.Close()
	if got := readAll(t, otherS); got != "still flowing" {
		t.Fatalf("server read %q", got)
	}
	t.Logf("the other stream's data arrived after %v", time.Since(start).Round(time.Millisecond))

	// The stalled stream was reset for both sides; its data was dropped.
	if got := readAll(t, stalledS); got != "" {
		t.Fatalf("the reset stream still had %d bytes to read", len(got))
	}
	deadline := time.Now().Add(10 * time.Second)
	for !stalledC.(*spdystream.Stream).IsFinished() {
		if time.Now().After(deadline) {
			t.Fatal("the client did not see the reset")
		}
		time.Sleep(5 * time.Millisecond)
	}
	select {
	case <-sent:
	case <-time.After(10 * time.Second):
		t.Fatal("the client's writer is stuck")
	}
	// The connection serves new streams.
	cs, ss := openStream(t, client, a, "streamtype", "data", "port", "3")
	if _, err := cs.Write([]byte("next")); err != nil {
		t.Fatal(err)
	}
	_ = cs.Close()
	if got := readAll(t, ss); got != "next" {
		t.Fatalf("server read %q", got)
	}
}

// The data of other streams is never held up behind a stream whose reader stopped:
// the client (spdystream) ignores SPDY's windows, so waiting for that reader would stop
// the connection's frame reader and every stream behind it on the wire. The stream past
// its window is reset at once, not after the stall timeout (here longer than the test
// waits).
func TestSlowStreamDoesNotDelayTheOthers(t *testing.T) {
	defer spdyconn.SetStallTimeout(5 * time.Second)()
	a := newAcceptor()
	client, _ := serve(t, a.handle)
	slowC, slowS := openStream(t, client, a, "streamtype", "data", "port", "1")
	otherC, otherS := openStream(t, client, a, "streamtype", "data", "port", "2")

	// 256 KiB, twice the slow stream's window, that nobody reads; then the other
	// stream's data, behind it on the wire.
	chunk := make([]byte, 32<<10)
	for range 8 {
		if _, err := slowC.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	const msg = "not held up"
	start := time.Now()
	if _, err := otherC.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	arrived := make(chan string, 1)
	go func() {
		b := make([]byte, len(msg))
		n, _ := io.ReadFull(otherS, b) // ends at the latest when the cleanup closes the connection
		arrived <- string(b[:n])
	}()
	select {
	case got := <-arrived:
		if got != msg {
			t.Fatalf("the other stream read %q", got)
		}
	case <-time.After(time.Second):
		t.Fatal("the other stream's data did not arrive within 1s: the stream nobody reads holds up the connection")
	}
	t.Logf("the other stream's data arrived after %v", time.Since(start).Round(time.Millisecond))

	// The slow stream was reset for both sides, its data dropped.
	deadline := time.Now().Add(3 * time.Second)
	for !slowC.(*spdystream.Stream).IsFinished() {
		if time.Now().After(deadline) {
			t.Fatal("the client did not see the slow stream's reset")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := readAll(t, slowS); got != "" {
		t.Fatalf("the reset stream still had %d bytes to read", len(got))
	}
}

// A stream the only one that may still receive data makes the connection wait for its
// reader (TCP pushes back on the client, TestSlowReaderPushesBackOnTheClient) for the
// stall timeout at most: then it is reset, and the connection serves new streams.
func TestLoneStalledStreamIsResetAfterTheStallTimeout(t *testing.T) {
	defer spdyconn.SetStallTimeout(200 * time.Millisecond)()
	a := newAcceptor()
	client, _ := serve(t, a.handle)
	cs, ss := openStream(t, client, a, "streamtype", "data")
	chunk := make([]byte, 32<<10)
	for range 8 { // 256 KiB, twice its window; nobody reads it
		if _, err := cs.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for !cs.(*spdystream.Stream).IsFinished() {
		if time.Now().After(deadline) {
			t.Fatal("the client did not see the stalled stream's reset")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := readAll(t, ss); got != "" {
		t.Fatalf("the reset stream still had %d bytes to read", len(got))
	}
	cs2, ss2 := openStream(t, client, a, "streamtype", "data")
	if _, err := cs2.Write([]byte("next")); err != nil {
		t.Fatal(err)
	}
	_ = cs2.Close()
	if got := readAll(t, ss2); got != "next" {
		t.Fatalf("server read %q", got)
	}
}

// A failed write ends the connection at once, also while its frame reader waits for a
// stream's reader: nothing keeps running on a connection that can no longer send.
func TestFailedWriteEndsAWaitingConnection(t *testing.T) {
	defer spdyconn.SetStallTimeout(5 * time.Second)()
	a := newAcceptor()
	cc, sc := tcpPair(t)
	server := spdyconn.NewServer(sc, a.handle)
	client, err := k8sspdy.NewClientConnection(cc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = client.Close()
		_ = server.Close()
		<-server.CloseChan()
	})
	cs, ss := openStream(t, client, a, "streamtype", "data")
	// The only stream: past its window, the connection waits for its reader.
	chunk := make([]byte, 32<<10)
	for range 8 {
		if _, err := cs.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for spdyconn.Buffered(server) < 128<<10 {
		if time.Now().After(deadline) {
			t.Fatalf("the stream holds %d bytes, want its window full", spdyconn.Buffered(server))
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // the reader reads the next chunk and waits

	if err := sc.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if _, err := ss.Write([]byte("x")); err == nil {
		t.Fatal("a write on a socket shut down for writing succeeded")
	}
	select {
	case <-server.CloseChan():
	case <-time.After(time.Second):
		t.Fatal("the connection did not end within 1s of a failed write")
	}
}

// Streams nobody reads hold maxBufferedPerConn (1 MiB) together, not their window
// (128 KiB) each: past it, the stream holding the most is reset after the stall timeout.
func TestUnreadStreamsShareTheConnectionsBudget(t *testing.T) {
	if raceDetector {
		t.Skip("the race detector changes what allocates")
	}
	defer spdyconn.SetStallTimeout(100 * time.Millisecond)()
	const streams = 32 // 4 MiB at 128 KiB each
	var frames bytes.Buffer
	f, err := spdy.NewFramer(&frames, nil)
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 32<<10)
	for i := range streams {
		id := spdy.StreamId(2*i + 1)
		if err := f.WriteFrame(&spdy.SynStreamFrame{StreamId: id, Headers: http.Header{"Streamtype": {"data"}}}); err != nil {
			t.Fatal(err)
		}
		for range 4 {
			if err := f.WriteFrame(&spdy.DataFrame{StreamId: id, Data: chunk}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := f.WriteFrame(&spdy.PingFrame{Id: 1}); err != nil { // answered once all is read
		t.Fatal(err)
	}

	a := newAcceptor()
	a.streams = make(chan httpstream.Stream, streams) // held, never read
	cc, sc := tcpPair(t)
	before := heapInUse()
	server := spdyconn.NewServer(sc, a.handle)
	t.Cleanup(func() {
		_ = server.Close()
		_ = cc.Close()
	})
	payload := frames.Bytes()
	go func() { _, _ = cc.Write(payload) }()
	reader, err := spdy.NewFramer(nil, cc)
	if err != nil {
		t.Fatal(err)
	}
	_ = cc.SetReadDeadline(time.Now().Add(30 * time.Second))
	resets := 0
	for {
		frame, err := reader.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		if r, ok := frame.(*spdy.RstStreamFrame); ok && r.Status == spdy.FlowControlError {
			resets++
		}
		if _, ok := frame.(*spdy.PingFrame); ok {
			break
		}
	}
	after := heapInUse()
	runtime.KeepAlive(payload) // not freed in between: it would hide the growth
	t.Logf("%d streams of 128 KiB nobody reads: %d reset, heap grew by %d KiB", streams, resets, growth(before, after)>>10)
	if g := growth(before, after); g > 2<<20 {
		t.Errorf("the heap grew by %d KiB, want under 2 MiB", g>>10)
	}
	if resets < streams-8 {
		t.Errorf("%d streams reset, want %d at least", resets, streams-8)
	}
	runtime.KeepAlive(a)
}

// A write that fails ends the connection: the rest of a partly written frame would
// garble whatever the server wrote next. Here the server's socket can no longer send
// (shut down for writing) while it still reads the client.
func TestFailedWriteEndsTheConnection(t *testing.T) {
	for name, frame := range map[string]spdy.Frame{
		"PING":               &spdy.PingFrame{Id: 1},
		"SYN_REPLY":          synStream(1, 0),
		"RST_STREAM":         synStream(2, 0), // even: refused with PROTOCOL_ERROR
		"RST_STREAM refused": &spdy.SynStreamFrame{StreamId: 1, Headers: http.Header{"Streamtype": {"refused"}}},
	} {
		t.Run(name, func(t *testing.T) {
			replied := make(chan struct{})
			handler := func(s httpstream.Stream, replySent <-chan struct{}) error {
				if s.Headers().Get("Streamtype") == "refused" {
					return errors.New("refused")
				}
				go func() {
					<-replySent
					close(replied)
				}()
				return nil
			}
			cc, sc := tcpPair(t)
			server := spdyconn.NewServer(sc, handler)
			t.Cleanup(func() {
				_ = server.Close()
				_ = cc.Close()
			})
			f, err := spdy.NewFramer(cc, cc)
			if err != nil {
				t.Fatal(err)
			}
			if err := sc.(*net.TCPConn).CloseWrite(); err != nil {
				t.Fatal(err)
			}
			if err := f.WriteFrame(frame); err != nil {
				t.Fatal(err)
			}
			waitClosed(t, "the connection after a failed write", server.CloseChan())
			if name == "SYN_REPLY" {
				select {
				case <-replied: // the handler's waiters are freed
				case <-time.After(10 * time.Second):
					t.Fatal("replySent was not closed")
				}
			}
		})
	}
}
