package spdyconn

import (
	"bytes"
	"encoding/binary"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/moby/spdystream/spdy"
)

// The DICTID we write is the one spdystream's own writer puts after its zlib header,
// which is the Adler-32 of SPDY/3's header dictionary that the reader checks.
func TestDictionaryIDIsSpdystreams(t *testing.T) {
	var buf bytes.Buffer
	f, err := spdy.NewFramer(&buf, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.WriteFrame(&spdy.SynReplyFrame{StreamId: 1, Headers: http.Header{}}); err != nil {
		t.Fatal(err)
	}
	// 8 bytes of control frame header, 4 of stream ID, then CMF, FLG and DICTID.
	theirs := buf.Bytes()[12:18]
	if theirs[1]&0x20 == 0 {
		t.Fatalf("spdystream's zlib header has no FDICT: % x", theirs)
	}
	if !bytes.Equal(theirs[2:], zlibHeader[2:]) {
		t.Fatalf("DICTID: spdystream writes % x, we write % x", theirs[2:], zlibHeader[2:])
	}
	if zlibHeader[0] != theirs[0] || zlibHeader[1]&0x20 == 0 || binary.BigEndian.Uint16(zlibHeader[:2])%31 != 0 {
		t.Fatalf("invalid zlib header % x", zlibHeader[:2])
	}
}

// spdystream's Framer, which client-go and kubectl read with, decodes our SYN_REPLY
// frames in sequence, mixed with frames its own writer wrote, header blocks of every
// size included (one larger than a stored block).
func TestSpdystreamReadsOurSynReplies(t *testing.T) {
	var wire bytes.Buffer
	theirs, err := spdy.NewFramer(&wire, &wire)
	if err != nil {
		t.Fatal(err)
	}
	var enc headerBlockEncoder
	replies := []http.Header{
		{},
		{"X-Stream-Protocol-Version": {"portforward.k8s.io"}},
		{"A": {"1", "2"}, "Port": {"8080"}, "Requestid": {"0"}, "Streamtype": {"data"}},
		{"Big": {strings.Repeat("x", 100_000)}},
		{},
	}
	for i, h := range replies {
		frame, err := enc.appendSynReply(nil, uint32(2*i+1), i == 2, h)
		if err != nil {
			t.Fatal(err)
		}
		wire.Write(frame)
		if err := theirs.WriteFrame(&spdy.DataFrame{StreamId: spdy.StreamId(2*i + 1), Data: []byte("data")}); err != nil {
			t.Fatal(err)
		}
	}
	for i, want := range replies {
		got, err := theirs.ReadFrame()
		if err != nil {
			t.Fatalf("reply %d: %v", i, err)
		}
		reply, ok := got.(*spdy.SynReplyFrame)
		if !ok {
			t.Fatalf("reply %d: read %T", i, got)
		}
		if reply.StreamId != spdy.StreamId(2*i+1) || (reply.CFHeader.Flags&spdy.ControlFlagFin != 0) != (i == 2) {
			t.Fatalf("reply %d: stream %d flags %x", i, reply.StreamId, reply.CFHeader.Flags)
		}
		if !reflect.DeepEqual(reply.Headers, want) { // the reader canonicalizes the names
			t.Fatalf("reply %d: headers %v, want %v", i, reply.Headers, want)
		}
		if data, err := theirs.ReadFrame(); err != nil || string(data.(*spdy.DataFrame).Data) != "data" {
			t.Fatalf("data after reply %d: %v %v", i, data, err)
		}
	}
}
