package harness

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
)

// The plane's own processes (the managers' webhook, health and diagnostics ports,
// kube-controller-manager's secure port) listen on ports of ProcessPorts. A port asked of the
// kernel (127.0.0.1:0) comes from its ephemeral range, where any outgoing connection of another
// process can take it between our probe and the process's bind; that made a manager exit before
// it became ready while another package's plane ran beside it. Ports below the ephemeral range are
// never picked for outgoing connections, and a lock file per port (held until this process exits)
// keeps planes of concurrent test processes on different ports.
var ProcessPorts = [2]int{10000, 10999}

var (
	reservedMu sync.Mutex
	// reserved holds the open lock file of every port this process reserved: closing it would free
	// the port for other processes, so it stays open until the process exits.
	reserved = map[int]*os.File{}
)

// ReservePorts reserves n ports within the inclusive range, consecutive when asked (a Goofy
// manager's --listener-port-range), that no other process of this machine holds: each port is free
// on loopback and its lock file under the temporary directory is held by this process. The search
// starts at a place derived from the PID so that concurrent processes rarely contend.
func ReservePorts(n int, within [2]int, consecutive bool) ([]int, error) {
	reservedMu.Lock()
	defer reservedMu.Unlock()
	size := within[1] - within[0] + 1
	if n <= 0 || n > size {
		return nil, fmt.Errorf("cannot reserve %d ports in %d-%d", n, within[0], within[1])
	}
	dir := filepath.Join(os.TempDir(), "goofy-test-ports")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return nil, err
	}
	var got []int
	release := func() {
		for _, p := range got {
			reserved[p].Close()
			delete(reserved, p)
		}
		got = nil
	}
	offset := os.Getpid() % size
	for i := 0; i < size && len(got) < n; i++ {
		p := within[0] + (offset+i)%size
		if consecutive && len(got) > 0 && p != got[len(got)-1]+1 {
			release() // wrapped around: start the run again
		}
		if reservePort(dir, p) {
			got = append(got, p)
		} else if consecutive {
			release()
		}
	}
	if len(got) < n {
		release()
		return nil, fmt.Errorf("no %d free ports in %d-%d", n, within[0], within[1])
	}
	return got, nil
}

// reservePort takes port p's lock file and checks that p is free on loopback; the caller holds
// reservedMu.
func reservePort(dir string, p int) bool {
	if _, ok := reserved[p]; ok {
		return false
	}
	f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(p)+".lock"), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return false
	}
	if !tryLock(f) {
		f.Close()
		return false
	}
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	if err != nil {
		f.Close() // closing the file drops the lock
		return false
	}
	l.Close()
	reserved[p] = f
	return true
}

// processPorts reserves n ports of ProcessPorts for the plane's processes.
func processPorts(n int) ([]int, error) { return ReservePorts(n, ProcessPorts, false) }
