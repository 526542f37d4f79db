package spdyconn_test

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/spdystream/spdy"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/portforward/spdyconn"
)

// upgradeServer serves Upgrade and closes the upgraded connections when the test ends
// (http.Server does not track hijacked ones).
func upgradeServer(t *testing.T, a *acceptor) *httptest.Server {
	var mu sync.Mutex
	var conns []*spdyconn.Conn
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if c := spdyconn.Upgrade(w, req, a.handle); c != nil {
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}))
	t.Cleanup(func() {
		srv.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return srv
}

// A client may send its first frames right behind the request, before it read the 101:
// they are in the server's bufio.Reader at the hijack, and must not be lost.
func TestUpgradeReadsFramesSentWithTheRequest(t *testing.T) {
	a := newAcceptor()
	srv := upgradeServer(t, a)
	var first bytes.Buffer
	fmt.Fprintf(&first, "POST /portforward HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nContent-Length: 0\r\n\r\n")
	f, err := spdy.NewFramer(&first, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.WriteFrame(synStream(1, 0)); err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write(first.Bytes()); err != nil { // one write: request and frame
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Upgrade") != "SPDY/3.1" || !strings.EqualFold(resp.Header.Get("Connection"), "Upgrade") {
		t.Fatalf("response %d %v", resp.StatusCode, resp.Header)
	}
	reader, err := spdy.NewFramer(nil, br)
	if err != nil {
		t.Fatal(err)
	}
	reply, err := reader.ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := reply.(*spdy.SynReplyFrame); !ok || r.StreamId != 1 {
		t.Fatalf("want SYN_REPLY 1, read %#v", reply)
	}
	if got := a.next(t).Headers().Get("Streamtype"); got != "data" {
		t.Fatalf("stream type %q", got)
	}
}

func TestUpgradeRefusesRequestsWithoutSPDYHeaders(t *testing.T) {
	srv := upgradeServer(t, newAcceptor())
	resp, err := http.Post(srv.URL, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("status %d, want 400", resp.StatusCode)
	}
}
