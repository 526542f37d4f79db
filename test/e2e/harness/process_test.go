package harness

import (
	"bufio"
	"context"
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

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/testenv"
)

// orphanHelperEnv makes the test binary act as a harness that starts one child and then waits
// to be killed (see TestMain).
const orphanHelperEnv = "GOOFY_HARNESS_ORPHAN_HELPER"

// planeHelperEnv makes the test binary act as a harness that starts a bare plane (etcd and
// kube-apiserver, through envtest), prints the PIDs of its children and waits to be killed.
const planeHelperEnv = "GOOFY_HARNESS_PLANE_HELPER"

func TestMain(m *testing.M) {
	if dir := os.Getenv(orphanHelperEnv); dir != "" {
		runOrphanHelper(dir)
		return
	}
	if dir := os.Getenv(planeHelperEnv); dir != "" {
		runPlaneHelper(dir)
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

func runPlaneHelper(dir string) {
	ctrllog.SetLogger(logr.Discard())
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := Start(ctx, Options{OutputDir: dir, Binaries: DefaultBinaries(testenv.RepoRoot()), Bare: true}); err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println(strings.Trim(fmt.Sprint(childrenOf(os.Getpid())), "[]"))
	select {}
}

// childrenOf lists the processes whose parent is pid.
func childrenOf(pid int) []int {
	var children []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", child))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so count from its closing parenthesis.
		s := string(b)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			children = append(children, child)
		}
	}
	return children
}

// TestPlaneDiesWithTheHarness: etcd and kube-apiserver, which envtest starts, die with a harness
// killed by SIGKILL (the quick start under `make run | tee`, a go test timeout), as the
// processes the harness starts itself do.
func TestPlaneDiesWithTheHarness(t *testing.T) {
	bins := DefaultBinaries(testenv.RepoRoot())
	if _, err := os.Stat(filepath.Join(bins.Assets, "kube-apiserver")); err != nil {
		t.Skipf("envtest binaries not built (run hack/envtest.sh): %v", err)
	}
	expectChildrenDieWithKilledHelper(t, planeHelperEnv, func(g Gomega, names map[int]string) {
		// The wrapper hands kube-apiserver its garbage collector setting (apiServerGOGC).
		for pid, name := range names {
			if name == "kube-apiserver" {
				environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(strings.Split(string(environ), "\x00")).To(ContainElement(apiServerGOGC))
			}
		}
	}, "etcd", "kube-apiserver")
}

// TestChildrenDieWithTheHarness: a harness killed with SIGKILL, so without teardown, leaves no
// plane process behind.
func TestChildrenDieWithTheHarness(t *testing.T) {
	expectChildrenDieWithKilledHelper(t, orphanHelperEnv, nil, "sleep")
}

// expectChildrenDieWithKilledHelper runs this test binary as the helper helperEnv selects, reads
// the PIDs it prints, expects them to be the commands named, runs check (if any) on them while they
// run, SIGKILLs the helper and expects every one of them to die.
func expectChildrenDieWithKilledHelper(t *testing.T, helperEnv string, check func(Gomega, map[int]string), commands ...string) {
	if runtime.GOOS != "linux" {
		t.Skip("parent-death signals are Linux only")
	}
	g := NewWithT(t)
	helper := exec.Command(os.Args[0], "-test.run=^$")
	// The helper is killed, so it cannot remove what it creates: its temporary directories (the
	// plane's, envtest's) go under the test's own, which the test removes.
	helper.Env = append(os.Environ(), helperEnv+"="+t.TempDir(), "TMPDIR="+t.TempDir())
	out, err := helper.StdoutPipe()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(helper.Start()).To(Succeed())
	defer func() { _ = helper.Process.Kill(); _ = helper.Wait() }()

	line, err := bufio.NewReader(out).ReadString('\n')
	g.Expect(err).NotTo(HaveOccurred())
	names := map[int]string{}
	for _, f := range strings.Fields(line) {
		pid, err := strconv.Atoi(f)
		g.Expect(err).NotTo(HaveOccurred(), "helper said %q", line)
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		names[pid] = strings.TrimSpace(string(comm))
	}
	g.Expect(names).To(ContainElements(commands), "children of the helper")
	if check != nil {
		check(g, names)
	}

	g.Expect(helper.Process.Kill()).To(Succeed())
	_ = helper.Wait()
	for pid, name := range names {
		g.Eventually(func() bool { return processAlive(pid) }, 20*time.Second, 50*time.Millisecond).
			Should(BeFalse(), "%s (%d) outlived its killed parent", name, pid)
	}
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
