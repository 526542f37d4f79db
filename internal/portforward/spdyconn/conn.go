// Package spdyconn is the server side of a SPDY/3.1 connection, as port-forward uses
// it: an httpstream.Connection with the semantics of k8s.io/streaming's
// spdy.NewServerConnection over github.com/moby/spdystream, but without spdystream's
// per-connection BestCompression header compressor (see headerblock.go). Control frames
// are read, and frames without a header block written, with spdystream's own Framer;
// DATA frames are read here, in bounded chunks (see limits.go).
//
// KCP opens a connection per etcd health check, so this is the manager's peak heap: an
// open connection with one forwarded pair holds 0.11-0.16 MB on the server side where
// spdystream's held ~0.95 MB (BenchmarkSPDYConnectionMemory, server-heap-B/conn), and
// it runs one goroutine where spdystream runs a dozen.
package spdyconn

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
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

// errWriteFailed ends serve when a write failed while it waited for a reader.
var errWriteFailed = errors.New("spdyconn: a write failed")

var (
	_ httpstream.Connection = (*Conn)(nil)
	_ httpstream.Stream     = (*Stream)(nil)
)

// Conn is a server-side SPDY/3.1 connection. It implements httpstream.Connection.
type Conn struct {
	netConn   net.Conn
	in        frameReader  // used by serve only
	reader    *spdy.Framer // reads control frames from in; used by serve only
	writer    *frameWriter
	newStream httpstream.NewStreamHandler
	idle      *idleTimer

	mu       sync.Mutex
	streams  map[uint32]*Stream // open streams, for frames to find and Close to reset
	nextID   uint32             // the lowest ID the client may open next
	lastID   uint32             // the last stream accepted, for GOAWAY
	shutDown bool

	buffered atomic.Int64  // data the streams hold for their readers (maxBufferedPerConn)
	space    chan struct{} // a signal: a reader consumed data, or a stream dropped its own

	shutdownOnce sync.Once
	closing      chan struct{} // closed when the connection starts to end: unblocks waits
	closed       chan bool     // closed once the net.Conn is closed: CloseChan

	failOnce sync.Once
	failed   chan struct{} // closed when a write failed: ends serve's wait in deliver
}

// NewServer serves the SPDY/3.1 connection c, whose protocol upgrade is done, until
// Close, the client's GOAWAY, an invalid frame or the idle timeout. newStream is called
// for every stream the client opens, from the goroutine reading the connection (so it
// must not block, nor wait for frames); an error resets the stream.
func NewServer(c net.Conn, newStream httpstream.NewStreamHandler) *Conn {
	conn := &Conn{
		netConn:   c,
		in:        frameReader{r: c, off: frameHeaderSize},
		newStream: newStream,
		streams:   map[uint32]*Stream{},
		nextID:    1,
		space:     make(chan struct{}, 1),
		closing:   make(chan struct{}),
		closed:    make(chan bool),
		failed:    make(chan struct{}),
	}
	conn.reader = newControlFramer(&conn.in)
	conn.idle = newIdleTimer(func() { _ = conn.Close() })
	conn.writer = newFrameWriter(c, conn.idle.touch, conn.writeFailed)
	go conn.serve()
	return conn
}

// writeFailed ends the connection after a failed write, which may have left part of a
// frame on the wire: nothing sent after it would parse. Closing the net.Conn ends
// serve's read, and failed its wait for a reader; serve then shuts the connection
// down. Not shutdown itself: the write that failed may be one of shutdown's.
func (c *Conn) writeFailed() {
	c.failOnce.Do(func() { close(c.failed) })
	_ = c.netConn.Close()
}

// serve reads and handles frames until the connection ends: at EOF, a closed
// connection, a malformed or oversized frame (spdystream closes the connection there
// too) or a failed write.
func (c *Conn) serve() {
	defer c.shutdown(false)
	for c.readFrame() == nil {
	}
}

// readFrame reads one frame and handles it.
func (c *Conn) readFrame() error {
	head := &c.in.head
	if _, err := io.ReadFull(c.in.r, head[:]); err != nil {
		return err
	}
	c.idle.touch()
	word := binary.BigEndian.Uint32(head[4:])
	flags, length := byte(word>>24), word&0xffffff
	if head[0]&0x80 == 0 {
		return c.readData(binary.BigEndian.Uint32(head[:4]), spdy.DataFlags(flags), length)
	}
	// Checked before the Framer, which would read (and discard) all 16 MiB first.
	if length > maxControlFrameLength {
		return errControlFrameTooLarge
	}
	c.in.off = 0 // the Framer reads the header again
	frame, err := c.parseControlFrame()
	if err != nil {
		return err
	}
	switch f := frame.(type) {
	case *spdy.SynStreamFrame:
		return c.openStream(f)
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
			return c.writer.writeFrame(&spdy.PingFrame{Id: f.Id})
		}
	case *spdy.GoAwayFrame:
		return io.EOF // the client is done: the connection ends, as with spdystream
	default:
		// SYN_REPLY (we open no streams), SETTINGS and WINDOW_UPDATE (no flow
		// control in SPDY/3.1 as spdystream speaks it): ignored, as spdystream does.
	}
	return nil
}

// parseControlFrame is the Framer's ReadFrame, with a panic on malformed input (none
// known) turned into an error: it would end the process, not just this connection.
func (c *Conn) parseControlFrame() (frame spdy.Frame, err error) {
	defer func() {
		if r := recover(); r != nil {
			frame, err = nil, fmt.Errorf("spdyconn: reading a frame: %v", r)
		}
	}()
	return c.reader.ReadFrame()
}

// readData reads the payload of a DATA frame whose header was read, chunk by chunk as
// it arrives: the Framer would allocate the length the client declared (up to 16 MiB)
// before a byte of it came. Data nobody will read is skipped without being kept.
func (c *Conn) readData(id uint32, flags spdy.DataFlags, length uint32) error {
	if id == 0 {
		return errZeroStreamID
	}
	s := c.stream(spdy.StreamId(id))
	for left := int(length); left > 0; {
		if s == nil || !s.accepting() {
			if _, err := io.CopyN(io.Discard, c.in.r, int64(left)); err != nil {
				return err
			}
			break
		}
		chunk := make([]byte, min(left, maxDataChunk))
		if _, err := io.ReadFull(c.in.r, chunk); err != nil {
			return err
		}
		left -= len(chunk)
		c.idle.touch()
		if err := c.deliver(s, chunk); err != nil {
			return err
		}
	}
	if flags&spdy.DataFlagFin != 0 {
		if s := c.stream(spdy.StreamId(id)); s != nil {
			s.remoteClose()
		}
	}
	return nil
}

// deliver queues data for s's reader. When it does not fit (s is past its window, or
// the streams together past the connection's budget) the client sent more than the
// readers took: spdystream, client-go's SPDY, has no flow control (it ignores
// WINDOW_UPDATE and SETTINGS), so only TCP can hold it back, and TCP holds back every
// stream of the connection. So the connection waits for the readers only when no other
// stream may still receive data, and at most the stall timeout; otherwise, and after
// that timeout, it resets the stream past its window, else the one holding the most
// of the budget, with FLOW_CONTROL_ERROR (as a SPDY receiver does to a sender past its
// window), and drops its data. One stream nobody reads thus never holds up the others'
// data. An error ends the connection.
func (c *Conn) deliver(s *Stream, data []byte) error {
	var stall *time.Timer // set once the connection waits: no other stream may receive
	for !s.enqueue(data) {
		if stall == nil && !c.othersMayReceive(s) {
			stall = time.NewTimer(stallTimeout())
			defer stall.Stop()
		}
		if stall != nil {
			select {
			case <-c.space:
				continue
			case <-stall.C:
				stall.Reset(stallTimeout())
			case <-c.closing:
				return nil
			case <-c.failed:
				return errWriteFailed
			}
		}
		victim := c.stalling(s, len(data))
		c.forget(victim)
		if err := victim.resetLocally(true, spdy.FlowControlError); err != nil || victim == s {
			return err
		}
	}
	return nil
}

// othersMayReceive reports whether a stream other than s may still get data: its
// frames may be queued behind s's, and waiting for s's reader would hold them up.
func (c *Conn) othersMayReceive(s *Stream) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, other := range c.streams {
		if other != s && other.accepting() {
			return true
		}
	}
	return false
}

// stalling is the stream to reset when n bytes for s found no room: s past its own
// window, else the stream holding the most of the connection's budget.
func (c *Conn) stalling(s *Stream, n int) *Stream {
	if s.holds()+n > maxBufferedPerStream {
		return s
	}
	victim, most := s, 0
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, other := range c.streams {
		if b := other.holds(); b > most {
			victim, most = other, b
		}
	}
	return victim
}

// release gives back n bytes of the connection's budget a stream held, and wakes
// deliver: the stream it waits for may also just have been reset or detached.
func (c *Conn) release(n int) {
	c.buffered.Add(int64(-n))
	signal(c.space)
}

// openStream accepts a SYN_STREAM: IDs are odd and increase, as the client opens them.
func (c *Conn) openStream(f *spdy.SynStreamFrame) error {
	if headerBlockSize(f.Headers) > maxHeaderBlock {
		return errHeadersTooLarge // the stream would keep them
	}
	id := uint32(f.StreamId)
	c.mu.Lock()
	if c.shutDown {
		c.mu.Unlock()
		return nil
	}
	if id > maxStreamID || id < c.nextID || id%2 == 0 {
		c.mu.Unlock()
		return c.writer.writeFrame(&spdy.RstStreamFrame{StreamId: f.StreamId, Status: spdy.ProtocolError})
	}
	c.nextID, c.lastID = id+2, id
	s := newStream(c, f)
	c.streams[id] = s
	c.mu.Unlock()

	replySent := make(chan struct{})
	if err := c.newStream(s, replySent); err != nil {
		return s.Reset()
	}
	err := s.sendReply()
	// Closed even when the reply failed: the connection ends then, and the
	// handler's waiters must not hang.
	close(replySent)
	return err
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
			_ = s.resetLocally(notify, spdy.Cancel)
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

// RemoveStreams tells the connection the caller is done with streams: data they hold
// unread, and data the client still sends on them, is dropped instead of waiting for a
// reader (spdystream's frame handler blocks for good there). They leave the connection
// when both sides closed them or either reset them, as before.
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
