package harness

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	. "github.com/onsi/gomega"
)

// Ports reserved by one test process are held against every other one (a second open file of the
// lock stands for another process: flock locks belong to open files), a port something else
// listens on is skipped, and a consecutive run starts again after a gap.
func TestReservePorts(t *testing.T) {
	g := NewWithT(t)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	defer busy.Close()
	busyPort := busy.Addr().(*net.TCPAddr).Port

	// The busy port alone: nothing can be reserved.
	_, err = ReservePorts(1, [2]int{busyPort, busyPort}, false)
	g.Expect(err).To(HaveOccurred())

	ports, err := ReservePorts(3, ProcessPorts, true)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ports).To(HaveLen(3))
	g.Expect(ports[1]).To(Equal(ports[0] + 1))
	g.Expect(ports[2]).To(Equal(ports[0] + 2))

	for _, p := range ports {
		f, err := os.OpenFile(filepath.Join(os.TempDir(), "goofy-test-ports", strconv.Itoa(p)+".lock"), os.O_RDWR, 0)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(tryLock(f)).To(BeFalse(), "port %d is not held against other processes", p)
		f.Close()
	}

	// The same process never gets a port twice.
	more, err := ReservePorts(2, ProcessPorts, false)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(more).NotTo(ContainElement(BeElementOf(ports)))
	_, err = ReservePorts(1, [2]int{ports[0], ports[2]}, false)
	g.Expect(err).To(HaveOccurred(), "a reserved port was handed out again")
}
