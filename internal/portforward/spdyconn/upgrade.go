package spdyconn

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"

	"k8s.io/streaming/pkg/httpstream"
)

// HeaderSpdy31 is the Upgrade token of SPDY/3.1.
const HeaderSpdy31 = "SPDY/3.1"

// Upgrade switches req's connection to SPDY/3.1, as k8s.io/streaming's
// spdy.NewResponseUpgrader().UpgradeResponse does, and serves it with NewServer. When
// the request cannot be upgraded it answers with an error and returns nil.
func Upgrade(w http.ResponseWriter, req *http.Request, newStream httpstream.NewStreamHandler) *Conn {
	connection := strings.ToLower(req.Header.Get(httpstream.HeaderConnection))
	upgrade := strings.ToLower(req.Header.Get(httpstream.HeaderUpgrade))
	if !strings.Contains(connection, strings.ToLower(httpstream.HeaderUpgrade)) || !strings.Contains(upgrade, strings.ToLower(HeaderSpdy31)) {
		http.Error(w, fmt.Sprintf("unable to upgrade: missing upgrade headers in request: %#v", req.Header), http.StatusBadRequest)
		return nil
	}
	hijacker, ok := w.(http.Hijacker) // not over HTTP/2, which SPDY clients do not ask for
	if !ok {
		http.Error(w, "unable to upgrade: unable to hijack response", http.StatusInternalServerError)
		return nil
	}
	w.Header().Add(httpstream.HeaderConnection, httpstream.HeaderUpgrade)
	w.Header().Add(httpstream.HeaderUpgrade, HeaderSpdy31)
	w.WriteHeader(http.StatusSwitchingProtocols) // net/http sends it when hijacked
	c, rw, err := hijacker.Hijack()
	if err != nil {
		return nil
	}
	return NewServer(&hijackedConn{Conn: c, r: rw.Reader}, newStream)
}

// hijackedConn reads through the server's bufio.Reader: the client may have sent its
// first frames with the request, and they are in that buffer already.
type hijackedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *hijackedConn) Read(p []byte) (int, error) { return c.r.Read(p) }
