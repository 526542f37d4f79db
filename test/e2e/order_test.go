package e2e

import (
	"flag"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// The scenarios run concurrently, each once the scenarios it depends on have ended, instead of one
// after another: most of a scenario's time is spent waiting for CAPI's controllers (a new
// cluster's first connection is retried every 30 s, a MachineHealthCheck waits out its timeouts),
// so independent scenarios wait at the same time. What one scenario needs of another is written
// here, in one place. Two chains run side by side, so that at most two scenarios load the plane at
// once (25 clusters at once, or a second plane starting, beside the fault scenarios made CAPI's
// status patches time out on the management API server and the faults' timing fail):
//   - qs: the fault scenarios, then quick start, scale and remediation, all on cluster qs;
//   - the others: upgrade (upg) and ClusterClass (cc) on their own clusters, machine pools (mp)
//     after ClusterClass, then the scenarios
//     that start planes or managers of their own (clusterctl init, the quick start command, the
//     stress namespace's errors at scale and shards); with GOOFY_E2E_FAULTS_SLOW=1 upgrade and
//     ClusterClass wait for the API-latency scenario, whose two clusters need two of the suite's
//     four ports;
//   - the restart (which kills the suite's manager, and must see every cluster Available within
//     30 s) waits for both chains; then the delete (which removes cc) and the stress scenario
//     (25 clusters at once, through a manager of its own) run side by side: the delete only
//     waits for CAPI, within minutes, and its cluster is one beside the stress's 25.
var runsAfter = map[string][]string{
	"TestFaultEtcdMemberUnhealthy":   {"TestFaultUnreachable"},
	"TestFaultEtcdMemberRemediation": {"TestFaultEtcdMemberUnhealthy"},
	"TestFaultAPIServerErrors":       {"TestFaultEtcdMemberRemediation"},
	"TestFaultVMFailed":              {"TestFaultAPIServerErrors"},
	"TestQuickStart":                 {"TestFaultVMFailed"},
	"TestScale":                      {"TestQuickStart"},
	"TestRemediation":                {"TestScale"},

	"TestUpgrade":                  {"TestFaultAPILatency"},
	"TestClusterClass":             {"TestFaultAPILatency"},
	"TestMachinePool":              {"TestClusterClass"},
	"TestClusterctlInit":           {"TestUpgrade", "TestClusterClass", "TestMachinePool"},
	"TestQuickStartTopologyFlavor": {"TestClusterctlInit"},
	"TestFaultErrorsAtScale":       {"TestQuickStartTopologyFlavor"},
	"TestShards":                   {"TestFaultErrorsAtScale"},

	"TestRestart": {"TestClusterctlGenerate", "TestClusterctlInit", "TestRemediation", "TestUpgrade",
		"TestClusterClass", "TestMachinePool", "TestQuickStartTopologyFlavor", "TestShards"},
	"TestDelete": {"TestRestart"},
	"TestStress": {"TestRestart"},
}

// heavyScenarios load the two cores so much that they fail their time limits beside other work:
// the stress scenario, with 25 clusters created at once, did beside the unit tests, and beside
// CAPI's QuickStartSpec with staticcheck.
var heavyScenarios = map[string]bool{"TestStress": true}

// CoresFreeEnv names a file that appears once the machine's cores are free for a heavy scenario:
// make test-all creates it when everything it runs beside the suite has ended (hack/test-all.sh).
const CoresFreeEnv = "GOOFY_E2E_CORES_FREE_FILE"

// waitForTheCores waits, when the run says how to know (CoresFreeEnv), until the CPU-bound work
// beside the suite has ended, for at most half an hour.
func waitForTheCores(t *testing.T) {
	file := os.Getenv(CoresFreeEnv)
	if file == "" {
		return
	}
	start := time.Now()
	for deadline := start.Add(30 * time.Minute); time.Now().Before(deadline); time.Sleep(time.Second) {
		if _, err := os.Stat(file); err == nil {
			if waited := time.Since(start); waited > time.Second {
				t.Logf("waited %.0fs for the work beside the suite to end (%s)", waited.Seconds(), CoresFreeEnv)
			}
			return
		}
	}
	t.Logf("%s: %s did not appear within 30 minutes; going on", CoresFreeEnv, file)
}

// scenarioParallelism is the -parallel the suite needs: every scenario is a parallel test that may
// wait for others, and one waiting must never hold the last free place of one it waits for.
const scenarioParallelism = 64

var (
	scenarioMu   sync.Mutex
	scenarioDone = map[string]chan struct{}{}
	scenarioSeen = map[string]bool{}
)

// inOrder makes t a parallel test that starts once every selected scenario it runs after has
// ended (cleanups included). It must come before any cleanup of t is registered, so that t counts
// as ended only after all of them; calling it again is harmless.
func inOrder(t *testing.T) {
	t.Helper()
	scenarioMu.Lock()
	if scenarioSeen[t.Name()] {
		scenarioMu.Unlock()
		return
	}
	scenarioSeen[t.Name()] = true
	done := doneChannel(t.Name())
	scenarioMu.Unlock()
	t.Cleanup(func() { close(done) })
	t.Parallel()
	if heavyScenarios[t.Name()] {
		waitForTheCores(t)
	}
	for _, before := range runsAfter[t.Name()] {
		if !selected(before) {
			continue
		}
		scenarioMu.Lock()
		wait := doneChannel(before)
		scenarioMu.Unlock()
		<-wait
	}
}

// doneChannel is closed when the named scenario has ended; the caller holds scenarioMu.
func doneChannel(name string) chan struct{} {
	ch, ok := scenarioDone[name]
	if !ok {
		ch = make(chan struct{})
		scenarioDone[name] = ch
	}
	return ch
}

// selected reports whether go test runs the top-level test name in this run (-run and -skip).
func selected(name string) bool {
	match := func(flagName string) (matched, set bool) {
		f := flag.Lookup(flagName)
		if f == nil || f.Value.String() == "" {
			return false, false
		}
		// go test matches a top-level name against the pattern's part before its first '/'.
		first, _, _ := strings.Cut(f.Value.String(), "/")
		ok, err := regexp.MatchString(first, name)
		return err == nil && ok, true
	}
	if run, set := match("test.run"); set && !run {
		return false
	}
	if skip, _ := match("test.skip"); skip {
		return false
	}
	return true
}
