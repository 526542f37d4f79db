// Package spdyconn is the server side of a SPDY/3.1 connection, as port-forward uses
// it: an httpstream.Connection with the semantics of k8s.io/streaming's
// spdy.NewServerConnection over github.com/moby/spdystream, but without spdystream's
// per-connection BestCompression header compressor (see headerblock.go). Frames are
// read, and those without a header block written, with spdystream's own Framer.
//
// KCP opens a connection per etcd health check, so this is the manager's peak heap: an
// open connection with one forwarded pair holds 0.11-0.16 MB on the server side where
// spdystream's held ~0.95 MB (BenchmarkSPDYConnectionMemory, server-heap-B/conn), and
// it runs one goroutine where spdystream runs a dozen.
package spdyconn

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/moby/spdystream/spdy"
	"k8s.io/streaming/pkg/httpstream"
)

// closeWriteTimeout bounds the RST_STREAMs and GOAWAY that Close writes, and so the
// wait for a writer stuck on a client that stopped reading.
const closeWriteTimeout = time.Second

// maxStreamID is the largest 31-bit stream ID.
const maxStreamID = 0x7fffffff

// ErrServerStreams is CreateStream's answer: port-forward's server never opens streams.
var ErrServerStreams = errors.New("spdyconn: the server side does not create streams")

var (
	_ httpstream.Connection = (*Conn)(nil)
	_ httpstream.Stream     = (*Stream)(nil)
)

// Conn is a server-side SPDY/3.1 connection. It implements httpstream.Connection.
type Conn struct {
	netConn   net.Conn
	reader    *spdy.Framer // used by serve only
	writer    *frameWriter
	newStream httpstream.NewStreamHandler
	idle      *idleTimer

	mu       sync.Mutex
	streams  map[uint32]*Stream // open streams, for frames to find and Close to reset
	nextID   uint32             // the lowest ID the client may open next
	lastID   uint32             // the last stream accepted, for GOAWAY
	shutDown bool

	shutdownOnce sync.Once
	closing      chan struct{} // closed when the connection starts to end: unblocks waits
	closed       chan bool     // closed once the net.Conn is closed: CloseChan
}

// NewServer serves the SPDY/3.1 connection c, whose protocol upgrade is done, until
// Close, the client's GOAWAY, an invalid frame or the idle timeout. newStream is called
// for every stream the client opens, from the goroutine reading the connection (so it
// must not block, nor wait for frames); an error resets the stream.
func NewServer(c net.Conn, newStream httpstream.NewStreamHandler) *Conn {
	reader, _ := spdy.NewFramer(nil, c) // errors only for an invalid compression level
	conn := &Conn{
		netConn:   c,
		reader:    reader,
		newStream: newStream,
		streams:   map[uint32]*Stream{},
		nextID:    1,
		closing:   make(chan struct{}),
		closed:    make(chan bool),
	}
	conn.idle = newIdleTimer(func() { _ = conn.Close() })
	conn.writer = newFrameWriter(c, conn.idle.touch)
	go conn.serve()
	return conn
}

// serve reads and handles frames until the connection ends.
func (c *Conn) serve() {
	defer c.shutdown(false)
	for {
		frame, err := c.readFrame()
		if err != nil {
			return // EOF, a closed connection, or a malformed frame: spdystream ends there too
		}
		c.idle.touch()
		switch f := frame.(type) {
		case *spdy.SynStreamFrame:
			c.openStream(f)
		case *spdy.DataFrame:
			if s := c.stream(f.StreamId); s != nil {
				if len(f.Data) > 0 {
					s.deliver(f.Data)
				}
				if f.Flags&spdy.DataFlagFin != 0 {
					s.remoteClose()
				}
			}
		case *spdy.RstStreamFrame:
			if s := c.stream(f.StreamId); s != nil {
				c.forget(s)
				s.markReset()
			}
		case *spdy.HeadersFrame:
			// Nobody reads headers after the SYN_STREAM; only their FIN counts.
			if s := c.stream(f.StreamId); s != nil && f.CFHeader.Flags&spdy.ControlFlagFin != 0 {
				s.remoteClose()
			}
		case *spdy.PingFrame:
			// Odd IDs are the client's pings, to answer with the same ID; even ones
			// would answer ours, and we send none.
			if f.Id%2 == 1 {
				_ = c.writer.writeFrame(&spdy.PingFrame{Id: f.Id})
			}
		case *spdy.GoAwayFrame:
			return // the client is done: the connection ends, as with spdystream
		default:
			// SYN_REPLY (we open no streams), SETTINGS and WINDOW_UPDATE (no flow
			// control in SPDY/3.1 as spdystream speaks it): ignored, as spdystream does.
		}
	}
}

// readFrame is the Framer's ReadFrame, with a panic on malformed input (none known)
// turned into an error: it would end the process, not just this connection.
func (c *Conn) readFrame() (frame spdy.Frame, err error) {
	defer func() {
		if r := recover(); r != nil {
			frame, err = nil, fmt.Errorf("spdyconn: reading a frame: %v", r)
		}
	}()
	return c.reader.ReadFrame()
}

// openStream accepts a SYN_STREAM: IDs are odd and increase, as the client opens them.
func (c *Conn) openStream(f *spdy.SynStreamFrame) {
	id := uint32(f.StreamId)
	c.mu.Lock()
	if c.shutDown {
		c.mu.Unlock()
		return
	}
	if id > maxStreamID || id < c.nextID || id%2 == 0 {
		c.mu.Unlock()
		_ = c.writer.writeFrame(&spdy.RstStreamFrame{StreamId: f.StreamId, Status: spdy.ProtocolError})
		return
	}
	c.nextID, c.lastID = id+2, id
	s := newStream(c, f)
	c.streams[id] = s
	c.mu.Unlock()

	replySent := make(chan struct{})
	if err := c.newStream(s, replySent); err != nil {
		_ = s.Reset()
		return
	}
	_ = s.sendReply()
	// Closed even when the reply failed: the connection is broken then, and the
	// handler's waiters must not hang.
	close(replySent)
}

func (c *Conn) stream(id spdy.StreamId) *Stream {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.streams[uint32(id)]
}

// forget drops s from the open streams: frames for it are ignored from now on.
func (c *Conn) forget(s *Stream) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.streams[s.id] == s {
		delete(c.streams, s.id)
	}
}

// shutdown ends the connection once: every open stream is reset, the client is told
// (RST_STREAM each, then GOAWAY) if notify, and the net.Conn is closed.
func (c *Conn) shutdown(notify bool) {
	c.shutdownOnce.Do(func() {
		close(c.closing)
		c.idle.stop()
		c.mu.Lock()
		c.shutDown = true
		streams, last := c.streams, c.lastID
		c.streams = map[uint32]*Stream{}
		c.mu.Unlock()
		if notify {
			// A writer stuck on a client that stopped reading holds its stream's
			// send lock, and our frames would queue behind it: closing the net.Conn
			// frees them. Not a write deadline: gorilla/websocket (the tunnel) does
			// not allow setting one during a write.
			giveUp := time.AfterFunc(closeWriteTimeout, func() { _ = c.netConn.Close() })
			defer giveUp.Stop()
		} else {
			_ = c.netConn.Close() // nothing left to say: free the writers at once
		}
		for _, s := range streams {
			_ = s.resetLocally(notify)
		}
		if notify {
			_ = c.writer.writeFrame(&spdy.GoAwayFrame{LastGoodStreamId: spdy.StreamId(last), Status: spdy.GoAwayOK})
		}
		_ = c.netConn.Close()
		close(c.closed)
	})
}

// Close resets every stream, sends GOAWAY and closes the network connection.
func (c *Conn) Close() error {
	c.shutdown(true)
	return nil
}

// CloseChan is closed once the connection has ended.
func (c *Conn) CloseChan() <-chan bool { return c.closed }

// SetIdleTimeout closes the connection after timeout without a frame in either
// direction; zero disables it.
func (c *Conn) SetIdleTimeout(timeout time.Duration) { c.idle.set(timeout) }

// RemoveStreams tells the connection the caller is done with streams: data the client
// still sends on them is dropped instead of waiting for a reader, which would stop the
// connection (spdystream's frame handler blocks for good there). They leave the
// connection when both sides closed them or either reset them, as before.
func (c *Conn) RemoveStreams(streams ...httpstream.Stream) {
	for _, st := range streams {
		if s, ok := st.(*Stream); ok && s != nil {
			s.detach()
		}
	}
}

// CreateStream fails: the server side of port-forward only accepts streams.
func (c *Conn) CreateStream(http.Header) (httpstream.Stream, error) {
	return nil, ErrServerStreams
}
