package portforward

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/streaming/pkg/httpstream"
)

// session is one upgraded port-forward connection (SPDY, or SPDY tunneled in
// a WebSocket). The client opens streams in pairs sharing a request ID: an
// error stream, on which we report a failed forward, and a data stream, which
// we connect to the pod's port.
type session struct {
	h        *Handler
	ns, pod  string
	protocol string
	ctx      context.Context
	cancel   context.CancelFunc

	ready chan struct{} // closed once conn is set
	conn  httpstream.Connection

	mu         sync.Mutex
	closed     bool
	pairs      map[string]*streamPair // pairs still waiting for their second stream
	forwarding int                    // complete pairs not yet released (Options.MaxStreams)
	wg         sync.WaitGroup         // forwarders and timeout reporters, added under mu while !closed
}

type streamPair struct {
	id                   string
	counted              bool // in session.forwarding until released
	data, errs           httpstream.Stream
	dataReply, errsReply <-chan struct{}
	timer                *time.Timer
}

func (h *Handler) newSession(ns, pod, protocol string) *session {
	ctx, cancel := context.WithCancel(context.Background())
	return &session{h: h, ns: ns, pod: pod, protocol: protocol, ctx: ctx, cancel: cancel,
		ready: make(chan struct{}), pairs: map[string]*streamPair{}}
}

// serve blocks until the connection closes (client gone, idle timeout or
// Handler.Close), then tears everything down and waits for it.
func (s *session) serve(conn httpstream.Connection) {
	s.conn = conn
	close(s.ready)
	select {
	case <-conn.CloseChan():
	case <-s.ctx.Done():
	}
	s.mu.Lock()
	s.closed = true
	pending := s.pairs
	s.pairs = nil
	s.mu.Unlock()
	for _, p := range pending {
		p.timer.Stop()
	}
	s.cancel()
	// Resets every stream, which unblocks the forwarders' reads and writes.
	_ = conn.Close()
	s.wg.Wait()
}

// newStream is called by the connection, synchronously, for every stream the
// client opens; an error rejects the stream. It must not block.
func (s *session) newStream(stream httpstream.Stream, replySent <-chan struct{}) error {
	hdr := stream.Headers()
	typ := hdr.Get(corev1.StreamType)
	if typ != corev1.StreamTypeData && typ != corev1.StreamTypeError {
		return fmt.Errorf("invalid stream type %q", typ)
	}
	if _, err := parsePort(hdr.Get(corev1.PortHeader)); err != nil {
		return err
	}
	id := hdr.Get(corev1.PortForwardRequestIDHeader)
	if id == "" {
		// Clients older than the requestID header open the error stream and
		// then the data stream, whose ID is 2 higher.
		n := stream.Identifier()
		if typ == corev1.StreamTypeData {
			n -= 2
		}
		id = strconv.FormatUint(uint64(n), 10)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("connection is closing")
	}
	p := s.pairs[id]
	if p == nil {
		if max := s.h.opts.MaxStreams; max > 0 && len(s.pairs) >= max {
			// As many half-open pairs as streams may be forwarded: reset this one.
			s.h.opts.Refused()
			streamsTotal.WithLabelValues(s.protocol, resultLimited).Inc()
			return fmt.Errorf("too many port-forward streams waiting for their pair (at most %d)", max)
		}
		p = &streamPair{id: id}
		s.pairs[id] = p
		p.timer = time.AfterFunc(s.h.opts.StreamCreationTimeout, func() { s.expire(p) })
	}
	if typ == corev1.StreamTypeData {
		if p.data != nil {
			return fmt.Errorf("duplicate data stream for request %s", id)
		}
		p.data, p.dataReply = stream, replySent
	} else {
		if p.errs != nil {
			return fmt.Errorf("duplicate error stream for request %s", id)
		}
		p.errs, p.errsReply = stream, replySent
	}
	if p.data == nil || p.errs == nil {
		return nil
	}
	p.timer.Stop()
	delete(s.pairs, id)
	s.wg.Add(1)
	if max := s.h.opts.MaxStreams; max > 0 && s.forwarding >= max {
		go s.refuse(p, max)
		return nil
	}
	s.forwarding++
	p.counted = true
	go s.forward(p)
	return nil
}

// refuse reports on the pair's error stream that the connection forwards as many streams as
// it may.
func (s *session) refuse(p *streamPair, max int) {
	defer s.wg.Done()
	s.h.opts.Refused()
	streamsTotal.WithLabelValues(s.protocol, resultLimited).Inc()
	if !s.waitReply(p.dataReply) || !s.waitReply(p.errsReply) {
		s.release(p)
		return
	}
	port, _ := parsePort(p.data.Headers().Get(corev1.PortHeader)) // validated in newStream
	s.fail(p, s.forwardError(port, fmt.Errorf("too many port-forward streams on this connection (at most %d)", max)))
}

// expire drops a pair whose second stream never came.
func (s *session) expire(p *streamPair) {
	s.mu.Lock()
	if s.closed || s.pairs[p.id] != p {
		s.mu.Unlock()
		return
	}
	delete(s.pairs, p.id)
	s.wg.Add(1)
	s.mu.Unlock()
	defer s.wg.Done()
	streamsTotal.WithLabelValues(s.protocol, resultTimeout).Inc()
	for _, reply := range []<-chan struct{}{p.errsReply, p.dataReply} {
		if reply != nil && !s.waitReply(reply) {
			s.release(p)
			return
		}
	}
	s.fail(p, fmt.Sprintf("timed out waiting for the other stream of request %s", p.id))
}

// forward connects a complete pair to the pod's port and copies both ways
// until both directions ended or the connection closed.
func (s *session) forward(p *streamPair) {
	defer s.wg.Done()
	if !s.waitReply(p.dataReply) || !s.waitReply(p.errsReply) {
		s.release(p)
		return
	}
	port, _ := parsePort(p.data.Headers().Get(corev1.PortHeader)) // validated in newStream
	if s.h.opts.Lookup != nil {
		if err := s.h.opts.Lookup(s.ctx, s.ns, s.pod, port); err != nil {
			streamsTotal.WithLabelValues(s.protocol, resultRejected).Inc()
			s.fail(p, s.forwardError(port, err))
			return
		}
	}
	target, err := s.h.opts.Dial(s.ctx, s.ns, s.pod, port)
	if err != nil {
		streamsTotal.WithLabelValues(s.protocol, resultDialFailed).Inc()
		s.fail(p, s.forwardError(port, err))
		return
	}
	streamsTotal.WithLabelValues(s.protocol, resultForwarded).Inc()
	activeStreams.WithLabelValues(s.protocol).Inc()
	defer activeStreams.WithLabelValues(s.protocol).Dec()

	fromPod := make(chan struct{})
	toPod := make(chan struct{})
	go func() {
		defer close(fromPod)
		_, _ = forwardCopy(p.data, target)
		// Half-close: the client sees EOF on the data stream, and an empty
		// error stream means the forward went fine.
		_ = p.data.Close()
		_ = p.errs.Close()
	}()
	go func() {
		defer close(toPod)
		_, _ = forwardCopy(target, p.data)
		closeWrite(target)
	}()
	for fromPod != nil || toPod != nil {
		select {
		case <-fromPod:
			fromPod = nil
		case <-toPod:
			toPod = nil
		case <-s.ctx.Done():
			// The connection is gone: closing the target unblocks the copy
			// from the pod, the reset streams the one to it.
			_ = target.Close()
			if fromPod != nil {
				<-fromPod
			}
			if toPod != nil {
				<-toPod
			}
			fromPod, toPod = nil, nil
		}
	}
	_ = target.Close()
	s.release(p)
}

func (s *session) forwardError(port int32, err error) string {
	return fmt.Sprintf("error forwarding port %d to pod %s/%s: %v", port, s.ns, s.pod, err)
}

// fail reports msg on the error stream, as kubelet does, and ends the pair.
func (s *session) fail(p *streamPair, msg string) {
	if p.errs != nil {
		_, _ = p.errs.Write([]byte(msg))
		_ = p.errs.Close()
	}
	if p.data != nil {
		_ = p.data.Reset()
	}
	s.release(p)
}

// release forgets the pair's streams so a long-lived connection does not
// accumulate them.
func (s *session) release(p *streamPair) {
	if p.counted {
		s.mu.Lock()
		s.forwarding--
		p.counted = false
		s.mu.Unlock()
	}
	<-s.ready
	var streams []httpstream.Stream
	for _, st := range []httpstream.Stream{p.data, p.errs} {
		if st != nil {
			streams = append(streams, st)
		}
	}
	s.conn.RemoveStreams(streams...)
}

// waitReply waits until the connection acknowledged a stream to the client;
// writing before that would confuse it.
func (s *session) waitReply(reply <-chan struct{}) bool {
	select {
	case <-reply:
		return true
	case <-s.ctx.Done():
		return false
	}
}

func parsePort(v string) (int32, error) {
	port, err := strconv.ParseUint(v, 10, 16)
	if err != nil || port == 0 {
		return 0, fmt.Errorf("invalid port %q", v)
	}
	return int32(port), nil
}

// closeWrite half-closes the target so the pod sees the client's EOF.
func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	_ = c.Close()
}
