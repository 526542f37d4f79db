package spdyconn_test

import (
	"bytes"
	"io"
	"math/rand"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/moby/spdystream/spdy"
	"k8s.io/streaming/pkg/httpstream"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/portforward/spdyconn"
)

// rawClient speaks frames with spdystream's Framer, to send what client-go never does.
type rawClient struct {
	t    *testing.T
	conn net.Conn
	f    *spdy.Framer
}

func rawServe(t *testing.T, handler httpstream.NewStreamHandler) (*rawClient, *spdyconn.Conn) {
	t.Helper()
	cc, sc := tcpPair(t)
	server := spdyconn.NewServer(sc, handler)
	f, err := spdy.NewFramer(cc, cc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = server.Close()
		_ = cc.Close()
	})
	return &rawClient{t: t, conn: cc, f: f}, server
}

func (c *rawClient) send(frames ...spdy.Frame) {
	c.t.Helper()
	for _, f := range frames {
		if err := c.f.WriteFrame(f); err != nil {
			c.t.Fatal(err)
		}
	}
}

func (c *rawClient) expect() spdy.Frame {
	c.t.Helper()
	_ = c.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	f, err := c.f.ReadFrame()
	if err != nil {
		c.t.Fatal(err)
	}
	return f
}

func synStream(id uint32, flags spdy.ControlFlags) *spdy.SynStreamFrame {
	return &spdy.SynStreamFrame{StreamId: spdy.StreamId(id), CFHeader: spdy.ControlFrameHeader{Flags: flags},
		Headers: http.Header{"Streamtype": {"data"}}}
}

func expectReply(t *testing.T, c *rawClient, id uint32) {
	t.Helper()
	if f, ok := c.expect().(*spdy.SynReplyFrame); !ok || f.StreamId != spdy.StreamId(id) {
		t.Fatalf("want SYN_REPLY %d, read %#v", id, f)
	}
}

func expectReset(t *testing.T, c *rawClient, id uint32, status spdy.RstStreamStatus) {
	t.Helper()
	if f, ok := c.expect().(*spdy.RstStreamFrame); !ok || f.StreamId != spdy.StreamId(id) || f.Status != status {
		t.Fatalf("want RST_STREAM %d status %d, read %#v", id, status, f)
	}
}

// Streams the client opens have odd, increasing IDs; others are refused with
// PROTOCOL_ERROR and never reach the handler.
func TestStreamIDsFollowTheClientRules(t *testing.T) {
	a := newAcceptor()
	c, _ := rawServe(t, a.handle)
	c.send(synStream(3, 0))
	expectReply(t, c, 3)
	c.send(synStream(1, 0)) // lower
	expectReset(t, c, 1, spdy.ProtocolError)
	c.send(synStream(3, 0)) // again
	expectReset(t, c, 3, spdy.ProtocolError)
	c.send(synStream(6, 0)) // even: the server's
	expectReset(t, c, 6, spdy.ProtocolError)
	c.send(synStream(7, 0))
	expectReply(t, c, 7)
	for _, want := range []uint32{3, 7} {
		if got := a.next(t).Identifier(); got != want {
			t.Fatalf("handler got stream %d, want %d", got, want)
		}
	}
}

func TestControlFrames(t *testing.T) {
	a := newAcceptor()
	c, server := rawServe(t, a.handle)

	// Pings from the client (odd IDs) come back with the same ID; frames we have no
	// use for are ignored, so the next frame out is the answer to the last ping.
	c.send(&spdy.PingFrame{Id: 9})
	if f, ok := c.expect().(*spdy.PingFrame); !ok || f.Id != 9 {
		t.Fatalf("want PING 9, read %#v", f)
	}
	c.send(
		&spdy.PingFrame{Id: 8}, // an answer to a ping we never sent
		&spdy.SettingsFrame{FlagIdValues: []spdy.SettingsFlagIdValue{{Id: spdy.SettingsInitialWindowSize, Value: 1 << 20}}},
		&spdy.WindowUpdateFrame{StreamId: 1, DeltaWindowSize: 1000},
		&spdy.SynReplyFrame{StreamId: 2, Headers: http.Header{}},
		&spdy.DataFrame{StreamId: 99, Data: []byte("nobody's")},
		&spdy.RstStreamFrame{StreamId: 97, Status: spdy.Cancel},
		&spdy.PingFrame{Id: 11},
	)
	if f, ok := c.expect().(*spdy.PingFrame); !ok || f.Id != 11 {
		t.Fatalf("want PING 11, read %#v", f)
	}

	// HEADERS with FIN half-closes like DATA with FIN.
	c.send(synStream(1, 0))
	expectReply(t, c, 1)
	c.send(&spdy.DataFrame{StreamId: 1, Data: []byte("abc")},
		&spdy.HeadersFrame{StreamId: 1, CFHeader: spdy.ControlFrameHeader{Flags: spdy.ControlFlagFin}, Headers: http.Header{"X": {"y"}}})
	if got := readAll(t, a.next(t)); got != "abc" {
		t.Fatalf("server read %q", got)
	}

	// SYN_STREAM with FIN: nothing to read, but the server may write.
	c.send(synStream(3, spdy.ControlFlagFin))
	expectReply(t, c, 3)
	ss := a.next(t)
	if got := readAll(t, ss); got != "" {
		t.Fatalf("server read %q", got)
	}
	if _, err := ss.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if f, ok := c.expect().(*spdy.DataFrame); !ok || f.StreamId != 3 || string(f.Data) != "x" {
		t.Fatalf("want DATA 3, read %#v", f)
	}

	// GOAWAY: the client is done, the connection ends.
	c.send(&spdy.GoAwayFrame{LastGoodStreamId: 0, Status: spdy.GoAwayOK})
	waitClosed(t, "the connection after GOAWAY", server.CloseChan())
}

// Invalid frames end the connection at once, without waiting for the client to leave.
func TestInvalidFramesEndTheConnection(t *testing.T) {
	for name, input := range map[string][]byte{
		"unknown control frame type": {0x80, 0x03, 0x00, 0x0a, 0, 0, 0, 0},
		"RST_STREAM with status 0":   {0x80, 0x03, 0x00, 0x03, 0, 0, 0, 8, 0, 0, 0, 1, 0, 0, 0, 0},
		"DATA for stream 0":          {0, 0, 0, 0, 0, 0, 0, 1, 'x'},
		"header block not zlib":      {0x80, 0x03, 0x00, 0x01, 0, 0, 0, 14, 0, 0, 0, 1, 0, 0, 0, 0, 0xde, 0xad, 0xbe, 0xef},
	} {
		t.Run(name, func(t *testing.T) {
			c, server := rawServe(t, httpstream.NoOpNewStreamHandler)
			if _, err := c.conn.Write(input); err != nil {
				t.Fatal(err)
			}
			waitClosed(t, "the connection", server.CloseChan())
		})
	}
}

// Truncated and mangled frames never panic the server, and it always ends.
func TestMangledInputNeverPanics(t *testing.T) {
	var valid bytes.Buffer
	f, err := spdy.NewFramer(&valid, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, frame := range []spdy.Frame{
		synStream(1, 0),
		&spdy.DataFrame{StreamId: 1, Data: []byte("hello")},
		&spdy.PingFrame{Id: 1},
		synStream(3, 0),
		&spdy.HeadersFrame{StreamId: 3, Headers: http.Header{"A": {"b"}}},
		&spdy.DataFrame{StreamId: 3, Flags: spdy.DataFlagFin, Data: []byte("bye")},
		&spdy.RstStreamFrame{StreamId: 1, Status: spdy.Cancel},
		&spdy.SettingsFrame{FlagIdValues: []spdy.SettingsFlagIdValue{{Id: spdy.SettingsMaxConcurrentStreams, Value: 10}}},
		&spdy.WindowUpdateFrame{StreamId: 3, DeltaWindowSize: 10},
		&spdy.GoAwayFrame{LastGoodStreamId: 3},
	} {
		if err := f.WriteFrame(frame); err != nil {
			t.Fatal(err)
		}
	}
	rnd := rand.New(rand.NewSource(1))
	for i := range 300 {
		input := bytes.Clone(valid.Bytes())
		switch i % 3 {
		case 0: // truncated
			input = input[:rnd.Intn(len(input))]
		case 1: // bytes flipped
			for range 1 + rnd.Intn(8) {
				input[rnd.Intn(len(input))] ^= byte(1 + rnd.Intn(255))
			}
		case 2: // garbage inserted
			at := rnd.Intn(len(input))
			junk := make([]byte, 1+rnd.Intn(32))
			rnd.Read(junk)
			input = append(input[:at], append(junk, input[at:]...)...)
		}
		cc, sc := net.Pipe()
		server := spdyconn.NewServer(sc, func(s httpstream.Stream, _ <-chan struct{}) error {
			go func() { _, _ = io.Copy(io.Discard, s) }()
			return nil
		})
		go func() { _, _ = io.Copy(io.Discard, cc) }()
		_, _ = cc.Write(input)
		_ = cc.Close()
		waitClosed(t, "the connection", server.CloseChan())
	}
}

// A client that stopped reading cannot hold Close up: a writer stuck on it is freed.
func TestCloseDoesNotWaitForAClientThatStoppedReading(t *testing.T) {
	a := newAcceptor()
	c, server := rawServe(t, a.handle)
	c.send(synStream(1, 0))
	expectReply(t, c, 1)
	ss := a.next(t)
	stuck := make(chan error, 1)
	go func() {
		chunk := make([]byte, 32<<10)
		for {
			if _, err := ss.Write(chunk); err != nil {
				stuck <- err
				return
			}
		}
	}()
	time.Sleep(200 * time.Millisecond) // the socket buffers fill up; nobody reads them
	closed := make(chan struct{})
	go func() {
		_ = server.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close waited for the client")
	}
	select {
	case <-stuck:
	case <-time.After(10 * time.Second):
		t.Fatal("the stuck writer was not freed")
	}
}
