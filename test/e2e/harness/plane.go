// Package harness runs a complete Cluster API management plane on this machine, as processes:
// etcd, kube-apiserver, kube-controller-manager's garbage collector and namespace controller
// (hack/plane-controllers), CAPI's core, kubeadm bootstrap and kubeadm control-plane managers with
// their webhooks registered against local webhook servers, and the Goofy manager. The quick start (`make run`) and the
// end-to-end suite both use it.
package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	infrav1 "github.com/goofy-capi/cluster-api-provider-goofy/api/v1alpha1"
)

// Scheme knows every kind the harness and its users read: Kubernetes, CAPI (core, kubeadm bootstrap
// and control plane), Goofy, CRDs and webhook configurations.
var Scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme, clusterv1.AddToScheme,
		bootstrapv1.AddToScheme, controlplanev1.AddToScheme, infrav1.AddToScheme,
	} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}()

// Options says where the binaries are and where output goes.
type Options struct {
	// RepoRoot is this repository (for the Goofy CRDs).
	RepoRoot string
	// OutputDir receives one log file per process and the management kubeconfig.
	OutputDir string
	// Binaries locates what the plane runs (see EnsureBinaries).
	Binaries Binaries
	// ListenerPortRange is passed to the Goofy manager (e.g. "20000-29999").
	ListenerPortRange string
	// GoofyArgs are extra flags for the Goofy manager.
	GoofyArgs []string
	// SkipGoofy starts the plane without the Goofy manager (CAPI alone).
	SkipGoofy bool
	// Bare starts etcd and kube-apiserver only: an empty management cluster (for clusterctl init).
	Bare bool
	// Progress receives one line per step; nil discards.
	Progress io.Writer
	// APIServerFlags are extra kube-apiserver flags (name without dashes -> value), e.g. the audit
	// log the scale benchmark counts requests with.
	APIServerFlags map[string]string
}

// Plane is a running management plane.
type Plane struct {
	opts Options
	env  *envtest.Environment

	// Config and Client reach the management cluster as an administrator.
	Config *rest.Config
	Client client.Client
	// Kubeconfig is the path of a kubeconfig file for the management cluster.
	Kubeconfig string

	// Processes started after the API server, in start order (stopped in reverse).
	processes []*Process
	// Goofy is the Goofy manager process (nil with SkipGoofy).
	Goofy *Process
	// GoofyHealthURL is the Goofy manager's readiness endpoint.
	GoofyHealthURL string
	// CAPIManagers are the three CAPI manager processes.
	CAPIManagers []*Process

	logs []*os.File // etcd's and kube-apiserver's log files, closed by Stop
}

// capiComponent describes one CAPI manager: its binary and where its config lives in the module.
type capiComponent struct {
	name      string // process and webhook configuration prefix
	binary    string
	component string // path inside the CAPI module holding config/
	args      []string
}

var capiComponents = []capiComponent{
	{name: "capi", binary: "cluster-api-manager", component: "core", args: []string{"--feature-gates=ClusterTopology=true"}},
	{name: "capi-kubeadm-bootstrap", binary: "kubeadm-bootstrap-manager", component: "bootstrap/kubeadm"},
	{name: "capi-kubeadm-control-plane", binary: "kubeadm-control-plane-manager", component: "controlplane/kubeadm", args: []string{"--feature-gates=ClusterTopology=true"}},
}

func (p *Plane) progress(format string, args ...any) {
	if p.opts.Progress != nil {
		fmt.Fprintf(p.opts.Progress, "[harness] "+format+"\n", args...)
	}
}

// Start brings the management plane up. On error everything started so far is stopped again.
func Start(ctx context.Context, opts Options) (_ *Plane, retErr error) {
	if opts.Bare {
		opts.SkipGoofy = true
	}
	if err := opts.Binaries.check(!opts.SkipGoofy); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opts.OutputDir, 0o755); err != nil {
		return nil, err
	}
	p := &Plane{opts: opts}
	defer func() {
		if retErr != nil {
			p.Stop()
		}
	}()
	if err := p.startAPIServer(); err != nil {
		return nil, err
	}
	if opts.Bare {
		p.progress("bare management cluster ready")
		return p, nil
	}
	if err := p.startPlaneControllers(ctx); err != nil {
		return nil, err
	}
	if err := p.startCAPI(ctx); err != nil {
		return nil, err
	}
	if !opts.SkipGoofy {
		if err := p.StartGoofy(ctx); err != nil {
			return nil, err
		}
	}
	p.progress("management plane ready; logs in %s", opts.OutputDir)
	return p, nil
}

func (p *Plane) logFile(name string) string { return filepath.Join(p.opts.OutputDir, name+".log") }

// apiServerGOGC is the plane's kube-apiserver's garbage collector setting. Its heap is small and
// CAPI's custom-resource patches allocate fast, so at Go's default (100) collection took about a
// fifth of its CPU (a CPU profile during TestStress: gcBgMarkWorker 14.5 %, plus the allocating
// requests' assists), and it is the plane's largest CPU user (300 CPU-seconds in two TestStress
// rounds, against CAPI core's 70). Four times the heap growth between collections costs memory
// the machine has and leaves CAPI's managers the CPU: a saturated plane is what sets off CAPI's
// machines/status conflict storm (docs/performance.md).
const apiServerGOGC = "GOGC=400"

// startAPIServer starts etcd and kube-apiserver with envtest's control plane (certificates,
// authentication, health checks) and writes an administrator kubeconfig.
func (p *Plane) startAPIServer() error {
	p.progress("starting etcd and kube-apiserver")
	p.env = &envtest.Environment{
		BinaryAssetsDirectory:    p.opts.Binaries.Assets,
		ControlPlaneStartTimeout: 2 * time.Minute,
		ControlPlaneStopTimeout:  30 * time.Second,
	}
	api := p.env.ControlPlane.GetAPIServer()
	if p.env.ControlPlane.Etcd == nil {
		p.env.ControlPlane.Etcd = &envtest.Etcd{}
	}
	// Both die with the harness, however it ends (see withParentDeath).
	wrappers := filepath.Join(p.opts.OutputDir, "parent-death")
	var err error
	if api.Path, err = withParentDeath(wrappers, filepath.Join(p.opts.Binaries.Assets, "kube-apiserver"), apiServerGOGC); err != nil {
		return err
	}
	if p.env.ControlPlane.Etcd.Path, err = withParentDeath(wrappers, filepath.Join(p.opts.Binaries.Assets, "etcd")); err != nil {
		return err
	}
	// On loopback there is no routable address to publish in the kubernetes Service's endpoints.
	api.Configure().Set("endpoint-reconciler-type", "none")
	for k, v := range p.opts.APIServerFlags {
		api.Configure().Set(k, v)
	}
	af, err := os.Create(p.logFile("kube-apiserver"))
	if err != nil {
		return err
	}
	api.Out, api.Err = af, af
	p.logs = append(p.logs, af)
	ef, err := os.Create(p.logFile("etcd"))
	if err != nil {
		return err
	}
	p.env.ControlPlane.Etcd.Out, p.env.ControlPlane.Etcd.Err = ef, ef
	p.logs = append(p.logs, ef)
	cfg, err := p.env.Start()
	if err != nil {
		return fmt.Errorf("starting etcd and kube-apiserver: %w (logs: %s, %s)", err, p.logFile("etcd"), p.logFile("kube-apiserver"))
	}
	admin, err := p.env.AddUser(envtest.User{Name: "goofy-admin", Groups: []string{"system:masters"}}, cfg)
	if err != nil {
		return err
	}
	p.Config = admin.Config()
	p.Config.QPS, p.Config.Burst = 100, 200
	kc, err := admin.KubeConfig()
	if err != nil {
		return err
	}
	p.Kubeconfig = filepath.Join(p.opts.OutputDir, "mgmt.kubeconfig")
	if err := os.WriteFile(p.Kubeconfig, kc, 0o600); err != nil {
		return err
	}
	p.Client, err = client.New(p.Config, client.Options{Scheme: Scheme})
	return err
}

// startPlaneControllers runs kube-controller-manager's two controllers that make deletion behave as
// in a real cluster, the garbage collector (owner references) and the namespace controller, as
// hack/plane-controllers (upstream's controllers without the rest of kube-controller-manager).
func (p *Plane) startPlaneControllers(ctx context.Context) error {
	p.progress("starting the plane's controllers (garbage collector, namespace controller)")
	ports, err := processPorts(1)
	if err != nil {
		return err
	}
	port := ports[0]
	proc := &Process{
		Name:    "plane-controllers",
		Path:    p.opts.Binaries.PlaneControllers,
		LogFile: p.logFile("plane-controllers"),
		Args: []string{
			"--kubeconfig=" + p.Kubeconfig,
			"--health-address=" + hostPort(port),
		},
	}
	if err := p.track(proc); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return waitHTTPOK(wctx, proc, fmt.Sprintf("http://%s/healthz", hostPort(port)))
}

func (p *Plane) track(proc *Process) error {
	if err := proc.Start(); err != nil {
		return err
	}
	p.processes = append(p.processes, proc)
	return nil
}

// startCAPI installs the CAPI CRDs and starts the three CAPI managers one after the other, each
// with its own webhook certificate and ports; once a manager is ready its webhook configurations are
// registered, so the next manager's start already goes through validated, defaulted objects.
func (p *Plane) startCAPI(ctx context.Context) error {
	type prepared struct {
		c                       capiComponent
		webhookPort, healthPort int
		diagPort                int
		certDir                 string
		ca                      []byte
	}
	var all []prepared
	var crds []*apiextensionsv1.CustomResourceDefinition
	for _, c := range capiComponents {
		ports, err := processPorts(3)
		if err != nil {
			return err
		}
		certDir := filepath.Join(p.opts.OutputDir, "certs", c.name)
		ca, err := writeServingCert(certDir, c.name+"-webhook")
		if err != nil {
			return err
		}
		cs, err := capiCRDs(p.opts.Binaries.CAPIModule, c.component, ports[0], ca)
		if err != nil {
			return err
		}
		crds = append(crds, cs...)
		all = append(all, prepared{c: c, webhookPort: ports[0], healthPort: ports[1], diagPort: ports[2], certDir: certDir, ca: ca})
	}
	goofy, err := goofyCRDs(p.opts.RepoRoot)
	if err != nil {
		return err
	}
	crds = append(crds, goofy...)
	p.progress("installing %d CRDs (CAPI core, kubeadm bootstrap, kubeadm control plane, Goofy)", len(crds))
	if _, err := envtest.InstallCRDs(p.Config, envtest.CRDInstallOptions{CRDs: crds, MaxTime: 2 * time.Minute}); err != nil {
		return fmt.Errorf("installing CRDs: %w", err)
	}

	for _, m := range all {
		p.progress("starting %s (webhooks on %d)", m.c.name, m.webhookPort)
		bin, err := lookBinary(p.opts.Binaries.CAPI, m.c.binary)
		if err != nil {
			return err
		}
		proc := &Process{
			Name:    m.c.name,
			Path:    bin,
			LogFile: p.logFile(m.c.name),
			Env:     []string{"KUBECONFIG=" + p.Kubeconfig},
			Args: append([]string{
				"--leader-elect=false",
				fmt.Sprintf("--webhook-port=%d", m.webhookPort),
				"--webhook-cert-dir=" + m.certDir,
				"--health-addr=" + hostPort(m.healthPort),
				"--diagnostics-address=" + hostPort(m.diagPort),
				"--insecure-diagnostics",
			}, m.c.args...),
		}
		if err := p.track(proc); err != nil {
			return err
		}
		p.CAPIManagers = append(p.CAPIManagers, proc)
		wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		err = waitHTTPOK(wctx, proc, fmt.Sprintf("http://%s/readyz", hostPort(m.healthPort)))
		cancel()
		if err != nil {
			return err
		}
		hooks, err := webhookConfigurations(p.opts.Binaries.CAPIModule, m.c.component, m.c.name, m.webhookPort, m.ca)
		if err != nil {
			return err
		}
		for _, h := range hooks {
			if err := p.Client.Create(ctx, h.(client.Object)); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("registering webhooks of %s: %w", m.c.name, err)
			}
		}
	}
	return nil
}

// StartGoofy builds nothing: it starts the Goofy manager binary and waits until it is ready. It is
// also how the suite restarts the manager after killing it.
func (p *Plane) StartGoofy(ctx context.Context) error {
	if p.Goofy == nil {
		ports, err := processPorts(2)
		if err != nil {
			return err
		}
		portRange := p.opts.ListenerPortRange
		if portRange == "" {
			portRange = "20000-29999"
		}
		p.GoofyHealthURL = fmt.Sprintf("http://%s/readyz", hostPort(ports[1]))
		p.Goofy = &Process{
			Name:    "goofy",
			Path:    p.opts.Binaries.Goofy,
			LogFile: p.logFile("goofy"),
			Env:     []string{"KUBECONFIG=" + p.Kubeconfig},
			Args: append([]string{
				"--kubeconfig=" + p.Kubeconfig,
				"--leader-elect=false",
				"--diagnostics-address=" + hostPort(ports[0]),
				"--insecure-diagnostics",
				"--health-addr=" + hostPort(ports[1]),
				"--listener-host=127.0.0.1",
				"--listener-bind-address=127.0.0.1",
				"--listener-port-range=" + portRange,
				// No webhook server: the plane registers no GoofyCluster webhook (the mux refuses
				// ports a cluster does not hold without it; internal/webhook's envtest covers it).
				"--webhook-port=0",
				// Durable state, as shipped; the same directory across restarts of the manager.
				"--state-dir=" + filepath.Join(p.opts.OutputDir, "goofy-state"),
			}, p.opts.GoofyArgs...),
		}
		p.processes = append(p.processes, p.Goofy)
	}
	p.progress("starting the Goofy manager")
	if err := p.Goofy.Start(); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	return waitHTTPOK(wctx, p.Goofy, p.GoofyHealthURL)
}

// LogFiles returns the log file of every process the plane runs, by process name.
func (p *Plane) LogFiles() map[string]string {
	out := map[string]string{"etcd": p.logFile("etcd"), "kube-apiserver": p.logFile("kube-apiserver")}
	for _, proc := range p.processes {
		out[proc.Name] = proc.LogFile
	}
	return out
}

// OutputDir is where logs and kubeconfigs are written.
func (p *Plane) OutputDir() string { return p.opts.OutputDir }

// Stop stops every process in reverse start order (SIGTERM to its process group, SIGKILL after a
// grace period), then kube-apiserver and etcd, and removes their temporary directories.
func (p *Plane) Stop() {
	for i := len(p.processes) - 1; i >= 0; i-- {
		p.processes[i].Stop(10 * time.Second)
	}
	p.processes = nil
	if p.env != nil {
		p.progress("stopping kube-apiserver and etcd")
		if err := p.env.Stop(); err != nil {
			p.progress("stopping kube-apiserver and etcd: %v", err)
		}
		p.env = nil
	}
	for _, f := range p.logs {
		f.Close()
	}
	p.logs = nil
}

// WebhookConfigurationNames lists the webhook configurations registered for the CAPI managers.
func (p *Plane) WebhookConfigurationNames(ctx context.Context) ([]string, error) {
	var names []string
	var mw admissionregistrationv1.MutatingWebhookConfigurationList
	if err := p.Client.List(ctx, &mw); err != nil {
		return nil, err
	}
	for _, w := range mw.Items {
		names = append(names, w.Name)
	}
	var vw admissionregistrationv1.ValidatingWebhookConfigurationList
	if err := p.Client.List(ctx, &vw); err != nil {
		return nil, err
	}
	for _, w := range vw.Items {
		names = append(names, w.Name)
	}
	return names, nil
}

var errMissing = errors.New("missing")

func missing(what string) error { return fmt.Errorf("%w: %s", errMissing, what) }

// IsMissingBinary reports whether err says a binary the plane needs has not been built.
func IsMissingBinary(err error) bool { return errors.Is(err, errMissing) }
