package harness

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// orphanHelperEnv makes the test binary act as a harness that starts one child and then waits
// to be killed (see TestMain).
const orphanHelperEnv = "GOOFY_HARNESS_ORPHAN_HELPER"

func TestMain(m *testing.M) {
	if dir := os.Getenv(orphanHelperEnv); dir != "" {
		runOrphanHelper(dir)
		return
	}
	os.Exit(m.Run())
}

// runOrphanHelper starts a long sleep through Process, prints its PID and blocks.
func runOrphanHelper(dir string) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	p := &Process{Name: "sleep", Path: sleep, Args: []string{"300"}, LogFile: filepath.Join(dir, "sleep.log")}
	if err := p.Start(); err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println(p.Pid())
	select {}
}

// TestChildrenDieWithTheHarness: a harness killed with SIGKILL, so without teardown, leaves no
// plane process behind.
func TestChildrenDieWithTheHarness(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("parent-death signals are Linux only")
	}
	g := NewWithT(t)
	helper := exec.Command(os.Args[0], "-test.run=^$")
	helper.Env = append(os.Environ(), orphanHelperEnv+"="+t.TempDir())
	out, err := helper.StdoutPipe()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(helper.Start()).To(Succeed())
	defer func() { _ = helper.Process.Kill(); _ = helper.Wait() }()

	line, err := bufio.NewReader(out).ReadString('\n')
	g.Expect(err).NotTo(HaveOccurred())
	child, err := strconv.Atoi(strings.TrimSpace(line))
	g.Expect(err).NotTo(HaveOccurred(), "helper said %q", line)
	g.Expect(processAlive(child)).To(BeTrue())

	g.Expect(helper.Process.Kill()).To(Succeed())
	_ = helper.Wait()
	g.Eventually(func() bool { return processAlive(child) }, 10*time.Second, 50*time.Millisecond).
		Should(BeFalse(), "child %d outlived its killed parent", child)
}

// processAlive is true while pid exists and is not a zombie (an orphan waiting to be reaped by
// a PID 1 that may never reap it has already stopped running).
func processAlive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}
