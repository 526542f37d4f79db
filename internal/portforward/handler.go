// Package portforward serves pods/portforward for a simulated workload cluster
// the way kubelet does behind a real API server: it upgrades the request to a
// multiplexed stream connection and, for every pair of error and data streams
// the client opens, connects the data stream to the pod's port.
//
// Three transports are accepted, chosen by the request's upgrade headers:
//   - SPDY/3.1 with subprotocol portforward.k8s.io (client-go's spdy dialer);
//   - SPDY tunneled through a WebSocket, subprotocol SPDY/3.1+portforward.k8s.io:
//     what kubectl and client-go try first since Kubernetes 1.31, falling back
//     to plain SPDY when the upgrade is refused;
//   - the WebSocket channel protocol (v4.channel.k8s.io and its base64
//     variants, ports in the "ports" query parameter) that kubelet offers to
//     browser-style clients.
//
// The pods are simulated, so "connecting to the pod" is the caller's Dial; the
// mux dials back into the workload cluster's own listener and the client's TLS
// (with the pod name as SNI) flows through the stream unchanged.
package portforward

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	gwebsocket "github.com/gorilla/websocket"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	clientportforward "k8s.io/client-go/tools/portforward"
	"k8s.io/streaming/pkg/httpstream"
	"k8s.io/streaming/pkg/httpstream/wsstream"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/portforward/spdyconn"
)

const (
	// ProtocolV1 is the port-forward subprotocol spoken over SPDY.
	ProtocolV1 = "portforward.k8s.io"
	// ProtocolTunnelV1 is ProtocolV1 tunneled through a WebSocket.
	ProtocolTunnelV1 = "SPDY/3.1+" + ProtocolV1

	// DefaultIdleTimeout closes connections nobody used for this long. Clients
	// ping (client-go every 5-10s), so only dead ones hit it.
	DefaultIdleTimeout = 15 * time.Minute
	// DefaultStreamCreationTimeout is how long the second stream of a pair may
	// lag behind the first, as in kubelet.
	DefaultStreamCreationTimeout = 30 * time.Second
)

// Options wire the handler to the simulated cluster.
type Options struct {
	// FindPod is called before the upgrade. An error carrying a Kubernetes
	// status (apierrors.NewNotFound, ...) is answered with that status, any
	// other error with 500. Nil means every pod exists.
	FindPod func(ctx context.Context, namespace, pod string) error
	// Lookup is called for every forwarded connection before Dial: it checks the
	// pod is Running and serves port. Its error is reported on the error stream,
	// as kubelet reports a failed forward. Nil means every port is served.
	Lookup func(ctx context.Context, namespace, pod string, port int32) error
	// Dial connects to port of the pod. Required.
	Dial func(ctx context.Context, namespace, pod string, port int32) (net.Conn, error)

	// IdleTimeout and StreamCreationTimeout default to the constants above.
	IdleTimeout           time.Duration
	StreamCreationTimeout time.Duration
	// DisableWebSockets refuses WebSocket upgrades with 400, like an API
	// server that does not tunnel; clients then fall back to SPDY.
	DisableWebSockets bool

	// MaxStreams bounds the forwarded streams of one connection: the pairs
	// being forwarded, and apart from them the pairs waiting for their second
	// stream. A pair past it is refused on its error stream, as a failed
	// forward is; a WebSocket asking for more ports is refused with 400. Zero
	// or less: no bound but the WebSocket channel protocol's own (MaxChannelPorts).
	MaxStreams int
	// Refused is called for every stream refused at MaxStreams.
	Refused func()
}

// MaxChannelPorts is the most ports one WebSocket of the channel protocol can
// carry: each takes two channels, numbered by one byte, and channel 255 is the
// stream-close signal.
const MaxChannelPorts = 127

// MaxBase64ChannelPorts is the most ports of the channel protocol's base64
// variant: its channel numbers are sent as the character '0'+n, written as
// UTF-8, so a number past 79 no longer fits one byte.
const MaxBase64ChannelPorts = 40

// Handler serves port-forward requests. Create it with NewHandler.
type Handler struct {
	opts Options

	mu     sync.Mutex
	closed bool
	active map[*func()]struct{} // stop functions of open connections
	wg     sync.WaitGroup
}

// NewHandler returns a Handler; mount it at
// /api/v1/namespaces/{namespace}/pods/{name}/portforward or call
// ServePortForward with the route parameters.
func NewHandler(opts Options) (*Handler, error) {
	if opts.Dial == nil {
		return nil, errors.New("portforward: Options.Dial is required")
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = DefaultIdleTimeout
	}
	if opts.StreamCreationTimeout <= 0 {
		opts.StreamCreationTimeout = DefaultStreamCreationTimeout
	}
	if opts.Refused == nil {
		opts.Refused = func() {}
	}
	return &Handler{opts: opts, active: map[*func()]struct{}{}}, nil
}

// ServeHTTP takes namespace and pod from the request: the path values
// "namespace" and "name" when an http.ServeMux pattern set them, else the
// path .../namespaces/{namespace}/pods/{name}/portforward.
func (h *Handler) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	ns, name := req.PathValue("namespace"), req.PathValue("name")
	if ns == "" || name == "" {
		var ok bool
		if ns, name, ok = parsePath(req.URL.Path); !ok {
			writeStatus(w, &apierrors.StatusError{ErrStatus: metav1.Status{
				Status: metav1.StatusFailure, Code: http.StatusNotFound, Reason: metav1.StatusReasonNotFound,
				Message: "the server could not find the requested resource",
			}})
			return
		}
	}
	h.ServePortForward(w, req, ns, name)
}

// ServePortForward serves one port-forward request for pod namespace/name. It
// returns when the forwarding connection is closed.
func (h *Handler) ServePortForward(w http.ResponseWriter, req *http.Request, namespace, name string) {
	if errs := validation.IsDNS1123Label(namespace); len(errs) > 0 {
		writeStatus(w, apierrors.NewBadRequest(fmt.Sprintf("invalid namespace %q: %s", namespace, strings.Join(errs, ", "))))
		return
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		writeStatus(w, apierrors.NewBadRequest(fmt.Sprintf("invalid pod name %q: %s", name, strings.Join(errs, ", "))))
		return
	}
	if req.Method != http.MethodGet && req.Method != http.MethodPost {
		writeStatus(w, apierrors.NewMethodNotSupported(schema.GroupResource{Resource: "pods/portforward"}, req.Method))
		return
	}
	if h.opts.FindPod != nil {
		if err := h.opts.FindPod(req.Context(), namespace, name); err != nil {
			writeStatus(w, err)
			return
		}
	}

	switch {
	case wsstream.IsWebSocketRequest(req) && h.opts.DisableWebSockets:
		writeStatus(w, apierrors.NewBadRequest("unable to upgrade: websockets are not supported"))
	case wsstream.IsWebSocketRequestWithTunnelingProtocol(req):
		if !slices.Contains(gwebsocket.Subprotocols(req), ProtocolTunnelV1) {
			writeStatus(w, apierrors.NewBadRequest(fmt.Sprintf("unable to upgrade: only the tunneling protocol %s is supported", ProtocolTunnelV1)))
			return
		}
		h.serveTunnel(w, req, namespace, name)
	case wsstream.IsWebSocketRequest(req):
		h.serveChannels(w, req, namespace, name)
	default:
		h.serveSPDY(w, req, namespace, name)
	}
}

func (h *Handler) serveSPDY(w http.ResponseWriter, req *http.Request, ns, pod string) {
	if _, err := httpstream.Handshake(req, w, []string{ProtocolV1}); err != nil {
		return // Handshake wrote the response
	}
	s := h.newSession(ns, pod, protocolSPDY)
	conn := spdyconn.Upgrade(w, req, s.newStream)
	if conn == nil {
		s.cancel()
		return // the upgrader wrote the response
	}
	h.run(s, conn)
}

func (h *Handler) serveTunnel(w http.ResponseWriter, req *http.Request, ns, pod string) {
	upgrader := gwebsocket.Upgrader{
		Subprotocols:    []string{ProtocolTunnelV1},
		ReadBufferSize:  32 << 10,
		WriteBufferSize: 32 << 10,
		WriteBufferPool: webSocketWriteBuffers,
	}
	ws, err := upgrader.Upgrade(w, req, nil)
	if err != nil {
		return // the upgrader wrote the response
	}
	s := h.newSession(ns, pod, protocolWebSocket)
	h.run(s, spdyconn.NewServer(clientportforward.NewTunnelingConnection("server", ws), s.newStream))
}

// run serves the streams of one upgraded connection until it closes.
func (h *Handler) run(s *session, conn httpstream.Connection) {
	conn.SetIdleTimeout(h.opts.IdleTimeout)
	untrack := h.track(s.cancel)
	defer untrack()
	s.serve(conn)
}

// track registers stop, which ends an open connection, for Close. After Close
// it calls stop at once: the connection ends as soon as it began.
func (h *Handler) track(stop func()) (untrack func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		stop()
		return func() {}
	}
	key := &stop
	h.active[key] = struct{}{}
	h.wg.Add(1)
	return func() {
		h.mu.Lock()
		delete(h.active, key)
		h.mu.Unlock()
		h.wg.Done()
	}
}

// Close ends every open port-forward connection, refuses new ones and waits
// for their handlers to return. Call it when the cluster's listener stops:
// hijacked connections are beyond http.Server.Shutdown.
func (h *Handler) Close() {
	h.mu.Lock()
	h.closed = true
	for stop := range h.active {
		(*stop)()
	}
	h.mu.Unlock()
	h.wg.Wait()
}

// parsePath extracts namespace and pod from .../namespaces/{ns}/pods/{name}/portforward.
func parsePath(p string) (ns, name string, ok bool) {
	parts := strings.Split(strings.Trim(p, "/"), "/")
	n := len(parts)
	if n < 5 || parts[n-1] != "portforward" || parts[n-3] != "pods" || parts[n-5] != "namespaces" {
		return "", "", false
	}
	return parts[n-4], parts[n-2], true
}

// writeStatus answers with a metav1.Status like the API server does.
func writeStatus(w http.ResponseWriter, err error) {
	var st metav1.Status
	var apiStatus apierrors.APIStatus
	if errors.As(err, &apiStatus) {
		st = apiStatus.Status()
	} else {
		st = apierrors.NewInternalError(err).ErrStatus
	}
	st.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
	if st.Code == 0 {
		st.Code = http.StatusInternalServerError
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(int(st.Code))
	_ = json.NewEncoder(w).Encode(&st)
}
