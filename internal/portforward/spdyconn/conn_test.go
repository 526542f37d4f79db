package spdyconn_test

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/moby/spdystream"
	"go.uber.org/goleak"
	"k8s.io/streaming/pkg/httpstream"
	"k8s.io/streaming/pkg/httpstream/spdy"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/portforward/spdyconn"
)

// TestMain fails the package if a goroutine of ours outlives the tests. The clients are
// spdystream's, whose connection ends in goroutines that may linger (see the
// portforward package's TestMain); theirs are ignored.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/moby/spdystream.(*Connection).handleDataFrame"),
		goleak.IgnoreTopFunction("github.com/moby/spdystream.(*Connection).shutdown"),
		goleak.IgnoreAnyFunction("github.com/moby/spdystream.(*Connection).shutdown.func1"),
		goleak.IgnoreAnyFunction("github.com/moby/spdystream.(*Connection).Serve"),
	)
}

// tcpPair is a connected pair of loopback TCP connections: real sockets, so a peer
// that stops reading pushes back.
func tcpPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := lis.Accept()
		accepted <- c
	}()
	client, err = net.Dial("tcp", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server = <-accepted
	if server == nil {
		t.Fatal("accept failed")
	}
	return client, server
}

// acceptor accepts every stream and hands it over once its SYN_REPLY is out.
type acceptor struct {
	streams chan httpstream.Stream
	reject  error
}

func newAcceptor() *acceptor { return &acceptor{streams: make(chan httpstream.Stream, 16)} }

func (a *acceptor) handle(s httpstream.Stream, replySent <-chan struct{}) error {
	if a.reject != nil {
		return a.reject
	}
	go func() {
		<-replySent
		a.streams <- s
	}()
	return nil
}

func (a *acceptor) next(t *testing.T) httpstream.Stream {
	t.Helper()
	select {
	case s := <-a.streams:
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("no stream reached the server")
		return nil
	}
}

// serve connects client-go's SPDY client connection (spdystream's client side) to our
// server connection.
func serve(t *testing.T, handler httpstream.NewStreamHandler) (httpstream.Connection, *spdyconn.Conn) {
	t.Helper()
	cc, sc := tcpPair(t)
	server := spdyconn.NewServer(sc, handler)
	client, err := spdy.NewClientConnection(cc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = client.Close()
		_ = server.Close()
		<-server.CloseChan()
	})
	return client, server
}

// openStream opens a stream from the client and returns both ends of it.
func openStream(t *testing.T, client httpstream.Connection, a *acceptor, kv ...string) (cs, ss httpstream.Stream) {
	t.Helper()
	cs, err := client.CreateStream(header(kv...))
	if err != nil {
		t.Fatal(err)
	}
	return cs, a.next(t)
}

func header(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return h
}

// readAll reads s to EOF, failing the test after 10s.
func readAll(t *testing.T, s io.Reader) string {
	t.Helper()
	done := make(chan struct{})
	var b []byte
	var err error
	go func() {
		defer close(done)
		b, err = io.ReadAll(s)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("read did not end")
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func waitClosed(t *testing.T, what string, c <-chan bool) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not close", what)
	}
}

func TestStreamsCarryDataAndHalfCloseEachWay(t *testing.T) {
	a := newAcceptor()
	client, _ := serve(t, a.handle)
	cs, ss := openStream(t, client, a, "streamtype", "data", "port", "8080")
	if got := ss.Headers().Get("Port"); got != "8080" || ss.Identifier() != cs.Identifier() {
		t.Fatalf("server stream %d with port %q, client stream %d", ss.Identifier(), got, cs.Identifier())
	}

	if _, err := cs.Write([]byte("to the server")); err != nil {
		t.Fatal(err)
	}
	if _, err := ss.Write(bytes.Repeat([]byte("to the client "), 10_000)); err != nil { // several frames
		t.Fatal(err)
	}
	// The client half-closes: the server reads its data, then EOF, and may still write.
	if err := cs.Close(); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, ss); got != "to the server" {
		t.Fatalf("server read %q", got)
	}
	if _, err := ss.Write([]byte(" and after the client's FIN")); err != nil {
		t.Fatal(err)
	}
	// Now the server half-closes too: the client reads everything, then EOF.
	if err := ss.Close(); err != nil {
		t.Fatal(err)
	}
	want := string(bytes.Repeat([]byte("to the client "), 10_000)) + " and after the client's FIN"
	if got := readAll(t, cs); got != want {
		t.Fatalf("client read %d bytes, want %d", len(got), len(want))
	}
	if _, err := ss.Write([]byte("x")); !errors.Is(err, spdyconn.ErrStreamClosed) {
		t.Fatalf("write after Close: %v", err)
	}
}

func TestServerHalfCloseLeavesTheClientSending(t *testing.T) {
	a := newAcceptor()
	client, _ := serve(t, a.handle)
	cs, ss := openStream(t, client, a, "streamtype", "error")
	if _, err := ss.Write([]byte("bye")); err != nil {
		t.Fatal(err)
	}
	if err := ss.Close(); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, cs); got != "bye" {
		t.Fatalf("client read %q", got)
	}
	if _, err := cs.Write([]byte("still here")); err != nil {
		t.Fatal(err)
	}
	_ = cs.Close()
	if got := readAll(t, ss); got != "still here" {
		t.Fatalf("server read %q", got)
	}
}

func TestServerResetEndsBothDirections(t *testing.T) {
	a := newAcceptor()
	client, _ := serve(t, a.handle)
	cs, ss := openStream(t, client, a, "streamtype", "data")
	if err := ss.Reset(); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, cs); got != "" {
		t.Fatalf("client read %q after reset", got)
	}
	// spdystream marks a stream finished on RST_STREAM, not on FIN.
	deadline := time.Now().Add(10 * time.Second)
	for !cs.(*spdystream.Stream).IsFinished() {
		if time.Now().After(deadline) {
			t.Fatal("the client did not see the reset")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := ss.Write([]byte("x")); !errors.Is(err, spdyconn.ErrStreamClosed) {
		t.Fatalf("write after Reset: %v", err)
	}
	if got := readAll(t, ss); got != "" {
		t.Fatalf("server read %q after reset", got)
	}
}

func TestClientResetEndsTheServerStream(t *testing.T) {
	a := newAcceptor()
	client, _ := serve(t, a.handle)
	cs, ss := openStream(t, client, a, "streamtype", "data")
	if err := cs.Reset(); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, ss); got != "" {
		t.Fatalf("server read %q after reset", got)
	}
	if _, err := ss.Write([]byte("x")); !errors.Is(err, spdyconn.ErrStreamClosed) {
		t.Fatalf("write after the client's reset: %v", err)
	}
}

func TestRejectedStreamIsResetForTheClient(t *testing.T) {
	a := newAcceptor()
	a.reject = errors.New("no such port")
	client, _ := serve(t, a.handle)
	if _, err := client.CreateStream(header("streamtype", "data")); err == nil {
		t.Fatal("the client got a rejected stream")
	}
	a.reject = nil
	if _, err := client.CreateStream(header("streamtype", "data")); err != nil {
		t.Fatalf("the connection no longer works: %v", err)
	}
}

func TestCloseResetsStreamsAndEndsTheConnection(t *testing.T) {
	a := newAcceptor()
	client, server := serve(t, a.handle)
	cs, ss := openStream(t, client, a, "streamtype", "data")
	if err := server.Close(); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, "the server's CloseChan", server.CloseChan())
	waitClosed(t, "the client's CloseChan", client.CloseChan())
	if got := readAll(t, cs); got != "" {
		t.Fatalf("client read %q", got)
	}
	if got := readAll(t, ss); got != "" {
		t.Fatalf("server read %q", got)
	}
	if _, err := ss.Write([]byte("x")); err == nil {
		t.Fatal("write after Close succeeded")
	}
	if _, err := server.CreateStream(http.Header{}); !errors.Is(err, spdyconn.ErrServerStreams) {
		t.Fatalf("CreateStream: %v", err)
	}
}

// pingClient is spdystream's client connection itself: client-go only pings on a timer.
func pingClient(t *testing.T) (*spdystream.Connection, *spdyconn.Conn) {
	t.Helper()
	cc, sc := tcpPair(t)
	server := spdyconn.NewServer(sc, httpstream.NoOpNewStreamHandler)
	client, err := spdystream.NewConnection(cc, false)
	if err != nil {
		t.Fatal(err)
	}
	go client.Serve(spdystream.NoOpStreamHandler)
	t.Cleanup(func() {
		_ = client.Close()
		_ = server.Close()
		_ = cc.Close()
	})
	return client, server
}

func TestPingsAreAnsweredAndKeepTheConnectionAlive(t *testing.T) {
	client, server := pingClient(t)
	server.SetIdleTimeout(300 * time.Millisecond)
	for range 20 { // 1s of pings, three times the idle timeout
		if _, err := client.Ping(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	select {
	case <-server.CloseChan():
		t.Fatal("the idle timeout closed a pinged connection")
	default:
	}
	// Silence: the idle timeout closes it.
	waitClosed(t, "the idle connection", server.CloseChan())
	waitClosed(t, "the client", client.CloseChan())
}

func TestIdleTimeoutClosesTheConnection(t *testing.T) {
	a := newAcceptor()
	client, server := serve(t, a.handle)
	cs, err := client.CreateStream(header("streamtype", "data"))
	if err != nil {
		t.Fatal(err)
	}
	server.SetIdleTimeout(100 * time.Millisecond)
	waitClosed(t, "the idle connection", server.CloseChan())
	waitClosed(t, "the client", client.CloseChan())
	if got := readAll(t, cs); got != "" {
		t.Fatalf("client read %q", got)
	}
	// Zero disables it.
	_, server2 := serve(t, a.handle)
	server2.SetIdleTimeout(50 * time.Millisecond)
	server2.SetIdleTimeout(0)
	select {
	case <-server2.CloseChan():
		t.Fatal("a disabled idle timeout closed the connection")
	case <-time.After(300 * time.Millisecond):
	}
}

// A stream whose reader stalls does not make the server buffer what the client sends:
// the connection stops reading and TCP pushes back on the client, for a stall shorter
// than the stall timeout (TestStalledStreamDoesNotStallTheOthers for a longer one).
func TestSlowReaderPushesBackOnTheClient(t *testing.T) {
	a := newAcceptor()
	client, _ := serve(t, a.handle)
	cs, ss := openStream(t, client, a, "streamtype", "data")
	const total = 64 << 20 // far beyond loopback's socket buffers
	var mu sync.Mutex
	var sent int
	wrote := make(chan error, 1)
	go func() {
		chunk := make([]byte, 32<<10)
		for sent < total {
			if _, err := cs.Write(chunk); err != nil {
				wrote <- err
				return
			}
			mu.Lock()
			sent += len(chunk)
			mu.Unlock()
		}
		wrote <- cs.Close()
	}()
	time.Sleep(500 * time.Millisecond)
	mu.Lock()
	stalled := sent
	mu.Unlock()
	if stalled >= total {
		t.Fatal("the client sent everything to a server stream nobody reads")
	}
	n, err := io.Copy(io.Discard, ss)
	if err != nil || n != total {
		t.Fatalf("server read %d bytes (%v), want %d", n, err, total)
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	t.Logf("the client had sent %d MiB when the reader stalled", stalled>>20)
}

// Data for a stream the caller removed, and so no longer reads, is dropped: waiting for
// its reader would stop the whole connection.
func TestRemovedStreamsDoNotStallTheConnection(t *testing.T) {
	a := newAcceptor()
	client, server := serve(t, a.handle)
	cs, ss := openStream(t, client, a, "streamtype", "data")
	server.RemoveStreams(ss, nil)
	sent := make(chan error, 1)
	go func() {
		chunk := make([]byte, 32<<10)
		for range 64 { // 2 MiB, far past what a stream buffers
			if _, err := cs.Write(chunk); err != nil {
				sent <- err
				return
			}
		}
		sent <- cs.Close()
	}()
	select {
	case err := <-sent:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the client could not send on a removed stream")
	}
	// The connection still serves streams, and the removed one still sees its FIN.
	cs2, ss2 := openStream(t, client, a, "streamtype", "data")
	if _, err := cs2.Write([]byte("next")); err != nil {
		t.Fatal(err)
	}
	_ = cs2.Close()
	if got := readAll(t, ss2); got != "next" {
		t.Fatalf("server read %q", got)
	}
	if n := len(readAll(t, ss)); n > 256<<10 {
		t.Fatalf("the removed stream buffered %d bytes", n)
	}
}
