package portforward

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"

	gwebsocket "github.com/gorilla/websocket"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/streaming/pkg/httpstream/wsstream"
)

// serveChannels serves the WebSocket channel protocol kubelet offers besides
// SPDY: the ports are fixed by the query (?ports=2379 or ?port=2379), each
// gets a data channel (2i) and an error channel (2i+1), and the server first
// writes the port number, little-endian uint16, on both. One WebSocket carries
// one connection per port.
func (h *Handler) serveChannels(w http.ResponseWriter, req *http.Request, ns, pod string) {
	ports, err := queryPorts(req.URL.Query())
	if err != nil {
		writeStatus(w, apierrors.NewBadRequest(err.Error()))
		return
	}
	channels := make([]wsstream.ChannelType, 0, 2*len(ports))
	for range ports {
		channels = append(channels, wsstream.ReadWriteChannel, wsstream.WriteChannel)
	}
	protocols := wsstream.NewDefaultChannelProtocols(channels)
	protocols["v4."+wsstream.ChannelWebSocketProtocol] = wsstream.ChannelProtocolConfig{Binary: true, Channels: channels}
	protocols["v4."+wsstream.Base64ChannelWebSocketProtocol] = wsstream.ChannelProtocolConfig{Binary: false, Channels: channels}
	// The channel numbers are one byte: the ports must fit them.
	limit := MaxChannelPorts
	if base64Negotiated(req, protocols) {
		limit = MaxBase64ChannelPorts
	}
	if max := h.opts.MaxStreams; max > 0 && max < limit {
		limit = max
	}
	if len(ports) > limit {
		h.opts.Refused()
		streamsTotal.WithLabelValues(protocolChannels, resultLimited).Inc()
		writeStatus(w, apierrors.NewBadRequest(fmt.Sprintf("too many ports: %d, at most %d on one connection", len(ports), limit)))
		return
	}

	conn := wsstream.NewConn(protocols)
	conn.SetIdleTimeout(h.opts.IdleTimeout)
	_, rwc, err := conn.Open(w, req)
	if err != nil {
		return // the handshake answered the client
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	untrack := h.track(cancel)
	defer untrack()

	var wg sync.WaitGroup
	for i, port := range ports {
		data, errs := rwc[2*i], rwc[2*i+1]
		prefix := binary.LittleEndian.AppendUint16(nil, uint16(port))
		if _, err := data.Write(prefix); err != nil {
			break
		}
		if _, err := errs.Write(prefix); err != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			h.forwardChannel(ctx, ns, pod, port, data, errs)
		}()
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
	// Closing the WebSocket closes every channel, which ends the forwarders.
	_ = conn.Close()
	<-done
}

// base64Negotiated reports whether the handshake will choose a base64 variant: the first of the
// client's subprotocols the server offers, as wsstream's handshake chooses.
func base64Negotiated(req *http.Request, protocols map[string]wsstream.ChannelProtocolConfig) bool {
	offered := gwebsocket.Subprotocols(req)
	if len(offered) == 0 {
		offered = []string{""}
	}
	for _, p := range offered {
		if cfg, ok := protocols[p]; ok {
			return !cfg.Binary
		}
	}
	return false
}

// forwardChannel connects one port. The channels cannot be half-closed, so the
// end of either direction ends both.
func (h *Handler) forwardChannel(ctx context.Context, ns, pod string, port int32, data, errs io.ReadWriteCloser) {
	if h.opts.Lookup != nil {
		if err := h.opts.Lookup(ctx, ns, pod, port); err != nil {
			streamsTotal.WithLabelValues(protocolChannels, resultRejected).Inc()
			_, _ = fmt.Fprintf(errs, "error forwarding port %d to pod %s/%s: %v", port, ns, pod, err)
			return
		}
	}
	target, err := h.opts.Dial(ctx, ns, pod, port)
	if err != nil {
		streamsTotal.WithLabelValues(protocolChannels, resultDialFailed).Inc()
		_, _ = fmt.Fprintf(errs, "error forwarding port %d to pod %s/%s: %v", port, ns, pod, err)
		return
	}
	streamsTotal.WithLabelValues(protocolChannels, resultForwarded).Inc()
	activeStreams.WithLabelValues(protocolChannels).Inc()
	defer activeStreams.WithLabelValues(protocolChannels).Dec()

	toPod := make(chan struct{})
	go func() {
		defer close(toPod)
		_, _ = forwardCopy(target, data) // EOF: the WebSocket closed
		_ = target.Close()
	}()
	stop := context.AfterFunc(ctx, func() { _ = target.Close() })
	defer stop()
	_, _ = forwardCopy(data, target)
	_ = target.Close()
	_ = data.Close() // ends the copy to the pod
	<-toPod
}

// queryPorts reads the ports kubelet (port=) and the API server (ports=)
// accept: repeated and/or comma separated, each 1-65535.
func queryPorts(q url.Values) ([]int32, error) {
	var ports []int32
	for _, key := range []string{"ports", "port"} {
		for _, v := range q[key] {
			for _, p := range strings.Split(v, ",") {
				n, err := strconv.ParseUint(strings.TrimSpace(p), 10, 16)
				if err != nil || n == 0 {
					return nil, fmt.Errorf("invalid port %q in query parameter %q", p, key)
				}
				ports = append(ports, int32(n))
			}
		}
	}
	if len(ports) == 0 {
		return nil, fmt.Errorf("query parameter %q is required for WebSocket port forwarding", "ports")
	}
	return ports, nil
}
