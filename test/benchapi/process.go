package benchapi

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Server is a server program started by the driver.
type Server struct {
	cmd    *exec.Cmd
	exited chan struct{}
}

// StartServer runs bin with its output in logPath and waits until it has written kubeconfig,
// its sign of serving.
func StartServer(ctx context.Context, bin string, args []string, logPath, kubeconfig string) (*Server, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	s := &Server{cmd: exec.Command(bin, args...), exited: make(chan struct{})}
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	if err := s.cmd.Start(); err != nil {
		_ = logf.Close()
		return nil, err
	}
	go func() { _ = s.cmd.Wait(); _ = logf.Close(); close(s.exited) }()
	deadline := time.After(3 * time.Minute)
	for {
		if _, err := os.Stat(kubeconfig); err == nil {
			return s, nil
		}
		select {
		case <-s.exited:
			return nil, fmt.Errorf("%s exited before serving (%s); see %s", bin, s.cmd.ProcessState, logPath)
		case <-deadline:
			s.Stop()
			return nil, fmt.Errorf("%s did not write %s within 3 minutes; see %s", bin, kubeconfig, logPath)
		case <-ctx.Done():
			s.Stop()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Pid is the program's process id.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// Stop ends the program: SIGTERM, then SIGKILL after 10 s.
func (s *Server) Stop() {
	if s == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
}

// TypedAccept is what client-go's typed clients ask for when built-in kinds are read: protobuf,
// else JSON (CAPD's in-memory server answers JSON).
const TypedAccept = "application/vnd.kubernetes.protobuf,application/json"

// RESTConfig reads a kubeconfig for the benchmark's clients: no client-side rate limit; JSON
// only if forceJSON, else what the typed clients negotiate (TypedAccept).
func RESTConfig(kubeconfig string, forceJSON bool) (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.QPS = -1
	cfg.UserAgent = "bench-api"
	if forceJSON {
		cfg.ContentType = "application/json" // a set content type keeps the typed clients off protobuf
	}
	return cfg, nil
}

// Clients returns n clientsets, each with a connection of its own (a distinct dialer keeps
// client-go from sharing one transport), and a function that closes their connections.
func Clients(config *rest.Config, n int) ([]kubernetes.Interface, func(), error) {
	out := make([]kubernetes.Interface, 0, n)
	var hcs []*http.Client
	closeAll := func() {
		for _, hc := range hcs {
			hc.CloseIdleConnections()
		}
	}
	for range n {
		cfg := rest.CopyConfig(config)
		cfg.Dial = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
		hc, err := rest.HTTPClientFor(cfg)
		if err == nil {
			var cs kubernetes.Interface
			if cs, err = kubernetes.NewForConfigAndClient(cfg, hc); err == nil {
				hcs = append(hcs, hc)
				out = append(out, cs)
				continue
			}
		}
		closeAll()
		return nil, nil, err
	}
	return out, closeAll, nil
}
