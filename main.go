// Command manager runs the Goofy infrastructure provider: the GoofyCluster, GoofyMachine and
// GoofyMachineTemplate reconcilers and the WorkloadClustersMux that serves the simulated workload
// clusters.
package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/logs"
	logsv1 "k8s.io/component-base/logs/api/v1"
	_ "k8s.io/component-base/logs/json/register" // --logging-format=json
	"k8s.io/klog/v2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/flags"
	"sigs.k8s.io/cluster-api/version"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	infrav1 "github.com/goofy-capi/cluster-api-provider-goofy/api/v1alpha1"
	"github.com/goofy-capi/cluster-api-provider-goofy/controllers"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/memtrim"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/mux"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/simulate"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/storage"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
	webhooks "github.com/goofy-capi/cluster-api-provider-goofy/internal/webhook/v1alpha1"
)

var scheme = runtime.NewScheme()

func init() {
	_ = clientgoscheme.AddToScheme(scheme)
	_ = clusterv1.AddToScheme(scheme)
	_ = infrav1.AddToScheme(scheme)
}

type options struct {
	leaderElect              bool
	leaderElectLeaseDuration time.Duration
	leaderElectRenewDeadline time.Duration
	leaderElectRetryPeriod   time.Duration
	leaderElectNamespace     string
	namespace                string
	watchFilter              string
	goofyClusterConcurrency  int
	goofyMachineConcurrency  int
	templateConcurrency      int
	machinePoolConcurrency   int
	kubeAPIQPS               float32
	kubeAPIBurst             int
	syncPeriod               time.Duration
	// manager holds CAPI's shared manager flags: --diagnostics-address, --insecure-diagnostics,
	// --tls-min-version, --tls-cipher-suites, --tls-curve-preferences.
	manager    flags.ManagerOptions
	healthAddr string
	// The webhook server, as in CAPI's managers: --webhook-port (0: no webhooks), --webhook-cert-dir,
	// --webhook-cert-name, --webhook-key-name.
	webhookPort                                     int
	webhookCertDir, webhookCertName, webhookKeyName string
	// metricsBindAddress is the deprecated --metrics-bind-address (plain HTTP metrics).
	metricsBindAddress   string
	listenerHost         string
	listenerBindAddress  string
	listenerAddresses    string
	listenerPortRange    string
	shutdownTimeout      time.Duration
	memoryTrimInterval   time.Duration
	stateDir             string
	workloadStorageQuota int64
	workloadLimits       mux.Limits
	workloads            simulate.Options
	profilerAddress      string
	// azureDefaultCredentialNamespaces may use the manager's Azure credential without identityRef.
	azureDefaultCredentialNamespaces []string

	// logs holds component-base's logging flags (--v, --vmodule, --logging-format, ...).
	logs *logsv1.LoggingConfiguration
	// zapLogLevel, zapEncoder and zapDevel are the deprecated zap flags that still mean something.
	zapLogLevel, zapEncoder string
	zapDevel                bool
	printVersion            bool

	// skipNameValidation lets tests start more than one manager per process.
	skipNameValidation bool
}

func (o *options) addFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&o.leaderElect, "leader-elect", false, "Enable leader election; only the leader serves workload clusters.")
	fs.DurationVar(&o.leaderElectLeaseDuration, "leader-elect-lease-duration", 15*time.Second, "Duration non-leaders wait before trying to acquire leadership.")
	fs.DurationVar(&o.leaderElectRenewDeadline, "leader-elect-renew-deadline", 10*time.Second, "Duration the leader retries refreshing leadership before giving up.")
	fs.DurationVar(&o.leaderElectRetryPeriod, "leader-elect-retry-period", 2*time.Second, "Duration between leader election attempts.")
	fs.StringVar(&o.leaderElectNamespace, "leader-elect-namespace", "", "Namespace of the leader election lease (default: the pod's namespace).")
	fs.StringVar(&o.namespace, "namespace", "", "Namespace to watch; empty watches all namespaces.")
	fs.StringVar(&o.watchFilter, "watch-filter", "", fmt.Sprintf("Only reconcile objects whose %s label has this value; empty reconciles all.", clusterv1.WatchLabel))
	fs.IntVar(&o.goofyClusterConcurrency, "goofycluster-concurrency", 10, "Number of GoofyClusters reconciled in parallel.")
	fs.IntVar(&o.goofyMachineConcurrency, "goofymachine-concurrency", 10, "Number of GoofyMachines reconciled in parallel.")
	fs.IntVar(&o.templateConcurrency, "goofymachinetemplate-concurrency", 2, "Number of GoofyMachineTemplates reconciled in parallel.")
	fs.IntVar(&o.machinePoolConcurrency, "goofymachinepool-concurrency", 2, "Number of GoofyMachinePools reconciled in parallel.")
	fs.Float32Var(&o.kubeAPIQPS, "kube-api-qps", 20, "Maximum queries per second to the management cluster's API server.")
	fs.IntVar(&o.kubeAPIBurst, "kube-api-burst", 30, "Maximum burst of queries to the management cluster's API server.")
	fs.DurationVar(&o.syncPeriod, "sync-period", 10*time.Minute, "Minimum interval at which every watched object is reconciled again.")
	fs.StringVar(&o.healthAddr, "health-addr", ":9440", "Address of the /healthz and /readyz probes; \"0\" disables them.")
	fs.IntVar(&o.webhookPort, "webhook-port", 9443, "Port of the webhook server (the GoofyCluster validating webhook, which the Deployment registers with a cert-manager certificate). 0 serves no webhook: for a manager run without cert-manager, whose API server calls no webhook of it.")
	fs.StringVar(&o.webhookCertDir, "webhook-cert-dir", "/tmp/k8s-webhook-server/serving-certs/", "Directory of the webhook server's certificate and key.")
	fs.StringVar(&o.webhookCertName, "webhook-cert-name", "tls.crt", "File name of the webhook server's certificate in --webhook-cert-dir.")
	fs.StringVar(&o.webhookKeyName, "webhook-key-name", "tls.key", "File name of the webhook server's key in --webhook-cert-dir.")
	flags.AddManagerOptions(fs, &o.manager)
	fs.Lookup("diagnostics-address").Usage += " It also serves /debug/listeners (the workload cluster listeners as JSON). \"0\" disables it."
	for _, name := range []string{"tls-min-version", "tls-cipher-suites", "tls-curve-preferences"} {
		fs.Lookup(name).Usage += " The workload cluster listeners (API servers and etcd members) use it too."
	}

	fs.StringVar(&o.listenerHost, "listener-host", envOr("POD_IP", "127.0.0.1"), "Host advertised in workload cluster endpoints (default: $POD_IP, else 127.0.0.1).")
	fs.StringVar(&o.listenerBindAddress, "listener-bind-address", "", "Address workload cluster listeners bind to (default: the listener host if it is an IP, else 0.0.0.0).")
	fs.StringVar(&o.listenerAddresses, "listener-addresses", "", "IP addresses to spread workload cluster listeners over, each with the whole --listener-port-range, e.g. 127.0.0.1-127.0.0.8, 127.0.0.0/29 or 10.0.0.5,10.0.0.6 (comma-separated addresses, FIRST-LAST ranges, CIDR prefixes; at most 4096). A listener binds to one of them and its endpoint advertises that address (--listener-host is then not used, and --listener-bind-address must be empty); the first address's ports are handed out first. Empty (the default): one bind address, as --listener-bind-address says (docs/scaling.md).")
	fs.StringVar(&o.listenerPortRange, "listener-port-range", fmt.Sprintf("%d-%d", mux.DefaultPortMin, mux.DefaultPortMax), "Inclusive port range of workload cluster listeners, e.g. 20000-29999.")
	fs.StringVar(&o.profilerAddress, "profiler-address", "", "Bind address of the pprof endpoint (e.g. 127.0.0.1:6060); empty disables it.")
	fs.StringVar(&o.stateDir, "state-dir", defaultStateDir(), "Directory that keeps every workload cluster's state across restarts (one bbolt database; a write is answered once it is on disk). Empty keeps state in memory only.")
	fs.Int64Var(&o.workloadStorageQuota, "workload-storage-quota", store.DefaultStorageQuota, "Bytes each workload cluster may store (protobuf size of its objects); past it, writes fail as kube-apiserver's do when etcd's quota is exhausted. 0 or less: no quota.")
	def := mux.DefaultLimits()
	fs.IntVar(&o.workloadLimits.MaxRequestsInFlight, "workload-max-requests-inflight", def.MaxRequestsInFlight, "Non-mutating requests each workload cluster serves at once (kube-apiserver's --max-requests-inflight); past it, 429 with Retry-After. system:masters and long-running requests (watch, port-forward, exec, log, proxy) are exempt, as upstream. 0: no limit.")
	fs.IntVar(&o.workloadLimits.MaxMutatingRequestsInFlight, "workload-max-mutating-requests-inflight", def.MaxMutatingRequestsInFlight, "Mutating requests each workload cluster serves at once (kube-apiserver's --max-mutating-requests-inflight); past it, 429 with Retry-After. 0: no limit.")
	fs.DurationVar(&o.workloadLimits.RequestTimeout, "workload-request-timeout", def.RequestTimeout, "Time after which a workload cluster request that is not long-running is answered 504 (kube-apiserver's --request-timeout). 0: no timeout.")
	fs.IntVar(&o.workloadLimits.MaxConnectionsPerListener, "workload-max-connections-per-listener", def.MaxConnectionsPerListener, "Open connections per workload cluster listener with a verified client certificate other than system:masters' or an etcd client's (those are never limited, as kube-apiserver limits no connection); connections without one get a quarter of it, and as many may be in their TLS handshake at once (10 s at most). One more is closed after its handshake. 0: no limit.")
	fs.IntVar(&o.workloadLimits.MaxConnections, "workload-max-connections", def.MaxConnections, "Open connections across all workload cluster listeners of the process, whoever the client (system:masters, etcd and port-forward tunnels included): each is an open file. One more waits up to 1 s for a place before its TLS handshake, then is closed. 0 (the default): the open file limit less one file per serving listener and 1,024 for the rest of the process; less than 0: no limit.")
	fs.IntVar(&o.workloadLimits.MaxWatchesPerCluster, "workload-max-watches-per-cluster", def.MaxWatchesPerCluster, "Open watches per workload cluster; one more is answered 429 with Retry-After. system:masters is exempt, as in kube-apiserver's priority and fairness. 0: no limit.")
	fs.DurationVar(&o.workloadLimits.WatchWriteTimeout, "workload-watch-write-timeout", def.WatchWriteTimeout, "Time a workload cluster watch event may take to write before the watch is ended (its client stopped reading). 0: no timeout.")
	fs.IntVar(&o.workloadLimits.MaxPortForwardStreams, "workload-max-port-forward-streams", def.MaxPortForwardStreams, "Streams forwarded at once per port-forward connection to a workload cluster; one more fails as a refused forward. 0: no limit.")
	fs.StringSliceVar(&o.azureDefaultCredentialNamespaces, "azure-default-credential-namespaces", nil, "Comma-separated namespaces whose Azure-backed GoofyClusters may use the manager's own Azure credential and cloud without spec.backend.azure.identityRef. Empty (the default): none; every other GoofyCluster needs a GoofyAzureClusterIdentity that allows its namespace (docs/azure.md).")
	fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 10*time.Second, "How long in-flight workload cluster requests may take on shutdown.")
	fs.DurationVar(&o.memoryTrimInterval, "memory-trim-interval", memtrim.DefaultInterval, "How often the manager looks at its heap and, when it holds more free heap than it allocated since the last look (at least 16 MiB), returns it to the operating system (docs/performance.md). 0: never; the Go runtime then returns it slowly.")
	fs.BoolVar(&o.workloads.Workloads, "simulate-workloads", true, "Run workloads in the simulated clusters: the scheduler, the kubelets' pod lifecycle and kube-controller-manager's Deployment, ReplicaSet, DaemonSet and disruption controllers (docs/workloads.md). Off, Deployments and DaemonSets report their rollouts at once and no pod runs.")
	fs.DurationVar(&o.workloads.PodStartDelay, "pod-start-delay", simulate.DefaultPodStartDelay, "How long a simulated kubelet takes from a pod's binding to its containers running.")
	fs.DurationVar(&o.workloads.JobRunTime, "job-run-time", simulate.DefaultJobRunTime, "How long a Job's pod runs in a simulated cluster before its containers exit 0.")
	fs.BoolVar(&o.workloads.ScheduledEvents, "scheduled-events", false, "Record kube-scheduler's Scheduled event for every pod a simulated cluster binds. Off by default: each event costs memory until the event TTL deletes it.")
	fs.DurationVar(&o.workloads.EventTTL, "event-ttl", simulate.DefaultEventTTL, "How long a simulated cluster keeps an Event after its last write (kube-apiserver's --event-ttl).")

	if o.logs == nil {
		o.logs = logs.NewOptions()
	}
	logsv1.AddFlags(o.logs, fs)
	fs.BoolVar(&o.printVersion, "version", false, "Print the version and exit.")

	// Renamed flags, kept for one release (hidden from --help; using one prints a warning).
	fs.StringVar(&o.healthAddr, "health-probe-bind-address", ":9440", "Deprecated: use --health-addr.")
	_ = fs.MarkDeprecated("health-probe-bind-address", "use --health-addr instead; this alias will be removed in the next release")
	fs.StringVar(&o.metricsBindAddress, "metrics-bind-address", "", "Deprecated: use --diagnostics-address (HTTPS) or --diagnostics-address with --insecure-diagnostics (plain HTTP).")
	_ = fs.MarkDeprecated("metrics-bind-address", "use --diagnostics-address (HTTPS with authentication and authorization), with --insecure-diagnostics for plain HTTP as this flag served; it will be removed in the next release")
	// controller-runtime's zap flags, before component-base's logging.
	fs.StringVar(&o.zapLogLevel, "zap-log-level", "", "Deprecated: use --v.")
	_ = fs.MarkDeprecated("zap-log-level", "use --v (debug is --v=1, an integer N is --v=N); it will be removed in the next release")
	fs.StringVar(&o.zapEncoder, "zap-encoder", "", "Deprecated: use --logging-format.")
	_ = fs.MarkDeprecated("zap-encoder", "use --logging-format (json, or text for console); it will be removed in the next release")
	fs.BoolVar(&o.zapDevel, "zap-devel", false, "Deprecated: use --v=1.")
	_ = fs.MarkDeprecated("zap-devel", "use --v=1 (the text format is the default); it will be removed in the next release")
	for _, name := range []string{"zap-stacktrace-level", "zap-time-encoding"} {
		fs.String(name, "", "Deprecated: ignored.")
		_ = fs.MarkDeprecated(name, "it has no effect since the manager logs through component-base (--logging-format); it will be removed in the next release")
	}
}

// complete resolves the deprecated aliases once fs is parsed. --metrics-bind-address served plain
// HTTP: used alone, it keeps doing so (it sets --diagnostics-address and, unless given, turns on
// --insecure-diagnostics).
func (o *options) complete(fs *pflag.FlagSet) error {
	if fs.Changed("metrics-bind-address") {
		if fs.Changed("diagnostics-address") {
			return errors.New("--metrics-bind-address is the deprecated name of --diagnostics-address: set only --diagnostics-address")
		}
		o.manager.DiagnosticsAddress = o.metricsBindAddress
		if !fs.Changed("insecure-diagnostics") {
			o.manager.InsecureDiagnostics = true
		}
	}
	return o.completeZapFlags(fs)
}

// completeZapFlags maps the deprecated zap flags onto --v and --logging-format, unless those
// are given too.
func (o *options) completeZapFlags(fs *pflag.FlagSet) error {
	if !fs.Changed("v") {
		level := ""
		switch {
		case fs.Changed("zap-log-level"):
			switch o.zapLogLevel {
			case "debug":
				level = "1"
			case "info", "error", "panic": // component-base cannot hide info lines
				level = "0"
			default:
				if n, err := strconv.Atoi(o.zapLogLevel); err != nil || n < 0 {
					return fmt.Errorf("--zap-log-level %q: want debug, info, error, panic or an integer >= 0", o.zapLogLevel)
				}
				level = o.zapLogLevel
			}
		case o.zapDevel:
			level = "1"
		}
		if level != "" {
			if err := fs.Set("v", level); err != nil {
				return err
			}
		}
	}
	if fs.Changed("zap-encoder") && !fs.Changed("logging-format") {
		format := map[string]string{"json": logsv1.JSONLogFormat, "console": logsv1.DefaultLogFormat}[o.zapEncoder]
		if format == "" {
			return fmt.Errorf("--zap-encoder %q: want json or console", o.zapEncoder)
		}
		if err := fs.Set("logging-format", format); err != nil {
			return err
		}
	}
	return nil
}

// buildVersion is the version the Makefile sets with -ldflags in CAPI's version package (as
// CAPI's managers do), "unknown" where a plain go build left it empty.
func buildVersion() version.Info {
	v := version.Get()
	for _, f := range []*string{&v.GitVersion, &v.GitCommit, &v.GitTreeState, &v.BuildDate} {
		if *f == "" {
			*f = "unknown"
		}
	}
	return v
}

// versionString is what --version prints.
func versionString() string {
	v := buildVersion()
	return fmt.Sprintf("goofy-manager %s (git commit %s, tree %s, built %s, %s %s)",
		v.GitVersion, v.GitCommit, v.GitTreeState, v.BuildDate, v.GoVersion, v.Platform)
}

// storageQuota maps the flag's "0 or less: none" to ClusterOptions' "negative: none".
func storageQuota(flag int64) int64 {
	if flag <= 0 {
		return -1
	}
	return flag
}

// defaultStateDir is $XDG_STATE_HOME/goofy (else ~/.local/state/goofy); the Deployment sets
// --state-dir to its mounted volume.
func defaultStateDir() string {
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "goofy")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".local", "state", "goofy")
	}
	return ""
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func parsePortRange(s string) (int, int, error) {
	lo, hi, ok := strings.Cut(s, "-")
	if !ok {
		return 0, 0, fmt.Errorf("--listener-port-range %q: want MIN-MAX", s)
	}
	min, err1 := strconv.Atoi(strings.TrimSpace(lo))
	max, err2 := strconv.Atoi(strings.TrimSpace(hi))
	if err1 != nil || err2 != nil || min < 1 || max > 65535 || min > max {
		return 0, 0, fmt.Errorf("--listener-port-range %q: want MIN-MAX within 1-65535", s)
	}
	return min, max, nil
}

func main() {
	var o options
	fs := pflag.CommandLine
	fs.SetNormalizeFunc(cliflag.WordSepNormalizeFunc) // --leader_elect works as --leader-elect, as in CAPI
	o.addFlags(fs)
	fs.AddGoFlagSet(flag.CommandLine) // --kubeconfig, registered by controller-runtime
	pflag.Parse()
	if o.printVersion {
		fmt.Println(versionString())
		return
	}
	if err := o.complete(fs); err != nil {
		fmt.Fprintf(os.Stderr, "Invalid flags: %v\n", err)
		os.Exit(1)
	}
	if err := logsv1.ValidateAndApply(o.logs, nil); err != nil {
		fmt.Fprintf(os.Stderr, "Invalid logging flags: %v\n", err)
		os.Exit(1)
	}
	// klog's logger is the one component-base configured (text or JSON, --v, --vmodule).
	ctrl.SetLogger(klog.Background())
	log := ctrl.Log.WithName("setup")
	v := buildVersion()
	log.Info("Goofy manager", "version", v.GitVersion, "gitCommit", v.GitCommit, "gitTreeState", v.GitTreeState,
		"buildDate", v.BuildDate, "goVersion", v.GoVersion, "platform", v.Platform)
	fs.VisitAll(func(f *pflag.Flag) { log.V(1).Info("Flag", "name", f.Name, "value", f.Value.String()) })
	if err := run(ctrl.SetupSignalHandler(), o, ctrl.GetConfigOrDie()); err != nil {
		log.Error(err, "Manager failed")
		os.Exit(1)
	}
}

// run runs the manager against the management cluster restConfig points to, until ctx ends.
func run(ctx context.Context, o options, restConfig *rest.Config) error {
	log := ctrl.Log.WithName("setup")
	portMin, portMax, err := parsePortRange(o.listenerPortRange)
	if err != nil {
		return err
	}
	listenerOpts := []mux.Option{mux.WithPortRange(portMin, portMax), mux.WithBindAddress(o.listenerBindAddress)}
	if o.listenerAddresses != "" {
		if o.listenerBindAddress != "" {
			return errors.New("--listener-addresses and --listener-bind-address exclude each other")
		}
		addrs, err := mux.ParseListenerAddresses(o.listenerAddresses)
		if err != nil {
			return fmt.Errorf("--listener-addresses: %w", err)
		}
		listenerOpts = []mux.Option{mux.WithPortRange(portMin, portMax), mux.WithListenerAddresses(addrs...)}
	}
	tlsOpts, metricsOpts, err := flags.GetManagerOptions(o.manager)
	if err != nil {
		return fmt.Errorf("invalid TLS or diagnostics flags: %w", err)
	}

	restConfig = rest.CopyConfig(restConfig)
	restConfig.QPS, restConfig.Burst = o.kubeAPIQPS, o.kubeAPIBurst
	restConfig.UserAgent = "goofy-manager"

	// Build the workload stores' server-side-apply schema now (~19 MB allocated once), not in
	// the middle of the first reconciles, where it would add to the memory high-water mark.
	store.WarmUp()
	var storeOpts []store.ManagerOption
	if o.stateDir != "" {
		db, err := storage.Open(o.stateDir)
		if err != nil {
			return fmt.Errorf("--state-dir: %w", err)
		}
		defer db.Close() // after the manager and with it the listeners have stopped
		if err := ctrlmetrics.Registry.Register(storage.Collector{DB: db}); err != nil {
			return fmt.Errorf("registering the state file's metrics: %w", err)
		}
		storeOpts = append(storeOpts, store.WithStorage(db))
		log.Info("Workload cluster state is kept on disk", "path", db.Path())
	} else {
		log.Info("Workload cluster state is kept in memory only (--state-dir is empty)")
	}
	simulator := simulate.New(o.workloads)
	storeOpts = append(storeOpts, store.WithSimulator(simulator))
	wcl, err := mux.NewWorkloadClustersMux(store.NewManager(storeOpts...), o.listenerHost,
		append(listenerOpts, mux.WithLogger(ctrl.Log.WithName("mux")),
			mux.WithClusterOptions(store.ClusterOptions{StorageQuota: storageQuota(o.workloadStorageQuota)}),
			mux.WithTLSOptions(listenerTLS(tlsOpts)), mux.WithLimits(o.workloadLimits))...)
	if err != nil {
		return err
	}
	// Every listener and every connection to it is a file descriptor.
	if files, err := mux.RaiseOpenFileLimit(); err != nil {
		log.Error(err, "Could not read or raise the open file limit")
	} else if need := mux.FilesFor(wcl.Capacity()); files < need {
		log.Info("The open file limit is below what the listener addresses and port range can hold; raise it (ulimit -n, the container runtime's nofile limit) or expect accepts to fail",
			"limit", files, "listeners", wcl.Capacity(), "needed", need)
	} else {
		log.V(1).Info("Open file limit", "limit", files)
	}

	// The cache's requests go through controllers.CacheTransport, which spares its decoder what
	// its transforms drop (client-go shares the connections of equal configurations).
	httpClient, err := rest.HTTPClientFor(restConfig)
	if err != nil {
		return fmt.Errorf("creating the management cluster's HTTP client: %w", err)
	}
	cacheOpts := cache.Options{
		HTTPClient: &http.Client{Transport: controllers.CacheTransport(httpClient.Transport), Timeout: httpClient.Timeout},
		SyncPeriod: &o.syncPeriod,
		// Nothing here reads managedFields, and on CAPI's Machines and Clusters they are a
		// large share of each cached object.
		DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			// Only the CAs of CAPI clusters, with their data (see controllers.SecretCache).
			&corev1.Secret{}: controllers.SecretCache(),
			// Without the statuses the reconcilers do not read (see controllers.MachineCache).
			&clusterv1.Machine{}: controllers.MachineCache(),
			&clusterv1.Cluster{}: controllers.ClusterCache(),
		},
	}
	if o.namespace != "" {
		cacheOpts.DefaultNamespaces = map[string]cache.Config{o.namespace: {}}
	}
	var webhookServer webhook.Server
	if o.webhookPort != 0 {
		webhookServer = webhook.NewServer(webhook.Options{
			Port: o.webhookPort, CertDir: o.webhookCertDir, CertName: o.webhookCertName, KeyName: o.webhookKeyName, TLSOpts: tlsOpts,
		})
	}
	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{
		Scheme:                  scheme,
		LeaderElection:          o.leaderElect,
		LeaderElectionID:        "controller-leader-election-goofy",
		LeaderElectionNamespace: o.leaderElectNamespace,
		LeaseDuration:           &o.leaderElectLeaseDuration,
		RenewDeadline:           &o.leaderElectRenewDeadline,
		RetryPeriod:             &o.leaderElectRetryPeriod,
		// Losing leadership ends the process, which drops every listener with it.
		LeaderElectionReleaseOnCancel: true,
		Cache:                         cacheOpts,
		Metrics:                       diagnostics(metricsOpts, wcl),
		HealthProbeBindAddress:        o.healthAddr,
		PprofBindAddress:              o.profilerAddress,
		Controller:                    config.Controller{SkipNameValidation: &o.skipNameValidation},
		WebhookServer:                 webhookServer,
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return err
	}

	if webhookServer != nil {
		// A user-set endpoint port must be one this manager may hand to the cluster (docs/authorization.md).
		if err := (&webhooks.GoofyCluster{Client: mgr.GetClient(), Ports: wcl, Namespace: o.namespace, WatchFilterValue: o.watchFilter}).SetupWebhookWithManager(mgr); err != nil {
			return fmt.Errorf("setting up the GoofyCluster webhook: %w", err)
		}
		if err := mgr.AddReadyzCheck("webhook", webhookServer.StartedChecker()); err != nil {
			return err
		}
		if err := mgr.AddHealthzCheck("webhook", webhookServer.StartedChecker()); err != nil {
			return err
		}
	}

	restarter := &controllers.HotRestarter{Reader: mgr.GetAPIReader(), Mux: wcl, Namespace: o.namespace, WatchFilterValue: o.watchFilter}
	if err := mgr.Add(restarter); err != nil {
		return err
	}
	// Without leader election this replica leads from the start; mgr.Elected() would close only
	// after the caches sync, leaving a window in which /readyz passes before the restore began.
	elected := mgr.Elected()
	if !o.leaderElect {
		alwaysLeader := make(chan struct{})
		close(alwaysLeader)
		elected = alwaysLeader
	}
	if err := mgr.AddReadyzCheck("workload-listeners", restarter.ReadyzCheck(elected)); err != nil {
		return err
	}
	if err := mgr.Add(memtrim.New(o.memoryTrimInterval, ctrl.Log.WithName("memtrim"))); err != nil {
		return err
	}
	// Stop the listeners gracefully when the manager stops.
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), o.shutdownTimeout)
		defer cancel()
		return wcl.Shutdown(shutdownCtx)
	})); err != nil {
		return err
	}

	// Azure credentials come from the environment (AZURE_* variables, workload or managed
	// identity) when an Azure-backed GoofyCluster first needs them; without an identityRef, only
	// in the namespaces of --azure-default-credential-namespaces.
	azureClouds := &controllers.AzureClouds{DefaultCredentialNamespaces: o.azureDefaultCredentialNamespaces}
	if err := (&controllers.GoofyClusterReconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Mux: wcl, WatchFilterValue: o.watchFilter, Restarter: restarter, Azure: azureClouds,
		Simulator: simulator,
	}).SetupWithManager(ctx, mgr, controller.Options{MaxConcurrentReconciles: o.goofyClusterConcurrency}); err != nil {
		return fmt.Errorf("setting up the GoofyCluster controller: %w", err)
	}
	if err := (&controllers.GoofyMachineReconciler{
		Client: mgr.GetClient(), Mux: wcl, WatchFilterValue: o.watchFilter, Restarter: restarter, Azure: azureClouds,
	}).SetupWithManager(ctx, mgr, controller.Options{MaxConcurrentReconciles: o.goofyMachineConcurrency}); err != nil {
		return fmt.Errorf("setting up the GoofyMachine controller: %w", err)
	}
	if err := (&controllers.GoofyMachineTemplateReconciler{
		Client: mgr.GetClient(), WatchFilterValue: o.watchFilter,
	}).SetupWithManager(ctx, mgr, controller.Options{MaxConcurrentReconciles: o.templateConcurrency}); err != nil {
		return fmt.Errorf("setting up the GoofyMachineTemplate controller: %w", err)
	}
	if err := (&controllers.GoofyMachinePoolReconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), WatchFilterValue: o.watchFilter, Azure: azureClouds,
	}).SetupWithManager(ctx, mgr, controller.Options{MaxConcurrentReconciles: o.machinePoolConcurrency}); err != nil {
		return fmt.Errorf("setting up the GoofyMachinePool controller: %w", err)
	}

	log.Info("Starting manager", "listenerHost", o.listenerHost, "listenerAddresses", o.listenerAddresses, "portRange", o.listenerPortRange, "namespace", o.namespace, "watchFilter", o.watchFilter)
	return mgr.Start(ctx)
}

// listenerTLS is what CAPI's TLS options (from --tls-min-version, --tls-cipher-suites and
// --tls-curve-preferences, parsed by flags.GetManagerOptions) set, for the workload listeners.
func listenerTLS(opts []func(*tls.Config)) mux.TLSOptions {
	var cfg tls.Config
	for _, o := range opts {
		o(&cfg)
	}
	return mux.TLSOptions{MinVersion: cfg.MinVersion, CipherSuites: cfg.CipherSuites, CurvePreferences: cfg.CurvePreferences}
}

// diagnostics is the diagnostics endpoint: CAPI's metrics server options (HTTPS with
// authentication and authorization, pprof and /debug/flags/v; or plain HTTP with
// --insecure-diagnostics) plus /debug/listeners behind the same filter.
func diagnostics(opts *metricsserver.Options, m *mux.WorkloadClustersMux) metricsserver.Options {
	out := *opts
	out.ExtraHandlers = map[string]http.Handler{"/debug/listeners": listenersHandler(m)}
	for path, h := range opts.ExtraHandlers {
		out.ExtraHandlers[path] = h
	}
	return out
}

// listenersHandler shows the mux's listeners as JSON, for debugging.
func listenersHandler(m *mux.WorkloadClustersMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(m.Describe())
	})
}
