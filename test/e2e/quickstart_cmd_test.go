package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// TestQuickStartTopologyFlavor runs the quick start as `make run FLAVOR=topology` does: the
// command builds nothing new (the suite's binaries are there), starts a plane of its own, renders
// the topology flavor with the real clusterctl from this checkout's local repository (so the
// ClusterClass comes along), waits for Available and, with -exit-when-available, stops its plane.
func TestQuickStartTopologyFlavor(t *testing.T) {
	ctx, g := begin(t, 10*time.Minute)
	dir := t.TempDir()
	bin := filepath.Join(dir, "quickstart")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./test/e2e/cmd/quickstart")
	build.Dir = repoRoot
	out, err := build.CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), string(out))

	first, err := freeConsecutivePorts(2, stressPorts)
	g.Expect(err).NotTo(HaveOccurred())
	cmd := exec.CommandContext(ctx, bin, "-flavor", "topology", "-exit-when-available", "-timeout", "6m", "-out", filepath.Join(dir, "out"))
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "CONTROL_PLANE_MACHINE_COUNT=1", "WORKER_MACHINE_COUNT=1", "CLUSTER_NAME=qs-topology",
		fmt.Sprintf("GOOFY_LISTENER_PORT_RANGE=%d-%d", first, first+1))
	start := time.Now()
	out, err = cmd.CombinedOutput()
	t.Logf("quick start (FLAVOR=topology) finished in %.0fs", time.Since(start).Seconds())
	g.Expect(err).NotTo(HaveOccurred(), lastLines(string(out), 30))
	g.Expect(string(out)).To(ContainSubstring(`rendering flavor "topology" with clusterctl generate cluster`))
	g.Expect(string(out)).To(MatchRegexp(`default/qs-topology: Available=True cp=1/1 workers=1/1`))

	// Nothing of its plane is left running.
	ps, _ := exec.CommandContext(context.Background(), "pgrep", "-f", filepath.Join(dir, "out")).Output()
	g.Expect(strings.TrimSpace(string(ps))).To(BeEmpty(), "processes of the quick start's plane still running")
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
