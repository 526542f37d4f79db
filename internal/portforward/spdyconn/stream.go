package spdyconn

import (
	"errors"
	"io"
	"net/http"
	"sync"

	"github.com/moby/spdystream/spdy"
)

var (
	// ErrStreamClosed is returned by writes after Close or Reset, and by Close after either.
	ErrStreamClosed = errors.New("spdyconn: write on closed stream")
	// ErrConnClosed is returned by writes once the connection is closing.
	ErrConnClosed = errors.New("spdyconn: connection closed")
)

// maxDataFramePayload splits large writes, so one frame (and its pooled buffer) stays
// the size of a copy buffer and other streams' frames are not held back behind it.
const maxDataFramePayload = 32 << 10

// Stream is a client-initiated stream. It implements httpstream.Stream.
type Stream struct {
	conn    *Conn
	id      uint32
	headers http.Header

	replied   chan struct{} // closed when the SYN_REPLY is out, or the stream is reset
	readable  chan struct{} // a signal: data or the remote end arrived
	sendMu    sync.Mutex    // orders this side's frames: no DATA after FIN or RST
	replyOnce sync.Once

	mu           sync.Mutex
	pending      [][]byte // received data not read yet
	buffered     int      // bytes in pending, also counted in conn.buffered
	localClosed  bool     // FIN sent (or the stream was opened unidirectional)
	remoteClosed bool     // FIN received
	reset        bool     // RST_STREAM sent or received, or the connection ended
	detached     bool     // RemoveStreams: nobody reads it any more, new data is dropped
}

func newStream(c *Conn, f *spdy.SynStreamFrame) *Stream {
	return &Stream{
		conn: c, id: uint32(f.StreamId), headers: f.Headers,
		replied:      make(chan struct{}),
		readable:     make(chan struct{}, 1),
		localClosed:  f.CFHeader.Flags&spdy.ControlFlagUnidirectional != 0,
		remoteClosed: f.CFHeader.Flags&spdy.ControlFlagFin != 0,
	}
}

// Headers returns the headers of the client's SYN_STREAM.
func (s *Stream) Headers() http.Header { return s.headers }

// Identifier returns the stream ID.
func (s *Stream) Identifier() uint32 { return s.id }

// Read returns the data the client sent, then io.EOF once it half-closed the stream,
// or at once when the stream was reset or the connection ended.
func (s *Stream) Read(p []byte) (int, error) {
	for {
		s.mu.Lock()
		if len(s.pending) > 0 {
			n := copy(p, s.pending[0])
			if n == len(s.pending[0]) {
				s.pending[0] = nil
				s.pending = s.pending[1:]
				if len(s.pending) == 0 {
					s.pending = nil // let the backing array go
				}
			} else {
				s.pending[0] = s.pending[0][n:]
			}
			s.buffered -= n
			s.mu.Unlock()
			s.conn.release(n)
			return n, nil
		}
		if s.remoteClosed || s.reset {
			s.mu.Unlock()
			return 0, io.EOF
		}
		s.mu.Unlock()
		select {
		case <-s.readable:
		case <-s.conn.closing:
			// Nothing more comes from the client (shutdown resets the streams the
			// connection still holds; this covers the others).
			s.mu.Lock()
			s.remoteClosed = true
			s.mu.Unlock()
		}
	}
}

// Write sends p as DATA frames, after the SYN_REPLY.
func (s *Stream) Write(p []byte) (int, error) {
	if err := s.waitReplied(); err != nil {
		return 0, err
	}
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	if err := s.sendable(); err != nil {
		return 0, err
	}
	n := 0
	for n < len(p) {
		if err := s.sendable(); err != nil { // a reset from the client stops a long write
			return n, err
		}
		chunk := p[n:min(len(p), n+maxDataFramePayload)]
		if err := s.conn.writer.writeFrame(&spdy.DataFrame{StreamId: spdy.StreamId(s.id), Data: chunk}); err != nil {
			return n, err
		}
		n += len(chunk)
	}
	return n, nil
}

// Close half-closes the stream: an empty DATA frame with FIN; the client may still send.
func (s *Stream) Close() error {
	if err := s.waitReplied(); err != nil {
		return err
	}
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	if err := s.sendable(); err != nil {
		return err
	}
	s.mu.Lock()
	s.localClosed = true
	done := s.remoteClosed
	s.mu.Unlock()
	if done {
		s.conn.forget(s)
	}
	return s.conn.writer.writeFrame(&spdy.DataFrame{StreamId: spdy.StreamId(s.id), Flags: spdy.DataFlagFin})
}

// Reset closes both directions: RST_STREAM with CANCEL, unless the stream already ended.
func (s *Stream) Reset() error {
	s.conn.forget(s)
	return s.resetLocally(true, spdy.Cancel)
}

// resetLocally ends the stream here, telling the client (RST_STREAM with status) if notify.
func (s *Stream) resetLocally(notify bool, status spdy.RstStreamStatus) error {
	if !notify {
		s.markReset() // no sendMu: a writer may be stuck on the dying connection
		return nil
	}
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	if !s.markReset() {
		return nil
	}
	return s.conn.writer.writeFrame(&spdy.RstStreamFrame{StreamId: spdy.StreamId(s.id), Status: status})
}

// markReset ends both directions and drops unread data. It reports whether the stream
// was still open, that is whether a RST_STREAM would tell the client anything.
func (s *Stream) markReset() bool {
	s.mu.Lock()
	open := !s.reset && !(s.localClosed && s.remoteClosed)
	s.reset = true
	dropped := s.drop()
	s.mu.Unlock()
	s.conn.release(dropped)
	s.replyOnce.Do(func() { close(s.replied) })
	signal(s.readable)
	return open
}

// sendReply writes the SYN_REPLY, which lets writes start.
func (s *Stream) sendReply() error {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	s.mu.Lock()
	reset := s.reset
	s.mu.Unlock()
	var err error
	if !reset {
		err = s.conn.writer.writeSynReply(s.id, http.Header{})
	}
	s.replyOnce.Do(func() { close(s.replied) })
	return err
}

// enqueue queues data from the client for Read, or drops it when nobody will read it.
// It reports false, keeping nothing, when the data does not fit the stream's window or
// the connection's budget (Conn.deliver waits or resets a stream then).
func (s *Stream) enqueue(data []byte) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reset || s.remoteClosed || s.detached {
		return true // data after FIN or RST is dropped, as spdystream does
	}
	if s.buffered+len(data) > maxBufferedPerStream || s.conn.buffered.Load()+int64(len(data)) > maxBufferedPerConn {
		return false
	}
	s.pending = append(s.pending, data)
	s.buffered += len(data)
	s.conn.buffered.Add(int64(len(data)))
	signal(s.readable)
	return true
}

// holds is the data queued for the reader.
func (s *Stream) holds() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buffered
}

// accepting reports whether data for the stream would be kept for a reader.
func (s *Stream) accepting() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.reset && !s.remoteClosed && !s.detached
}

// detach drops what the stream holds and what comes for it: RemoveStreams says its
// reader is gone, and waiting for it would stall every stream.
func (s *Stream) detach() {
	s.mu.Lock()
	s.detached = true
	dropped := s.drop()
	s.mu.Unlock()
	s.conn.release(dropped)
}

// drop empties pending and returns the bytes it held. s.mu is held.
func (s *Stream) drop() int {
	n := s.buffered
	s.pending, s.buffered = nil, 0
	return n
}

// remoteClose records the client's FIN.
func (s *Stream) remoteClose() {
	s.mu.Lock()
	s.remoteClosed = true
	done := s.localClosed
	s.mu.Unlock()
	signal(s.readable)
	if done {
		s.conn.forget(s)
	}
}

func (s *Stream) waitReplied() error {
	select {
	case <-s.replied:
		return nil
	case <-s.conn.closing:
		return ErrConnClosed
	}
}

func (s *Stream) sendable() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.localClosed || s.reset {
		return ErrStreamClosed
	}
	return nil
}

// signal wakes the waiter on a one-slot channel, if any, without blocking.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
