package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/spf13/pflag"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/cluster-api/util/flags"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/mux"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/simulate"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/testenv"
	"github.com/goofy-capi/cluster-api-provider-goofy/test/e2e/harness"
)

// Listener ports of this package's tests, apart from the other packages' (see controllers and
// internal/mux) and below the kernel's ephemeral range.
const testPortMin, testPortMax = 16000, 16099

var cfg *rest.Config // nil without the envtest binaries

func TestMain(m *testing.M) {
	os.Exit(testenv.RunTests(m, func(c *rest.Config) error { cfg = c; return nil }))
}

// newFlags is the manager's flag set, as main builds it.
func newFlags(o *options) *pflag.FlagSet {
	fs := pflag.NewFlagSet("manager", pflag.ContinueOnError)
	o.addFlags(fs)
	goFlags := flag.NewFlagSet("", flag.ContinueOnError)
	goFlags.String("kubeconfig", "", "") // controller-runtime's, on flag.CommandLine
	fs.AddGoFlagSet(goFlags)
	return fs
}

func parseFlags(t testing.TB, args ...string) (*options, error) {
	t.Helper()
	o := &options{}
	fs := newFlags(o)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	return o, o.complete(fs)
}

// TestFlags: CAPI's manager flags are there with CAPI's defaults, and the renamed ones still work
// as deprecated aliases, hidden from --help.
func TestFlags(t *testing.T) {
	g := NewWithT(t)
	o := &options{}
	fs := newFlags(o)
	for name, def := range map[string]string{
		"diagnostics-address": ":8443", "insecure-diagnostics": "false", "tls-min-version": "VersionTLS12",
		"tls-cipher-suites": "[]", "tls-curve-preferences": "[]", "health-addr": ":9440",
	} {
		f := fs.Lookup(name)
		g.Expect(f).NotTo(BeNil(), name)
		g.Expect(f.DefValue).To(Equal(def), name)
		g.Expect(f.Hidden || f.Deprecated != "").To(BeFalse(), name)
	}
	for _, name := range []string{"metrics-bind-address", "health-probe-bind-address"} {
		f := fs.Lookup(name)
		g.Expect(f).NotTo(BeNil(), name)
		g.Expect(f.Deprecated).NotTo(BeEmpty(), name)
	}

	o, err := parseFlags(t)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(o.manager.DiagnosticsAddress).To(Equal(":8443"))
	g.Expect(o.manager.InsecureDiagnostics).To(BeFalse())
	g.Expect(o.healthAddr).To(Equal(":9440"))

	// The old names: the probes alias moves --health-addr; the metrics alias keeps plain HTTP
	// unless --insecure-diagnostics says otherwise.
	o, err = parseFlags(t, "--health-probe-bind-address=:9441", "--metrics-bind-address=:8080")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(o.healthAddr).To(Equal(":9441"))
	g.Expect(o.manager.DiagnosticsAddress).To(Equal(":8080"))
	g.Expect(o.manager.InsecureDiagnostics).To(BeTrue())
	o, err = parseFlags(t, "--metrics-bind-address=:8080", "--insecure-diagnostics=false")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(o.manager.InsecureDiagnostics).To(BeFalse())
	_, err = parseFlags(t, "--metrics-bind-address=:8080", "--diagnostics-address=:8443")
	g.Expect(err).To(MatchError(ContainSubstring("set only --diagnostics-address")))

	// The listeners take their TLS settings from the same flags.
	o, err = parseFlags(t, "--tls-min-version=VersionTLS13", "--tls-cipher-suites=TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", "--tls-curve-preferences=23")
	g.Expect(err).NotTo(HaveOccurred())
	tlsOpts, _, err := flags.GetManagerOptions(o.manager)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(listenerTLS(tlsOpts)).To(Equal(mux.TLSOptions{
		MinVersion:       tls.VersionTLS13,
		CipherSuites:     []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256},
		CurvePreferences: []tls.CurveID{tls.CurveP256},
	}))
	o, err = parseFlags(t, "--tls-min-version=VersionTLS99")
	g.Expect(err).NotTo(HaveOccurred())
	_, _, err = flags.GetManagerOptions(o.manager)
	g.Expect(err).To(HaveOccurred())
}

// TestWorkloadLimitFlags: the listeners' limits come from the --workload-* flags, whose defaults
// are mux.DefaultLimits.
func TestWorkloadLimitFlags(t *testing.T) {
	g := NewWithT(t)
	o, err := parseFlags(t)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(o.workloadLimits).To(Equal(mux.DefaultLimits()))
	o, err = parseFlags(t, "--workload-max-requests-inflight=7", "--workload-max-mutating-requests-inflight=3",
		"--workload-request-timeout=5s", "--workload-max-connections-per-listener=9", "--workload-max-watches-per-cluster=11",
		"--workload-watch-write-timeout=2s", "--workload-max-port-forward-streams=4")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(o.workloadLimits).To(Equal(mux.Limits{
		MaxConnectionsPerListener: 9, MaxRequestsInFlight: 7, MaxMutatingRequestsInFlight: 3, RequestTimeout: 5 * time.Second,
		MaxWatchesPerCluster: 11, WatchWriteTimeout: 2 * time.Second, MaxPortForwardStreams: 4,
	}))
}

// TestWorkloadSimulationFlags: the simulator's options come from the workload flags.
func TestWorkloadSimulationFlags(t *testing.T) {
	g := NewWithT(t)
	o, err := parseFlags(t)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(o.workloads.Workloads).To(BeTrue())
	g.Expect(o.workloads.ScheduledEvents).To(BeFalse())
	g.Expect(o.workloads.EventTTL).To(Equal(simulate.DefaultEventTTL))
	o, err = parseFlags(t, "--simulate-workloads=false", "--pod-start-delay=3s", "--job-run-time=7s", "--scheduled-events", "--event-ttl=10m")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(o.workloads.Workloads).To(BeFalse())
	g.Expect(o.workloads.PodStartDelay).To(Equal(3 * time.Second))
	g.Expect(o.workloads.JobRunTime).To(Equal(7 * time.Second))
	g.Expect(o.workloads.ScheduledEvents).To(BeTrue())
	g.Expect(o.workloads.EventTTL).To(Equal(10 * time.Minute))
}

// TestLoggingFlags: component-base's logging flags are there, and the deprecated zap flags map
// onto them unless those are given too.
func TestLoggingFlags(t *testing.T) {
	g := NewWithT(t)
	fs := newFlags(&options{})
	for _, name := range []string{"v", "vmodule", "logging-format", "log-flush-frequency", "version"} {
		g.Expect(fs.Lookup(name)).NotTo(BeNil(), name)
	}
	g.Expect(fs.Lookup("logging-format").DefValue).To(Equal("text"))
	g.Expect(fs.Lookup("logging-format").Usage).To(ContainSubstring(`"json"`), "the JSON format is registered")
	g.Expect(fs.Lookup("v").DefValue).To(Equal("0"))

	for _, c := range []struct {
		args           []string
		v, format, err string
	}{
		{args: nil, v: "0", format: "text"},
		{args: []string{"--zap-log-level=debug"}, v: "1", format: "text"},
		{args: []string{"--zap-log-level=5", "--zap-encoder=json"}, v: "5", format: "json"},
		{args: []string{"--zap-log-level=error", "--zap-encoder=console"}, v: "0", format: "text"},
		{args: []string{"--zap-devel"}, v: "1", format: "text"},
		{args: []string{"--zap-log-level=debug", "--v=3", "--zap-encoder=json", "--logging-format=text"}, v: "3", format: "text"},
		{args: []string{"--zap-stacktrace-level=panic", "--zap-time-encoding=iso8601"}, v: "0", format: "text"},
		{args: []string{"--zap-log-level=loud"}, err: "--zap-log-level"},
		{args: []string{"--zap-encoder=xml"}, err: "--zap-encoder"},
	} {
		o, err := parseFlags(t, c.args...)
		if c.err != "" {
			g.Expect(err).To(MatchError(ContainSubstring(c.err)), "%v", c.args)
			continue
		}
		g.Expect(err).NotTo(HaveOccurred(), "%v", c.args)
		g.Expect(fmt.Sprint(o.logs.Verbosity)).To(Equal(c.v), "%v", c.args)
		g.Expect(o.logs.Format).To(Equal(c.format), "%v", c.args)
	}
}

// TestVersion: `make build` sets the version --version prints (VERSION, the git commit, the tree
// state and the build date, in CAPI's version package).
func TestVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the manager")
	}
	g := NewWithT(t)
	root := testenv.RepoRoot()
	dryRunBuild := func(vars ...string) string {
		out, err := exec.Command("make", append([]string{"-C", root, "-s", "--no-print-directory", "-n", "build"}, vars...)...).Output()
		g.Expect(err).NotTo(HaveOccurred())
		build := strings.TrimSpace(string(out))
		g.Expect(build).To(HavePrefix("go build "))
		return build
	}
	// What the Makefile computes by default.
	defaults := dryRunBuild()
	g.Expect(defaults).To(SatisfyAll(
		MatchRegexp(`\.gitTreeState=(clean|dirty) `),
		MatchRegexp(`\.buildDate=20[0-9-]+T[0-9:]+Z`),
	))

	if prebuilt := os.Getenv(harness.PrebuiltManagerEnv); prebuilt != "" {
		// The run built the manager once with `make build` (make test-all): it must report what
		// the Makefile passes it. The date and tree state may differ between that build and this
		// dry run, so those are checked by form.
		g.Expect(managerVersion(g, prebuilt)).To(MatchRegexp(`^goofy-manager %s \(git commit %s, tree (clean|dirty), built 20[0-9-]+T[0-9:]+Z, go1`,
			regexp.QuoteMeta(ldflagValue(g, defaults, "gitVersion")), regexp.QuoteMeta(ldflagValue(g, defaults, "gitCommit"))))
	} else {
		// Built with fixed inputs into the binary cache, where go build finds it up to date and
		// links it again only when the manager's code changed: a link is 30 s of CPU. The build's
		// work directory is beside the binary (GOTMPDIR), so the new binary replaces the old one
		// by a rename, never by a copy another test process could run half-written.
		dir := filepath.Join(testenv.CacheDir(), "test", "version")
		g.Expect(os.MkdirAll(dir, 0o755)).To(Succeed())
		bin := filepath.Join(dir, "manager")
		build := dryRunBuild("VERSION=v9.8.7", "GIT_COMMIT=0123abc", "GIT_TREE_STATE=clean", "BUILD_DATE=2001-02-03T04:05:06Z")
		build = strings.Replace(build, "-o bin/manager", "-o "+bin, 1)
		cmd := exec.Command("bash", "-c", build)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "GOTMPDIR="+dir)
		out, err := cmd.CombinedOutput()
		g.Expect(err).NotTo(HaveOccurred(), string(out))
		g.Expect(managerVersion(g, bin)).To(MatchRegexp(`^goofy-manager v9\.8\.7 \(git commit 0123abc, tree clean, built 2001-02-03T04:05:06Z, go1`))
	}

	g.Expect(versionString()).To(HavePrefix("goofy-manager unknown (git commit unknown"), "a test binary has no -ldflags")
}

// managerVersion is what the manager binary at bin prints for --version.
func managerVersion(g Gomega, bin string) string {
	out, err := exec.Command(bin, "--version").CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), string(out))
	return string(out)
}

// ldflagValue is the value a go build command line sets for CAPI's version variable name.
func ldflagValue(g Gomega, build, name string) string {
	m := regexp.MustCompile(`-X sigs\.k8s\.io/cluster-api/version\.` + name + `=(\S+)`).FindStringSubmatch(build)
	g.Expect(m).To(HaveLen(2), "%s in %s", name, build)
	return m[1]
}

// TestREADMEFlags: the README's flag tables name every flag --help shows and every deprecated
// alias, and nothing else.
func TestREADMEFlags(t *testing.T) {
	g := NewWithT(t)
	f, err := os.Open(filepath.Join(testenv.RepoRoot(), "README.md"))
	g.Expect(err).NotTo(HaveOccurred())
	defer f.Close()
	documented, deprecated := map[string]bool{}, map[string]bool{}
	flagName := regexp.MustCompile("`--([a-z0-9-]+)`")
	section, table := "", map[string]bool(nil)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "## "):
			section = line
		case section != "## Manager flags":
		case strings.HasPrefix(line, "| flag |"):
			table = documented
		case strings.HasPrefix(line, "| deprecated flag |"):
			table = deprecated
		case strings.HasPrefix(line, "| `--") && table != nil:
			first := strings.Split(line, "|")[1]
			for _, m := range flagName.FindAllStringSubmatch(first, -1) {
				table[m[1]] = true
			}
		}
	}
	g.Expect(documented).NotTo(BeEmpty())

	visible, hidden := map[string]bool{}, map[string]bool{}
	newFlags(&options{}).VisitAll(func(f *pflag.Flag) {
		if f.Deprecated != "" {
			hidden[f.Name] = true
		} else if !f.Hidden {
			visible[f.Name] = true
		}
	})
	g.Expect(documented).To(Equal(visible), "README.md's flags table")
	g.Expect(deprecated).To(Equal(hidden), "README.md's deprecated flags table")
}

func requireEnv(t testing.TB) {
	t.Helper()
	if cfg == nil {
		t.Skipf("envtest binaries not built (run 'make envtest'); looked in %s", testenv.AssetsDir())
	}
}

func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startManager runs the manager (run, as main does) with args against envtest until the test
// ends, and waits until it is ready.
func startManager(t *testing.T, args ...string) {
	t.Helper()
	healthAddr := freeAddr(t)
	o, err := parseFlags(t, append([]string{
		"--health-addr=" + healthAddr, "--state-dir=", "--namespace=goofy-main-test", "--webhook-port=0",
		fmt.Sprintf("--listener-port-range=%d-%d", testPortMin, testPortMax),
	}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	o.skipNameValidation = true
	testenv.Go(t, func(ctx context.Context) error { return run(ctrl.LoggerInto(ctx, ctrl.Log), *o, cfg) })
	NewWithT(t).Eventually(func() (int, error) {
		resp, err := http.Get("http://" + healthAddr + "/readyz")
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}, 60*time.Second, 100*time.Millisecond).Should(Equal(http.StatusOK))
}

// get GETs url with token (if any) and returns the status and body.
func get(t testing.TB, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	// The diagnostics endpoint serves a self-signed certificate, as in every CAPI manager.
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	var status int
	var body []byte
	NewWithT(t).Eventually(func() error {
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		status = resp.StatusCode
		body, err = io.ReadAll(resp.Body)
		return err
	}, 20*time.Second, 100*time.Millisecond).Should(Succeed())
	return status, string(body)
}

// TestDiagnostics: the diagnostics endpoint serves metrics and /debug/listeners over HTTPS to
// callers whose token may GET the path (authentication and authorization through the
// management API server), and over plain HTTP to anyone with --insecure-diagnostics or the
// deprecated --metrics-bind-address.
func TestDiagnostics(t *testing.T) {
	requireEnv(t)
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(cfg)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "goofy-main-test"}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	t.Run("HTTPS with authentication and authorization", func(t *testing.T) {
		g := NewWithT(t)
		addr := freeAddr(t)
		startManager(t, "--diagnostics-address="+addr)

		// The scraper may GET the diagnostics paths, the stranger may not. (The authorizer
		// caches a denial for 30 s, so the two are different identities.)
		token := func(name string) string {
			_, err := cs.CoreV1().ServiceAccounts(ns.Name).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			tr, err := cs.CoreV1().ServiceAccounts(ns.Name).CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			return tr.Status.Token
		}
		scraper, stranger := token("scraper"), token("stranger")
		_, err := cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: "goofy-diagnostics"},
			Rules:      []rbacv1.PolicyRule{{Verbs: []string{"get"}, NonResourceURLs: []string{"/metrics", "/debug/*"}}},
		}, metav1.CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "goofy-diagnostics"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "goofy-diagnostics"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns.Name, Name: "scraper"}},
		}, metav1.CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())

		for _, path := range []string{"/metrics", "/debug/listeners"} {
			status, _ := get(t, "https://"+addr+path, "")
			g.Expect(status).To(Equal(http.StatusUnauthorized), path)
			status, _ = get(t, "https://"+addr+path, stranger)
			g.Expect(status).To(Equal(http.StatusForbidden), path)
		}
		status, body := get(t, "https://"+addr+"/debug/listeners", scraper)
		g.Expect(status).To(Equal(http.StatusOK))
		var listeners []mux.ListenerInfo
		g.Expect(json.Unmarshal([]byte(body), &listeners)).To(Succeed(), body)
		status, body = get(t, "https://"+addr+"/metrics", scraper)
		g.Expect(status).To(Equal(http.StatusOK))
		g.Expect(body).To(ContainSubstring("controller_runtime_reconcile_total"))
	})

	for name, args := range map[string][]string{
		"--insecure-diagnostics":            {"--insecure-diagnostics", "--diagnostics-address="},
		"deprecated --metrics-bind-address": {"--metrics-bind-address="},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			addr := freeAddr(t)
			args[len(args)-1] += addr
			startManager(t, args...)
			for _, path := range []string{"/metrics", "/debug/listeners"} {
				status, _ := get(t, "http://"+addr+path, "")
				g.Expect(status).To(Equal(http.StatusOK), path)
			}
		})
	}
}
