package portforward_test

import (
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	gwebsocket "github.com/gorilla/websocket"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/transport"
	"k8s.io/streaming/pkg/httpstream"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/portforward"
)

// TestMain fails the package if any goroutine outlives the tests: every
// handler, forwarder, timer and connection must be gone once the tests closed
// their clients and servers.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		// spdystream ends each connection in a goroutine that may wait up to 1s
		// to hand a close error to nobody; give such goroutines 5s to finish.
		// Under heavy load spdystream can also leave a frame handler blocked on a stream
		// whose reader already left, and the shutdown goroutines waiting for it; those are
		// inside the library (moby/spdystream) and end with the process. Everything of
		// ours must still be gone.
		ignore := []goleak.Option{
			goleak.IgnoreTopFunction("github.com/moby/spdystream.(*Connection).handleDataFrame"),
			goleak.IgnoreTopFunction("github.com/moby/spdystream.(*Connection).shutdown"),
			goleak.IgnoreAnyFunction("github.com/moby/spdystream.(*Connection).shutdown.func1"),
			goleak.IgnoreAnyFunction("github.com/moby/spdystream.(*Connection).Serve"),
		}
		var err error
		for range 50 {
			if err = goleak.Find(ignore...); err == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

func forwarded(protocol string) float64 {
	return testutil.ToFloat64(portforward.StreamsTotal().WithLabelValues(protocol, "forwarded"))
}

func TestClientGoOverSPDY(t *testing.T) {
	g := NewWithT(t)
	echo := newEchoServer(t)
	e := newEnv(t, portforward.Options{})
	e.addPod("default", "echo", corev1.PodRunning, map[int32]string{8080: echo.addr()})

	before := forwarded("spdy")
	local := forwarder(t, e.spdyDialer("default", "echo"), 8080)
	for i := range 3 { // several connections over one SPDY connection
		msg := fmt.Sprintf("hello %d over spdy", i)
		g.Expect(roundTrip(fmt.Sprintf("127.0.0.1:%d", local), msg)).To(Equal(msg))
	}
	g.Expect(forwarded("spdy") - before).To(BeEquivalentTo(3))
}

func TestClientGoOverWebSocketTunnel(t *testing.T) {
	g := NewWithT(t)
	echo := newEchoServer(t)
	e := newEnv(t, portforward.Options{})
	e.addPod("default", "echo", corev1.PodRunning, map[int32]string{8080: echo.addr()})

	before, beforeSPDY := forwarded("websocket"), forwarded("spdy")
	local := forwarder(t, e.kubectlDialer("default", "echo"), 8080)
	msg := strings.Repeat("large payload ", 50_000) // several WebSocket messages
	g.Expect(roundTrip(fmt.Sprintf("127.0.0.1:%d", local), msg)).To(Equal(msg))
	g.Expect(forwarded("websocket")-before).To(BeEquivalentTo(1), "kubectl's dialer uses the WebSocket tunnel when offered")
	g.Expect(forwarded("spdy")).To(Equal(beforeSPDY))
}

func TestFallbackToSPDYWhenWebSocketsAreRefused(t *testing.T) {
	g := NewWithT(t)
	echo := newEchoServer(t)
	e := newEnv(t, portforward.Options{DisableWebSockets: true})
	e.addPod("default", "echo", corev1.PodRunning, map[int32]string{8080: echo.addr()})

	_, _, err := e.tunnelDialer("default", "echo").Dial(portforward.ProtocolV1)
	g.Expect(httpstream.IsUpgradeFailure(err)).To(BeTrue(), "refused upgrade: %v", err)

	before := forwarded("spdy")
	local := forwarder(t, e.kubectlDialer("default", "echo"), 8080)
	g.Expect(roundTrip(fmt.Sprintf("127.0.0.1:%d", local), "fallback")).To(Equal("fallback"))
	g.Expect(forwarded("spdy") - before).To(BeEquivalentTo(1))
}

func TestMissingPodIs404BeforeUpgrade(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t, portforward.Options{})
	for name, d := range map[string]httpstream.Dialer{"spdy": e.spdyDialer("default", "nope"), "websocket": e.tunnelDialer("default", "nope")} {
		_, _, err := d.Dial(portforward.ProtocolV1)
		g.Expect(err).To(HaveOccurred(), name)
		g.Expect(err.Error()).To(ContainSubstring(`pods "nope" not found`), name)
	}

	// And a plain request sees the Status itself.
	rt, err := transport.New(&transport.Config{TLS: transport.TLSConfig{CAData: e.config.CAData}})
	g.Expect(err).NotTo(HaveOccurred())
	resp, err := (&http.Client{Transport: rt}).Post(e.url("default", "nope").String(), "", nil)
	g.Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	g.Expect(resp.StatusCode).To(Equal(http.StatusNotFound))
	body, _ := io.ReadAll(resp.Body)
	g.Expect(string(body)).To(ContainSubstring(`"kind":"Status"`))
	g.Expect(string(body)).To(ContainSubstring(`"reason":"NotFound"`))
}

// openPair opens an error and a data stream for port the way client-go does.
func openPair(t testing.TB, conn httpstream.Connection, port int32, requestID string) (errs, data httpstream.Stream) {
	t.Helper()
	h := http.Header{}
	h.Set(corev1.PortHeader, fmt.Sprint(port))
	h.Set(corev1.PortForwardRequestIDHeader, requestID)
	h.Set(corev1.StreamType, corev1.StreamTypeError)
	errs, err := conn.CreateStream(h)
	if err != nil {
		t.Fatal(err)
	}
	_ = errs.Close() // we never write to it
	h.Set(corev1.StreamType, corev1.StreamTypeData)
	data, err = conn.CreateStream(h)
	if err != nil {
		t.Fatal(err)
	}
	return errs, data
}

func TestFailedForwardsReportOnTheErrorStream(t *testing.T) {
	echo := newEchoServer(t)
	e := newEnv(t, portforward.Options{})
	e.addPod("kube-system", "etcd-a", corev1.PodRunning, map[int32]string{2379: echo.addr()})
	e.addPod("kube-system", "etcd-b", corev1.PodPending, map[int32]string{2379: echo.addr()})
	e.addPod("kube-system", "etcd-c", corev1.PodRunning, map[int32]string{2379: "127.0.0.1:1"}) // nothing listens

	for _, tc := range []struct {
		name, pod string
		port      int32
		want      string
	}{
		{"not running", "etcd-b", 2379, "is not running"},
		{"wrong port", "etcd-a", 6443, "does not serve port 6443"},
		{"dial fails", "etcd-c", 2379, "connection refused"},
	} {
		for transport, d := range map[string]httpstream.Dialer{"spdy": e.spdyDialer("kube-system", tc.pod), "websocket": e.tunnelDialer("kube-system", tc.pod)} {
			t.Run(tc.name+"/"+transport, func(t *testing.T) {
				g := NewWithT(t)
				conn, _, err := d.Dial(portforward.ProtocolV1)
				g.Expect(err).NotTo(HaveOccurred())
				defer conn.Close()
				errs, data := openPair(t, conn, tc.port, "0")
				msg, err := io.ReadAll(errs)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(string(msg)).To(ContainSubstring(tc.want))
				_, err = io.ReadAll(data)
				_ = err // reset or EOF: either way no data from a pod we did not reach
			})
		}
	}
}

func TestStreamCreationTimeout(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t, portforward.Options{StreamCreationTimeout: 50 * time.Millisecond})
	e.addPod("default", "echo", corev1.PodRunning, map[int32]string{8080: newEchoServer(t).addr()})

	conn, _, err := e.spdyDialer("default", "echo").Dial(portforward.ProtocolV1)
	g.Expect(err).NotTo(HaveOccurred())
	defer conn.Close()
	h := http.Header{}
	h.Set(corev1.PortHeader, "8080")
	h.Set(corev1.PortForwardRequestIDHeader, "7")
	h.Set(corev1.StreamType, corev1.StreamTypeError)
	errs, err := conn.CreateStream(h)
	g.Expect(err).NotTo(HaveOccurred())
	_ = errs.Close()
	// No data stream follows: the server gives up on the pair.
	msg, err := io.ReadAll(errs)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(msg)).To(ContainSubstring("timed out waiting for the other stream of request 7"))
}

func TestIdleTimeoutClosesTheConnection(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t, portforward.Options{IdleTimeout: 100 * time.Millisecond})
	e.addPod("default", "echo", corev1.PodRunning, map[int32]string{8080: newEchoServer(t).addr()})
	for _, d := range []httpstream.Dialer{e.spdyDialer("default", "echo"), e.tunnelDialer("default", "echo")} {
		conn, _, err := d.Dial(portforward.ProtocolV1)
		g.Expect(err).NotTo(HaveOccurred())
		// client-go pings every 5s or more; the server closes the silent
		// connection long before.
		<-conn.CloseChan()
		_ = conn.Close()
	}
}

func TestInvalidStreamsAreRejected(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t, portforward.Options{})
	e.addPod("default", "echo", corev1.PodRunning, map[int32]string{8080: newEchoServer(t).addr()})
	conn, _, err := e.spdyDialer("default", "echo").Dial(portforward.ProtocolV1)
	g.Expect(err).NotTo(HaveOccurred())
	defer conn.Close()
	for _, hdr := range []map[string]string{
		{corev1.StreamType: corev1.StreamTypeData, corev1.PortHeader: "http"},
		{corev1.StreamType: corev1.StreamTypeData, corev1.PortHeader: "70000"},
		{corev1.StreamType: "stdin", corev1.PortHeader: "8080"},
	} {
		h := http.Header{}
		for k, v := range hdr {
			h.Set(k, v)
		}
		s, err := conn.CreateStream(h)
		if err == nil {
			// Rejected streams are reset: reads end at once with no data.
			b, _ := io.ReadAll(s)
			g.Expect(b).To(BeEmpty())
		}
	}
	// The connection still works afterwards.
	errs, data := openPair(t, conn, 8080, "1")
	_, err = data.Write([]byte("still fine"))
	g.Expect(err).NotTo(HaveOccurred())
	buf := make([]byte, len("still fine"))
	_, err = io.ReadFull(data, buf)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(buf)).To(Equal("still fine"))
	g.Expect(data.Close()).To(Succeed())
	msg, err := io.ReadAll(errs)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(msg).To(BeEmpty(), "a clean forward leaves the error stream empty")
}

func TestBadRequests(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t, portforward.Options{})
	rt, err := transport.New(&transport.Config{TLS: transport.TLSConfig{CAData: e.config.CAData}})
	g.Expect(err).NotTo(HaveOccurred())
	c := &http.Client{Transport: rt}
	for _, tc := range []struct {
		path string
		code int
	}{
		{"/api/v1/namespaces/Bad_NS/pods/x/portforward", http.StatusBadRequest},
		{"/api/v1/namespaces/default/pods/UPPER/portforward", http.StatusBadRequest},
	} {
		resp, err := c.Get(e.server.URL + tc.path)
		g.Expect(err).NotTo(HaveOccurred())
		_ = resp.Body.Close()
		g.Expect(resp.StatusCode).To(Equal(tc.code), tc.path)
	}
}

// The WebSocket channel protocol: ports in the query, data on channel 0,
// errors on channel 1, both announced with the port number first.
func TestWebSocketChannelProtocol(t *testing.T) {
	g := NewWithT(t)
	echo := newEchoServer(t)
	e := newEnv(t, portforward.Options{})
	e.addPod("default", "echo", corev1.PodRunning, map[int32]string{8080: echo.addr()})
	e.addPod("default", "pending", corev1.PodPending, nil)

	dial := func(name string) *gwebsocket.Conn {
		tlsCfg, err := transport.TLSConfigFor(&transport.Config{TLS: transport.TLSConfig{CAData: e.config.CAData}})
		g.Expect(err).NotTo(HaveOccurred())
		d := gwebsocket.Dialer{TLSClientConfig: tlsCfg, Subprotocols: []string{"v4.channel.k8s.io"}}
		u := strings.Replace(e.url("default", name).String(), "https://", "wss://", 1) + "?ports=8080"
		ws, resp, err := d.Dial(u, nil)
		g.Expect(err).NotTo(HaveOccurred())
		_ = resp.Body.Close()
		g.Expect(ws.Subprotocol()).To(Equal("v4.channel.k8s.io"))
		return ws
	}
	read := func(ws *gwebsocket.Conn) (byte, []byte) {
		_, msg, err := ws.ReadMessage()
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(msg).NotTo(BeEmpty())
		return msg[0], msg[1:]
	}

	ws := dial("echo")
	defer ws.Close()
	for want := byte(0); want < 2; want++ {
		ch, msg := read(ws)
		g.Expect(ch).To(Equal(want))
		g.Expect(binary.LittleEndian.Uint16(msg)).To(BeEquivalentTo(8080))
	}
	g.Expect(ws.WriteMessage(gwebsocket.BinaryMessage, append([]byte{0}, "ping"...))).To(Succeed())
	var got []byte
	for len(got) < 4 {
		ch, msg := read(ws)
		g.Expect(ch).To(BeEquivalentTo(0))
		got = append(got, msg...)
	}
	g.Expect(string(got)).To(Equal("ping"))

	bad := dial("pending")
	defer bad.Close()
	read(bad)
	read(bad)
	ch, msg := read(bad)
	g.Expect(ch).To(BeEquivalentTo(1))
	g.Expect(string(msg)).To(ContainSubstring("is not running"))
}

// Either side going away tears the forward down: the pod's connection is
// closed, the gauge drops back and no goroutine stays behind (TestMain).
func TestDisconnectsReleaseEverything(t *testing.T) {
	echo := newEchoServer(t)
	e := newEnv(t, portforward.Options{})
	e.addPod("default", "echo", corev1.PodRunning, map[int32]string{8080: echo.addr()})

	active := func(protocol string) float64 {
		return testutil.ToFloat64(portforward.ActiveStreams().WithLabelValues(protocol))
	}
	open := func(t *testing.T, d httpstream.Dialer) (httpstream.Connection, httpstream.Stream, httpstream.Stream) {
		conn, _, err := d.Dial(portforward.ProtocolV1)
		if err != nil {
			t.Fatal(err)
		}
		errs, data := openPair(t, conn, 8080, "0")
		if _, err := data.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(data, make([]byte, 1)); err != nil {
			t.Fatal(err)
		}
		return conn, errs, data
	}

	for name, dialer := range map[string]func() httpstream.Dialer{
		"spdy":      func() httpstream.Dialer { return e.spdyDialer("default", "echo") },
		"websocket": func() httpstream.Dialer { return e.tunnelDialer("default", "echo") },
	} {
		t.Run("client goes away/"+name, func(t *testing.T) {
			g := NewWithT(t)
			conn, _, _ := open(t, dialer())
			g.Expect(active(name)).To(BeEquivalentTo(1))
			g.Expect(conn.Close()).To(Succeed())
			<-echo.closed // the pod side is closed
			g.Eventually(func() float64 { return active(name) }).Should(BeZero())
		})
		t.Run("pod goes away/"+name, func(t *testing.T) {
			g := NewWithT(t)
			conn, errs, data := open(t, dialer())
			defer conn.Close()
			// Half-close towards the pod: the echo server finishes and closes,
			// the client sees EOF and an empty error stream.
			g.Expect(data.Close()).To(Succeed())
			rest, err := io.ReadAll(data)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(rest).To(BeEmpty())
			msg, err := io.ReadAll(errs)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(msg).To(BeEmpty())
			<-echo.closed
			g.Eventually(func() float64 { return active(name) }).Should(BeZero())
		})
		t.Run("server closes/"+name, func(t *testing.T) {
			g := NewWithT(t)
			e2 := newEnv(t, portforward.Options{})
			e2.addPod("default", "echo", corev1.PodRunning, map[int32]string{8080: echo.addr()})
			d := e2.spdyDialer("default", "echo")
			if name == "websocket" {
				d = e2.tunnelDialer("default", "echo")
			}
			conn, _, _ := open(t, d)
			e2.handler.Close() // what the mux does when the listener stops
			<-conn.CloseChan()
			<-echo.closed
			g.Expect(active(name)).To(BeZero())
			// A closed handler ends new connections as soon as they upgrade.
			if again, _, err := d.Dial(portforward.ProtocolV1); err == nil {
				<-again.CloseChan()
				_ = again.Close()
			}
		})
	}
	g := NewWithT(t)
	g.Expect(echo.openConns()).To(BeZero())
}

func TestNewHandlerRequiresDial(t *testing.T) {
	_, err := portforward.NewHandler(portforward.Options{})
	NewWithT(t).Expect(err).To(MatchError(ContainSubstring("Dial is required")))
}

// Mounted without route parameters, the handler reads namespace and pod from
// the path itself.
func TestServeHTTPParsesThePath(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t, portforward.Options{})
	e.addPod("kube-system", "etcd-a", corev1.PodRunning, nil)
	bare := httptest.NewServer(e.handler)
	defer bare.Close()
	for path, want := range map[string]string{
		"/api/v1/namespaces/kube-system/pods/etcd-a/portforward": `X-Stream-Protocol-Version`, // found: SPDY handshake wants its header
		"/api/v1/namespaces/kube-system/pods/nope/portforward":   `pods \"nope\" not found`,
		"/healthz": `the server could not find the requested resource`,
	} {
		resp, err := http.Post(bare.URL+path, "", nil)
		g.Expect(err).NotTo(HaveOccurred())
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		g.Expect(string(body)).To(ContainSubstring(want), path)
	}
}

// The metrics are in controller-runtime's registry, which the manager serves.
func TestMetricsAreRegistered(t *testing.T) {
	g := NewWithT(t)
	portforward.ActiveStreams().WithLabelValues("spdy") // make sure a series exists
	portforward.StreamsTotal().WithLabelValues("spdy", "forwarded")
	families, err := ctrlmetrics.Registry.Gather()
	g.Expect(err).NotTo(HaveOccurred())
	var names []string
	for _, f := range families {
		names = append(names, f.GetName())
	}
	g.Expect(names).To(ContainElements("goofy_portforward_active_streams", "goofy_portforward_streams_total"))
}
