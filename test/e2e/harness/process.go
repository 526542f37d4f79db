package harness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Process is one binary the harness started. It runs in its own process group so that stopping it
// also stops anything it spawned, and it writes stdout and stderr to one log file.
type Process struct {
	Name    string
	Path    string
	Args    []string
	Env     []string
	LogFile string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// Start launches the process; the log file is appended to, so a restarted process keeps its history.
func (p *Process) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && !p.exited() {
		return fmt.Errorf("%s is already running (pid %d)", p.Name, p.cmd.Process.Pid)
	}
	logf, err := os.OpenFile(p.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(logf, "==== %s: starting %s %v\n", time.Now().UTC().Format(time.RFC3339), p.Path, p.Args)
	cmd := exec.Command(p.Path, p.Args...)
	cmd.Env = append(os.Environ(), p.Env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Own process group: teardown signals the group, and Ctrl-C in a terminal reaches only us.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// A harness killed without teardown (go test's timeout, SIGKILL) must not leave the plane
	// running: on Linux the kernel kills the child when its parent dies.
	killWithParent(cmd.SysProcAttr)
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("starting %s: %w", p.Name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.err = cmd, done, nil
	go func() {
		err := cmd.Wait()
		logf.Close()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

func (p *Process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Running reports whether the process has been started and not exited.
func (p *Process) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil && !p.exited()
}

// Pid returns the process id (0 when never started).
func (p *Process) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Exited returns a channel closed when the process ends.
func (p *Process) Exited() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

// Kill sends SIGKILL to the process group and waits for the process to be reaped.
func (p *Process) Kill() {
	p.signalAndWait(syscall.SIGKILL, 10*time.Second)
}

// Stop asks the process group to terminate (SIGTERM), and kills it after grace.
func (p *Process) Stop(grace time.Duration) {
	if !p.signalAndWait(syscall.SIGTERM, grace) {
		p.Kill()
	}
}

func (p *Process) signalAndWait(sig syscall.Signal, wait time.Duration) bool {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return true
	}
	select {
	case <-done:
		return true
	default:
	}
	_ = syscall.Kill(-cmd.Process.Pid, sig)
	select {
	case <-done:
		return true
	case <-time.After(wait):
		return false
	}
}

// waitHTTPOK polls url until it answers 200, the process exits, or ctx ends.
func waitHTTPOK(ctx context.Context, p *Process, url string) error {
	return pollHTTPOK(ctx, p, url, &http.Client{Timeout: 2 * time.Second})
}

// pollHTTPOK polls url with client until it answers 200, the process exits, or ctx ends.
func pollHTTPOK(ctx context.Context, p *Process, url string, client *http.Client) error {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s did not become ready at %s: %w (log: %s)", p.Name, url, context.Cause(ctx), p.LogFile)
		case <-p.Exited():
			return fmt.Errorf("%s exited before becoming ready (log: %s)", p.Name, p.LogFile)
		case <-tick.C:
		}
	}
}

func hostPort(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// lookBinary returns dir/name when it is an executable file.
func lookBinary(dir, name string) (string, error) {
	p := filepath.Join(dir, name)
	fi, err := os.Stat(p)
	if err != nil {
		return "", err
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return "", errors.New(p + " is not an executable file")
	}
	return p, nil
}
