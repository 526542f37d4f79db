package spdyconn

import (
	"errors"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/moby/spdystream/spdy"
)

// One process serves every cluster's port-forwards, so what one client may make it hold
// is bounded for port-forward's frames, not for SPDY's: spdystream's Framer, as kubelet
// uses it, takes control frames of 16 MiB, header blocks of 1,000 names and values of
// 1 MiB each (2 GiB once inflated) and allocates a DATA frame's declared 16 MiB before
// its first byte. Port-forward's SYN_STREAMs carry three short headers (streamtype,
// port, requestid) in well under a hundred bytes, and client-go writes DATA frames of
// at most 32 KiB (io.Copy's buffer). A frame past these bounds ends the connection.
const (
	// maxControlFrameLength bounds a control frame's length, checked on its header.
	maxControlFrameLength = 16 << 10
	// maxHeaderCount and maxHeaderFieldSize bound a header block as the Framer
	// inflates it (spdystream's WithMaxHeaderCount, WithMaxHeaderFieldSize).
	maxHeaderCount     = 16
	maxHeaderFieldSize = 1 << 10
	// maxHeaderBlock bounds what a stream keeps of its SYN_STREAM's headers
	// (headerBlockSize).
	maxHeaderBlock = 4 << 10

	// maxDataChunk is the most of a DATA frame read (and allocated) at a time.
	maxDataChunk = 32 << 10
	// maxBufferedPerStream is a stream's receive window: the data it holds for a
	// reader that does not keep up. Past it the stream is reset, unless it is the only
	// one that may receive data: then the connection waits for its reader (deliver).
	maxBufferedPerStream = 128 << 10
	// maxBufferedPerConn bounds the same for all streams of a connection together.
	maxBufferedPerConn = 1 << 20
)

// defaultStallTimeout is how long the connection waits for readers to make room,
// when it waits at all (Conn.deliver), before it resets a stream. SPDY's flow control
// would have the client stop at the window, but spdystream, client-go's SPDY, ignores
// windows: only TCP holds it back, and for every stream of the connection at once.
const defaultStallTimeout = 2 * time.Second

var stallTimeoutNanos atomic.Int64 // tests shorten it

func init() { stallTimeoutNanos.Store(int64(defaultStallTimeout)) }

func stallTimeout() time.Duration { return time.Duration(stallTimeoutNanos.Load()) }

var (
	errControlFrameTooLarge = errors.New("spdyconn: control frame too large")
	errZeroStreamID         = errors.New("spdyconn: DATA frame for stream 0")
	errHeadersTooLarge      = errors.New("spdyconn: SYN_STREAM headers too large")
)

// frameHeaderSize is the length of every frame's header: control and DATA alike.
const frameHeaderSize = 8

// frameReader is the connection as the Framer reads it: serve reads a frame's header
// itself, and hands the Framer a control frame with its header put back in front.
type frameReader struct {
	r    io.Reader
	head [frameHeaderSize]byte
	off  int // bytes of head the Framer read; frameHeaderSize when there are none left
}

func (f *frameReader) Read(p []byte) (int, error) {
	if f.off < len(f.head) {
		n := copy(p, f.head[f.off:])
		f.off += n
		return n, nil
	}
	return f.r.Read(p)
}

// newControlFramer returns the Framer that reads control frames from r, within the
// bounds above.
func newControlFramer(r io.Reader) *spdy.Framer {
	f, _ := spdy.NewFramerWithOptions(nil, r, // errors only for an invalid compression level
		spdy.WithMaxControlFramePayloadSize(maxControlFrameLength),
		spdy.WithMaxHeaderCount(maxHeaderCount),
		spdy.WithMaxHeaderFieldSize(maxHeaderFieldSize),
	)
	return f
}

// headerBlockSize is what h holds: its names and values, and a string header per value
// (a value of NULs splits into as many empty values).
func headerBlockSize(h http.Header) int {
	n := 0
	for name, values := range h {
		n += len(name)
		for _, v := range values {
			n += len(v) + 16
		}
	}
	return n
}
