package apiserver

import (
	"bufio"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// startServerProcess runs the test binary's test named run as a server child process with env
// added, and returns the loopback address it prints ("ADDR <host:port>") and the process. The
// child is stopped when the test ends: stdin closed (it returns), killed if it has not after 10 s.
func startServerProcess(tb testing.TB, run string, env ...string) (string, *exec.Cmd) {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+run+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	exited := make(chan struct{})
	tb.Cleanup(func() {
		_ = stdin.Close()
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	lines := bufio.NewScanner(stdout)
	for lines.Scan() {
		if addr, ok := strings.CutPrefix(lines.Text(), "ADDR "); ok {
			go func() { // keep draining, so the child never blocks on a full pipe; reap it at EOF
				for lines.Scan() {
				}
				_ = cmd.Wait()
				close(exited)
			}()
			return addr, cmd
		}
	}
	_ = cmd.Wait()
	close(exited)
	tb.Fatalf("the server process (%s) printed no address: %v", run, lines.Err())
	return "", nil
}
