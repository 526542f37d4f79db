// Command plane-controllers runs, for the end-to-end tests' management plane, the two
// kube-controller-manager controllers that deletion depends on: the garbage collector (owner
// references: CAPI relies on it to delete what a deleted Cluster or Machine owned) and the namespace
// controller (a deleted namespace's content). They are upstream's own controllers
// (k8s.io/kubernetes/pkg/controller/garbagecollector and .../namespace), started with
// kube-controller-manager's defaults for them; only the other ~130 controllers, and the ~320
// packages they add to the build, are left out. hack/envtest.sh builds it beside kube-apiserver.
//
// It serves /healthz over plain HTTP on --health-address once both controllers are started.
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	cacheddiscovery "k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/controller-manager/pkg/informerfactory"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/controller/garbagecollector"
	namespacecontroller "k8s.io/kubernetes/pkg/controller/namespace"
)

// kube-controller-manager's defaults for these controllers.
const (
	minResyncPeriod     = 12 * time.Hour // --min-resync-period
	gcWorkers           = 20             // --concurrent-gc-syncs
	gcSyncPeriod        = 30 * time.Second
	namespaceWorkers    = 10 // --concurrent-namespace-syncs
	namespaceSyncPeriod = 5 * time.Minute
	restMapperReset     = 30 * time.Second
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the API server")
	healthAddress := flag.String("health-address", "127.0.0.1:0", "address of the plain-HTTP /healthz endpoint")
	klog.InitFlags(nil)
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *kubeconfig, *healthAddress); err != nil {
		klog.ErrorS(err, "plane-controllers failed")
		os.Exit(1)
	}
}

func run(ctx context.Context, kubeconfig, healthAddress string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	// kube-controller-manager's client defaults (--kube-api-qps, --kube-api-burst).
	cfg.QPS, cfg.Burst = 20, 30
	client, err := kubernetes.NewForConfig(named(cfg, "plane-controllers"))
	if err != nil {
		return err
	}
	if err := waitForAPIServer(ctx, client); err != nil {
		return err
	}

	// As kube-controller-manager: one discovery-backed REST mapper, reset every 30 s so that new
	// custom resources (CAPI's, installed after the start) are found.
	discoveryClient, err := discovery.NewDiscoveryClientForConfig(named(cfg, "controller-discovery"))
	if err != nil {
		return err
	}
	restMapper := restmapper.NewDeferredDiscoveryRESTMapper(cacheddiscovery.NewMemCacheClient(discoveryClient))
	go wait.UntilWithContext(ctx, func(context.Context) { restMapper.Reset() }, restMapperReset)

	metadataClient, err := metadata.NewForConfig(named(cfg, "plane-controllers"))
	if err != nil {
		return err
	}
	typed := informers.NewSharedInformerFactory(client, resyncPeriod())
	untyped := metadatainformer.NewSharedInformerFactory(metadataClient, resyncPeriod())
	factory := informerfactory.NewInformerFactory(typed, untyped)
	informersStarted := make(chan struct{})

	gc, gcDiscovery, err := newGarbageCollector(ctx, cfg, restMapper, factory, informersStarted)
	if err != nil {
		return err
	}
	namespaces, err := newNamespaceController(ctx, cfg, typed)
	if err != nil {
		return err
	}

	go gc.Run(ctx, gcWorkers, gcSyncPeriod)
	go gc.Sync(ctx, gcDiscovery, gcSyncPeriod)
	go namespaces.Run(ctx, namespaceWorkers)
	factory.Start(ctx.Done())
	close(informersStarted)

	return serveHealth(ctx, healthAddress)
}

// newGarbageCollector: the garbage collector with its own clients, as kube-controller-manager
// gives it (twice the QPS: each deletion costs two requests), ignoring what it ignores (events).
func newGarbageCollector(ctx context.Context, cfg *rest.Config, mapper meta.ResettableRESTMapper,
	factory informerfactory.InformerFactory, informersStarted <-chan struct{},
) (*garbagecollector.GarbageCollector, discovery.ServerResourcesInterface, error) {
	gcConfig := named(cfg, "generic-garbage-collector")
	client, err := kubernetes.NewForConfig(gcConfig)
	if err != nil {
		return nil, nil, err
	}
	gcConfig.QPS *= 2
	metadataClient, err := metadata.NewForConfig(gcConfig)
	if err != nil {
		return nil, nil, err
	}
	gc, err := garbagecollector.NewGarbageCollector(ctx, client, metadataClient, mapper,
		garbagecollector.DefaultIgnoredResources(), factory, informersStarted)
	if err != nil {
		return nil, nil, fmt.Errorf("garbage collector: %w", err)
	}
	// Sync's discovery client must not be the mapper's, or every sync would reset the mapper's cache.
	gcDiscovery, err := discovery.NewDiscoveryClientForConfig(gcConfig)
	if err != nil {
		return nil, nil, err
	}
	return gc, gcDiscovery, nil
}

// newNamespaceController: the namespace controller with kube-controller-manager's client limits
// for it (20 times the QPS, 100 times the burst: it lists and deletes every kind in a namespace).
func newNamespaceController(ctx context.Context, cfg *rest.Config, typed informers.SharedInformerFactory) (*namespacecontroller.NamespaceController, error) {
	nsConfig := named(cfg, "namespace-controller")
	nsConfig.QPS *= 20
	nsConfig.Burst *= 100
	client, err := kubernetes.NewForConfig(nsConfig)
	if err != nil {
		return nil, err
	}
	metadataClient, err := metadata.NewForConfig(nsConfig)
	if err != nil {
		return nil, err
	}
	return namespacecontroller.NewNamespaceController(ctx, client, metadataClient,
		client.Discovery().ServerPreferredNamespacedResources, typed.Core().V1().Namespaces(),
		namespaceSyncPeriod, v1.FinalizerKubernetes), nil
}

// named copies cfg with a user agent naming the controller, as kube-controller-manager's client
// builder does, so the API server's logs and audit tell the controllers apart.
func named(cfg *rest.Config, name string) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.UserAgent = "plane-controllers/" + name
	return c
}

// resyncPeriod is kube-controller-manager's: the minimum resync period times a random factor in
// [1, 2), so informers do not resync in lock-step.
func resyncPeriod() time.Duration {
	return time.Duration(float64(minResyncPeriod) * (1 + rand.Float64()))
}

// waitForAPIServer waits, as kube-controller-manager does at its start, for /healthz to answer ok.
func waitForAPIServer(ctx context.Context, client kubernetes.Interface) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		var status int
		last = client.Discovery().RESTClient().Get().AbsPath("/healthz").Do(ctx).StatusCode(&status).Error()
		return last == nil && status == http.StatusOK, nil
	})
	if err != nil {
		return fmt.Errorf("the API server did not become healthy: %w (last: %v)", err, last)
	}
	return nil
}

// serveHealth answers /healthz with ok until ctx ends.
func serveHealth(ctx context.Context, address string) error {
	listener, err := net.Listen("tcp", address)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	server := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = server.Close()
	}()
	klog.InfoS("plane-controllers started: garbage collector and namespace controller", "health", listener.Addr().String())
	if err := server.Serve(listener); err != nil && err != http.ErrServerClosed {
		return err
	}
	return nil
}
