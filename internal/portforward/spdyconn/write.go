package spdyconn

import (
	"io"
	"net/http"
	"sync"

	"github.com/moby/spdystream/spdy"
)

// frameWriter serializes the frames of one connection. Each frame is assembled in a
// pooled buffer and written with one Write: the WebSocket tunnel sends every Write as a
// message and TLS as a record, and spdystream's Framer writes a frame field by field.
type frameWriter struct {
	mu      sync.Mutex
	w       io.Writer
	framer  *spdy.Framer // writes into buf; only frames without a header block, so its compressor stays unbuilt
	buf     *frameBuffer
	headers headerBlockEncoder
	wrote   func() // after every frame: the idle timer counts frames out too
	failed  func() // after a failed write
}

func newFrameWriter(w io.Writer, wrote, failed func()) *frameWriter {
	buf := &frameBuffer{}
	// NewFramer only records its compressor's settings: compress/zlib builds the flate
	// state on the first Write, which only frames with a header block would make.
	framer, _ := spdy.NewFramer(buf, nil) // errors only for an invalid compression level
	return &frameWriter{w: w, framer: framer, buf: buf, wrote: wrote, failed: failed}
}

// writeFrame writes a frame that carries no header block: DATA, RST_STREAM, PING, GOAWAY.
func (fw *frameWriter) writeFrame(frame spdy.Frame) error {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	fw.buf.b = getFrameBuffer()
	defer func() { putFrameBuffer(fw.buf.b); fw.buf.b = nil }()
	if err := fw.framer.WriteFrame(frame); err != nil {
		return err
	}
	return fw.flush(*fw.buf.b)
}

// writeSynReply writes the SYN_REPLY of stream id, encoding its header block ourselves.
func (fw *frameWriter) writeSynReply(id uint32, h http.Header) error {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	b := getFrameBuffer()
	defer putFrameBuffer(b)
	frame, err := fw.headers.appendSynReply((*b)[:0], id, false, h)
	*b = frame
	if err != nil {
		return err
	}
	return fw.flush(frame)
}

func (fw *frameWriter) flush(frame []byte) error {
	if _, err := fw.w.Write(frame); err != nil {
		fw.failed()
		return err
	}
	fw.wrote()
	return nil
}

// frameBuffer is the Framer's writer: it appends to the buffer of the frame being written.
type frameBuffer struct{ b *[]byte }

func (f *frameBuffer) Write(p []byte) (int, error) {
	*f.b = append(*f.b, p...)
	return len(p), nil
}

// frameBuffers are shared by all connections: an idle connection holds none.
var frameBuffers = sync.Pool{New: func() any {
	b := make([]byte, 0, 512)
	return &b
}}

// maxPooledFrameBuffer keeps the pool from holding the odd huge frame's buffer.
const maxPooledFrameBuffer = 2 * maxDataFramePayload

func getFrameBuffer() *[]byte {
	b := frameBuffers.Get().(*[]byte)
	*b = (*b)[:0]
	return b
}

func putFrameBuffer(b *[]byte) {
	if cap(*b) <= maxPooledFrameBuffer {
		frameBuffers.Put(b)
	}
}
