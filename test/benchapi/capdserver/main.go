//go:build ignore

// Command capdserver is the CAPD side of `make bench-api`: one workload cluster of CAPI's
// in-memory backend (sigs.k8s.io/cluster-api/test/infrastructure/inmemory: its
// WorkloadClustersMux and in-memory runtime, as CAPD's DevCluster and DevMachine controllers
// drive them), seeded from -seed, serving TLS on -port; it writes -kubeconfig-out once it serves and
// runs until SIGTERM.
//
// It is not built with this repository's module: build-capdserver.sh builds it in a module of its
// own under the user cache, against sigs.k8s.io/cluster-api/test, which needs neither Docker nor
// kind at run time but would add their libraries to Goofy's go.mod. The ignore constraint keeps it
// out of this module, `go mod tidy` included (tidy honours every build tag but ignore); the script
// names the file to build.
package main

import (
	"context"
	"crypto/rsa"
	"encoding/json"
	"errors"
	_ "expvar" // Go's memstats on /debug/vars
	"flag"
	"fmt"
	"net"
	"net/http"
	_ "net/http/pprof" // CPU profiles for the driver's -cpuprofile
	"os"
	"os/signal"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"sigs.k8s.io/cluster-api/util/certs"
	"sigs.k8s.io/cluster-api/util/kubeconfig"
	"sigs.k8s.io/cluster-api/util/secret"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inmemoryruntime "sigs.k8s.io/cluster-api/test/infrastructure/inmemory/pkg/runtime"
	inmemoryserver "sigs.k8s.io/cluster-api/test/infrastructure/inmemory/pkg/server"
)

// The names CAPD's DevCluster controller would give: one resource group and one listener per
// workload cluster.
const (
	clusterName   = "bench-api"
	resourceGroup = "bench/bench-api"
	listenerName  = "bench/bench-api"
)

func main() {
	port := flag.Int("port", 9111, "listener port (CAPD binds all interfaces; the kubeconfig says 127.0.0.1)")
	debugPort := flag.Int("debug-port", 9112, "port of the mux's debug server, which CAPD always opens")
	stats := flag.String("stats", "127.0.0.1:9113", "address of the expvar and pprof endpoint")
	seed := flag.String("seed", "", "objects to start with (benchapi.WriteSeed)")
	apiServerPod := flag.String("apiserver-pod", "kube-apiserver-bench-cp-0", "name the API server is registered with")
	kubeconfigPath := flag.String("kubeconfig-out", "capd.kubeconfig", "kubeconfig written once the cluster serves")
	flag.Parse()
	if err := run(int32(*port), int32(*debugPort), *stats, *seed, *apiServerPod, *kubeconfigPath); err != nil {
		fmt.Fprintln(os.Stderr, "capdserver:", err)
		os.Exit(1)
	}
}

func run(port, debugPort int32, stats, seedPath, apiServerPod, kubeconfigPath string) error {
	ctrl.SetLogger(klog.Background()) // as CAPD's main.go: its mux logs through controller-runtime's logger
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer cancel()

	// The kinds the seed holds; CAPD's manager registers these and a few more.
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme, rbacv1.AddToScheme} {
		if err := add(scheme); err != nil {
			return err
		}
	}
	objs, err := readSeed(seedPath, scheme)
	if err != nil {
		return err
	}
	if err := serveStats(stats); err != nil {
		return err
	}

	// What CAPD's main.go and its DevCluster/DevMachine in-memory backends do for one cluster.
	manager := inmemoryruntime.NewManager(scheme)
	if err := manager.Start(ctx); err != nil {
		return err
	}
	mux, err := inmemoryserver.NewWorkloadClustersMux(manager, "127.0.0.1",
		inmemoryserver.CustomPorts{MinPort: port, MaxPort: port, DebugPort: debugPort})
	if err != nil {
		return err
	}
	defer func() { _ = mux.Shutdown(context.Background()) }()
	manager.AddResourceGroup(resourceGroup)
	c := manager.GetResourceGroup(resourceGroup).GetClient()
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil {
			return fmt.Errorf("creating %T %s: %w", o, o.GetName(), err)
		}
	}
	l, err := mux.InitWorkloadClusterListener(listenerName, port)
	if err != nil {
		return err
	}
	if err := mux.RegisterResourceGroup(listenerName, resourceGroup); err != nil {
		return err
	}
	// The cluster CA as CAPI generates <cluster>-ca; CAPD's mux wants an RSA key.
	ca := &secret.Certificate{Purpose: secret.ClusterCA}
	if err := ca.Generate(); err != nil {
		return err
	}
	caCert, err := certs.DecodeCertPEM(ca.KeyPair.Cert)
	if err != nil {
		return err
	}
	caKey, err := certs.DecodePrivateKeyPEM(ca.KeyPair.Key)
	if err != nil {
		return err
	}
	rsaKey, ok := caKey.(*rsa.PrivateKey)
	if !ok {
		return errors.New("the cluster CA key is not RSA")
	}
	if err := mux.AddAPIServer(listenerName, apiServerPod, caCert, rsaKey); err != nil {
		return err
	}
	cfg, err := kubeconfig.New(clusterName, l.Address(), caCert, caKey)
	if err != nil {
		return err
	}
	// Written last and renamed into place: its appearance tells the driver the cluster serves.
	if err := clientcmd.WriteToFile(*cfg, kubeconfigPath+".tmp"); err != nil {
		return err
	}
	if err := os.Rename(kubeconfigPath+".tmp", kubeconfigPath); err != nil {
		return err
	}
	<-ctx.Done()
	return nil
}

// readSeed decodes the driver's JSON v1 List into typed objects of scheme.
func readSeed(path string, scheme *runtime.Scheme) ([]client.Object, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var list struct {
		Items []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(b, &list); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	decoder := serializer.NewCodecFactory(scheme).UniversalDeserializer()
	objs := make([]client.Object, 0, len(list.Items))
	for i, raw := range list.Items {
		o, _, err := decoder.Decode(raw, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("%s: item %d: %w", path, i, err)
		}
		objs = append(objs, o.(client.Object))
	}
	return objs, nil
}

// serveStats serves what the driver samples around each measured window, as the Goofy side does:
// Go's memstats (expvar) and pprof.
func serveStats(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err == nil {
		go func() { _ = (&http.Server{ReadHeaderTimeout: 10 * time.Second}).Serve(ln) }()
	}
	return err
}
