package mux

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// TestResponsesGoOutInSmallDataFrames reads a 100 KiB LIST at the HTTP/2 frame level, as a client
// that accepts frames of the protocol's default 16 KiB: every DATA frame holds at most
// maxDataFrame bytes (the buffer the server keeps per connection grows to its largest frame).
// Each response's header block decodes on its own: the server keeps no header compression table
// per connection (a fresh decoder would fail on a reference to an entry of an earlier response).
func TestResponsesGoOutInSmallDataFrames(t *testing.T) {
	g := NewWithT(t)
	m := newTestMux(t)
	cc := newClusterCerts(t)
	l, err := m.InitWorkloadClusterListener("default/frames")
	g.Expect(err).NotTo(HaveOccurred())
	runningPod(t, l, "kube-apiserver-n0")
	g.Expect(m.AddAPIServer("default/frames", "kube-apiserver-n0", cc.ca, cc.caKey)).To(Succeed())
	c, _ := l.GetClient()
	for i := range 25 {
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("cm-%02d", i)},
			Data:       map[string]string{"data": strings.Repeat("x", 4<<10)},
		}
		g.Expect(c.Create(context.Background(), cm)).To(Succeed())
	}
	h2 := dialH2(t, l, capiRESTConfig(t, "frames", l, cc))

	for stream := uint32(1); stream <= 5; stream += 2 {
		status, body, largest := h2.get(stream, "/api/v1/namespaces/default/configmaps")
		g.Expect(status).To(Equal("200"))
		g.Expect(body).To(BeNumerically(">", 100<<10), "the whole list was read")
		g.Expect(largest).To(BeNumerically("<=", maxDataFrame), "the largest DATA frame")
	}
}

// h2Conn is an HTTP/2 client at the frame level.
type h2Conn struct {
	t    *testing.T
	host string
	fr   *http2.Framer
}

func dialH2(t *testing.T, l *WorkloadClusterListener, cfg *rest.Config) *h2Conn {
	t.Helper()
	g := NewWithT(t)
	cert, err := tls.X509KeyPair(cfg.CertData, cfg.KeyData)
	g.Expect(err).NotTo(HaveOccurred())
	roots := x509.NewCertPool()
	g.Expect(roots.AppendCertsFromPEM(cfg.CAData)).To(BeTrue())
	conn, err := tls.Dial("tcp", l.HostPort(), &tls.Config{
		Certificates: []tls.Certificate{cert}, RootCAs: roots, ServerName: l.Host(), NextProtos: []string{"h2"},
	})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = conn.Close() })
	g.Expect(conn.ConnectionState().NegotiatedProtocol).To(Equal("h2"))
	g.Expect(conn.SetDeadline(time.Now().Add(20 * time.Second))).To(Succeed())
	_, err = conn.Write([]byte(http2.ClientPreface))
	g.Expect(err).NotTo(HaveOccurred())
	fr := http2.NewFramer(conn, conn)
	// A window wide enough for every answer; the maximum frame size stays the default 16 KiB.
	g.Expect(fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20})).To(Succeed())
	g.Expect(fr.WriteWindowUpdate(0, 1<<24)).To(Succeed())
	return &h2Conn{t: t, host: l.HostPort(), fr: fr}
}

// get sends a GET on stream and reads its answer: the status (its header block decoded with a
// decoder of its own), the body's length and the largest DATA frame's.
func (h *h2Conn) get(stream uint32, path string) (status string, body, largest int) {
	h.t.Helper()
	g := NewWithT(h.t)
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, f := range [][2]string{
		{":method", "GET"}, {":scheme", "https"}, {":authority", h.host}, {":path", path}, {"accept", "application/json"},
	} {
		g.Expect(enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})).To(Succeed())
	}
	g.Expect(h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: stream, BlockFragment: block.Bytes(), EndStream: true, EndHeaders: true})).To(Succeed())
	for {
		f, err := h.fr.ReadFrame()
		g.Expect(err).NotTo(HaveOccurred())
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				g.Expect(h.fr.WriteSettingsAck()).To(Succeed())
			}
		case *http2.HeadersFrame:
			g.Expect(f.HeadersEnded()).To(BeTrue(), "a response header block in one frame")
			fields, err := hpack.NewDecoder(4096, nil).DecodeFull(f.HeaderBlockFragment())
			g.Expect(err).NotTo(HaveOccurred(), "the header block of stream %d decoded on its own", f.StreamID)
			for _, hf := range fields {
				if hf.Name == ":status" {
					status = hf.Value
				}
			}
			if f.StreamEnded() {
				return status, body, largest
			}
		case *http2.DataFrame:
			body += len(f.Data())
			largest = max(largest, len(f.Data()))
			if f.StreamEnded() {
				return status, body, largest
			}
		case *http2.GoAwayFrame, *http2.RSTStreamFrame:
			h.t.Fatalf("the server ended the stream: %v", f)
		}
	}
}
