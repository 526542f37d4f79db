package spdyconn

import (
	"encoding/binary"
	"errors"
	"net/http"
	"slices"
	"strings"
)

// SPDY/3 sends every header block through one zlib stream per direction, primed with the
// protocol's header dictionary. spdystream's Framer compresses it with a BestCompression
// zlib.Writer whose flate state (~814 KB: compress/flate's hash tables) is built on the
// connection's first SYN_REPLY, and it was a third of the manager's heap with one
// port-forward connection per etcd health check. A zlib stream made only of stored
// (uncompressed) deflate blocks is just as valid for the client's zlib reader and needs
// no state but whether the zlib header went out. Our header blocks are a few bytes (the
// SYN_REPLY of port-forward carries no headers), so compressing them gains nothing.

// zlibHeader opens the stream (RFC 1950): CMF 0x78 is deflate with a 32 KiB window; FLG
// 0x20 sets FDICT with FLEVEL 0, and 0x7820 is a multiple of 31, so FCHECK is 0. Then
// comes DICTID, the Adler-32 of SPDY/3's header dictionary, which the reader compares
// with its own (TestDictionaryIDIsSpdystreams reads it from spdystream's writer).
var zlibHeader = []byte{0x78, 0x20, 0xe3, 0xc6, 0xa7, 0xc2}

// syncFlushMarker is an empty, non-final stored block, as a zlib sync flush ends. Go's
// flate reader hands out a stored block's data only at the next block boundary; without
// the marker it would read past the frame for the next block and fail.
var syncFlushMarker = []byte{0x00, 0x00, 0x00, 0xff, 0xff}

// maxStoredBlock is the most bytes one stored block holds (its LEN is 16 bits).
const maxStoredBlock = 0xffff

// maxControlFramePayload is what the 24-bit length of a control frame can say.
const maxControlFramePayload = 1<<24 - 1

var errHeaderBlockTooLarge = errors.New("spdyconn: header block too large for a frame")

// headerBlockEncoder writes this side's zlib stream of header blocks. It is not safe for
// concurrent use: frames with header blocks must reach the wire in the order encoded.
type headerBlockEncoder struct {
	started bool // the zlib header went out
}

// appendSynReply appends a SYN_REPLY frame for stream id with headers h.
func (e *headerBlockEncoder) appendSynReply(dst []byte, id uint32, fin bool, h http.Header) ([]byte, error) {
	var flags byte
	if fin {
		flags = 0x01 // FLAG_FIN
	}
	start := len(dst)
	// Control bit and version 3, type 2 (SYN_REPLY), flags, then the length, filled in below.
	dst = append(dst, 0x80, 0x03, 0x00, 0x02, flags, 0, 0, 0)
	dst = binary.BigEndian.AppendUint32(dst, id&0x7fffffff)
	dst = e.appendHeaderBlock(dst, h)
	length := len(dst) - start - 8
	if length > maxControlFramePayload {
		return dst[:start], errHeaderBlockTooLarge
	}
	dst[start+5], dst[start+6], dst[start+7] = byte(length>>16), byte(length>>8), byte(length)
	return dst, nil
}

// appendHeaderBlock appends h as SPDY/3 name/value pairs inside stored deflate blocks.
func (e *headerBlockEncoder) appendHeaderBlock(dst []byte, h http.Header) []byte {
	if !e.started {
		dst = append(dst, zlibHeader...)
		e.started = true
	}
	raw := appendNameValues(nil, h)
	for len(raw) > 0 {
		n := min(len(raw), maxStoredBlock)
		// BFINAL 0, BTYPE 00 (stored), padded to the byte; then LEN and NLEN, little-endian.
		dst = append(dst, 0x00, byte(n), byte(n>>8), ^byte(n), ^byte(n>>8))
		dst = append(dst, raw[:n]...)
		raw = raw[n:]
	}
	return append(dst, syncFlushMarker...)
}

// appendNameValues appends the uncompressed SPDY/3 header block: the count of names,
// then each lower-cased name and its values joined by NUL, all 32-bit length-prefixed.
func appendNameValues(dst []byte, h http.Header) []byte {
	names := make([]string, 0, len(h))
	for name := range h {
		names = append(names, name)
	}
	slices.Sort(names) // deterministic frames
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(names)))
	for _, name := range names {
		lower := strings.ToLower(name)
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(lower)))
		dst = append(dst, lower...)
		value := strings.Join(h[name], "\x00")
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(value)))
		dst = append(dst, value...)
	}
	return dst
}
