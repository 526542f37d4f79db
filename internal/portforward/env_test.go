package portforward_test

import (
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	clientportforward "k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
	"k8s.io/streaming/pkg/httpstream"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/portforward"
)

// pod is a simulated pod: its phase and the ports it serves, each backed by a
// listener on 127.0.0.1.
type pod struct {
	phase corev1.PodPhase
	ports map[int32]string // port -> address to dial
}

// env is an API server stand-in (TLS, HTTP/1.1 and HTTP/2 like the mux) with
// the handler mounted on the real route, plus the pods it forwards to.
type env struct {
	t       testing.TB
	handler *portforward.Handler
	server  *httptest.Server
	config  *rest.Config

	mu   sync.Mutex
	pods map[string]pod // namespace/name
}

func newEnv(t testing.TB, opts portforward.Options) *env {
	t.Helper()
	e := &env{t: t, pods: map[string]pod{}}
	opts.FindPod, opts.Lookup, opts.Dial = e.findPod, e.lookup, e.dial
	h, err := portforward.NewHandler(opts)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/api/v1/namespaces/{namespace}/pods/{name}/portforward", h)
	e.start(h, mux)
	return e
}

// start serves mux over TLS with HTTP/2 enabled, as the mux's listener does.
func (e *env) start(h *portforward.Handler, mux *http.ServeMux) {
	e.handler = h
	e.server = httptest.NewUnstartedServer(mux)
	e.server.EnableHTTP2 = true
	e.server.StartTLS()
	e.t.Cleanup(func() {
		e.handler.Close()
		e.server.Close()
	})
	e.config = &rest.Config{
		Host: e.server.URL,
		TLSClientConfig: rest.TLSClientConfig{
			CAData: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: e.server.Certificate().Raw}),
		},
	}
}

func (e *env) findPod(_ context.Context, ns, name string) error {
	if _, ok := e.pod(ns, name); !ok {
		return apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, name)
	}
	return nil
}

func (e *env) lookup(_ context.Context, ns, name string, port int32) error {
	p, ok := e.pod(ns, name)
	switch {
	case !ok:
		return fmt.Errorf("pod %s/%s not found", ns, name)
	case p.phase != corev1.PodRunning:
		return fmt.Errorf("pod %s/%s is not running (phase %s)", ns, name, p.phase)
	case p.ports[port] == "":
		return fmt.Errorf("pod %s/%s does not serve port %d", ns, name, port)
	}
	return nil
}

func (e *env) dial(ctx context.Context, ns, name string, port int32) (net.Conn, error) {
	p, _ := e.pod(ns, name)
	return (&net.Dialer{}).DialContext(ctx, "tcp", p.ports[port])
}

// kubeConfig is a copy of the client config: KCP's dialer modifies it.
func (e *env) kubeConfig() *rest.Config { return rest.CopyConfig(e.config) }

func (e *env) addPod(ns, name string, phase corev1.PodPhase, ports map[int32]string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.pods[ns+"/"+name] = pod{phase: phase, ports: ports}
}

func (e *env) pod(ns, name string) (pod, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	p, ok := e.pods[ns+"/"+name]
	return p, ok
}

func (e *env) url(ns, name string) *url.URL {
	u, err := url.Parse(e.server.URL + "/api/v1/namespaces/" + ns + "/pods/" + name + "/portforward")
	if err != nil {
		e.t.Fatal(err)
	}
	return u
}

// spdyDialer is client-go's SPDY dialer, as kubectl builds it.
func (e *env) spdyDialer(ns, name string) httpstream.Dialer {
	transport, upgrader, err := spdy.RoundTripperFor(e.config)
	if err != nil {
		e.t.Fatal(err)
	}
	return spdy.NewDialerForStreaming(upgrader, &http.Client{Transport: transport}, http.MethodPost, e.url(ns, name))
}

// tunnelDialer is client-go's SPDY-over-WebSocket dialer.
func (e *env) tunnelDialer(ns, name string) httpstream.Dialer {
	d, err := clientportforward.NewSPDYOverWebsocketDialerForStreaming(e.url(ns, name), e.config)
	if err != nil {
		e.t.Fatal(err)
	}
	return d
}

// kubectlDialer is what kubectl port-forward uses: WebSocket first, SPDY when
// the upgrade is refused.
func (e *env) kubectlDialer(ns, name string) httpstream.Dialer {
	return clientportforward.NewFallbackDialerForStreaming(e.tunnelDialer(ns, name), e.spdyDialer(ns, name), func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
}

// forwarder runs client-go's PortForwarder (kubectl's engine) on a random
// local port until the test ends and returns that port.
func forwarder(t testing.TB, d httpstream.Dialer, remotePort int32) uint16 {
	t.Helper()
	stop, ready := make(chan struct{}), make(chan struct{})
	pf, err := clientportforward.NewOnAddressesForStreaming(d, []string{"127.0.0.1"}, []string{fmt.Sprintf("0:%d", remotePort)}, stop, ready, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- pf.ForwardPorts() }()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("port-forward ended before it was ready: %v", err)
	}
	t.Cleanup(func() {
		close(stop)
		<-done
	})
	ports, err := pf.GetPorts()
	if err != nil {
		t.Fatal(err)
	}
	return ports[0].Local
}

// echoServer answers every connection with what it reads, until EOF. It
// counts connections still open so tests can see the pod side closed.
type echoServer struct {
	lis  net.Listener
	wg   sync.WaitGroup
	mu   sync.Mutex
	open int
	// closed receives one value per connection that ended.
	closed chan struct{}
}

func newEchoServer(t testing.TB) *echoServer {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &echoServer{lis: lis, closed: make(chan struct{}, 100)}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.open++
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				_, _ = io.Copy(c, c)
				_ = c.Close()
				s.mu.Lock()
				s.open--
				s.mu.Unlock()
				s.closed <- struct{}{}
			}()
		}
	}()
	t.Cleanup(func() {
		_ = lis.Close()
		s.wg.Wait()
	})
	return s
}

func (s *echoServer) addr() string { return s.lis.Addr().String() }

func (s *echoServer) openConns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.open
}

// roundTrip writes msg to a fresh connection to addr and reads it back.
func roundTrip(addr, msg string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, msg); err != nil {
		return "", err
	}
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(c, buf); err != nil {
		return "", errors.Join(err, fmt.Errorf("read %q", buf))
	}
	return string(buf), nil
}
