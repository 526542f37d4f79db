package benchapi

import (
	"context"
	"crypto"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/cluster-api/util/certs"
	"sigs.k8s.io/cluster-api/util/kubeconfig"
	"sigs.k8s.io/cluster-api/util/secret"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/mux"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/simulate"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/storage"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// Goofy is the Goofy side: the manager's WorkloadClustersMux with one workload cluster, built as
// main.go builds it (durable state when StateDir is set, the shipped store options), in this
// process but without the controllers: the benchmark measures the listener, not reconciles.
type Goofy struct {
	mux *mux.WorkloadClustersMux
	db  *storage.DB
	// Kubeconfig reaches the cluster as CAPI's <cluster>-kubeconfig does (system:masters).
	Kubeconfig *clientcmdapi.Config
}

// StartGoofy serves one workload cluster on 127.0.0.1:port holding seed, with its state in
// stateDir ("" keeps it in memory only).
func StartGoofy(port int, stateDir string, seed []client.Object, log logr.Logger) (*Goofy, error) {
	store.WarmUp() // as main.go: the SSA schema is built before the first request
	// The components every cluster runs (garbage collector, namespace controller, node leases, pod
	// termination), as main.go attaches them; workloads off, as CAPD in-memory has none: the seed's
	// Deployments and DaemonSets create no pods, so both sides list the same seeded objects.
	opts := []store.ManagerOption{store.WithSimulator(simulate.New(simulate.Options{}))}
	g := &Goofy{}
	if stateDir != "" {
		db, err := storage.Open(stateDir)
		if err != nil {
			return nil, err
		}
		g.db = db
		opts = append(opts, store.WithStorage(db))
	}
	m, err := mux.NewWorkloadClustersMux(store.NewManager(opts...), "127.0.0.1", mux.WithPortRange(port, port), mux.WithLogger(log))
	if err != nil {
		return nil, errors.Join(err, g.Close())
	}
	g.mux = m
	name := mux.ClusterKey("bench", "bench-api")
	l, err := m.InitWorkloadClusterListenerOnPort(name, port)
	if err != nil {
		return nil, errors.Join(err, g.Close())
	}
	// Seeded the way the GoofyMachine reconciler writes Nodes and static pods: in process.
	c, err := l.GetClient()
	if err == nil {
		err = createAll(context.Background(), c, seed)
	}
	if err != nil {
		return nil, errors.Join(err, g.Close())
	}
	caCert, caKey, err := NewClusterCA()
	if err == nil {
		err = m.AddAPIServer(name, APIServerPod(), caCert, caKey)
	}
	if err == nil {
		g.Kubeconfig, err = kubeconfig.New("bench-api", l.Address(), caCert, caKey)
	}
	if err != nil {
		return nil, errors.Join(err, g.Close())
	}
	return g, nil
}

// createAll creates objs; Nodes and Pods get their status in a second write, since a create
// through the store drops it as kube-apiserver does.
func createAll(ctx context.Context, c client.Client, objs []client.Object) error {
	for _, o := range objs {
		withStatus := o.DeepCopyObject().(client.Object)
		if err := c.Create(ctx, o); err != nil {
			if _, ns := o.(*corev1.Namespace); ns && client.IgnoreAlreadyExists(err) == nil {
				continue // the store starts with the default namespaces
			}
			return fmt.Errorf("creating %T %s: %w", o, o.GetName(), err)
		}
		switch o.(type) {
		case *corev1.Node, *corev1.Pod:
			withStatus.SetResourceVersion(o.GetResourceVersion())
			withStatus.SetUID(o.GetUID())
			if err := c.Status().Update(ctx, withStatus); err != nil {
				return fmt.Errorf("status of %T %s: %w", o, o.GetName(), err)
			}
		}
	}
	return nil
}

// Close stops the listener and closes the state database.
func (g *Goofy) Close() error {
	var errs []error
	if g.mux != nil {
		errs = append(errs, g.mux.Shutdown(context.Background()))
	}
	if g.db != nil {
		errs = append(errs, g.db.Close())
	}
	return errors.Join(errs...)
}

// NewClusterCA generates a cluster CA as CAPI does for <cluster>-ca (RSA 2048).
func NewClusterCA() (*x509.Certificate, crypto.Signer, error) {
	ca := &secret.Certificate{Purpose: secret.ClusterCA}
	if err := ca.Generate(); err != nil {
		return nil, nil, err
	}
	cert, err := certs.DecodeCertPEM(ca.KeyPair.Cert)
	if err != nil {
		return nil, nil, err
	}
	key, err := certs.DecodePrivateKeyPEM(ca.KeyPair.Key)
	return cert, key, err
}

// WriteKubeconfig writes cfg to path atomically: the driver takes the file's appearance as the
// sign that the server is ready.
func WriteKubeconfig(path string, cfg *clientcmdapi.Config) error {
	if err := clientcmd.WriteToFile(*cfg, path+".tmp"); err != nil {
		return err
	}
	return os.Rename(path+".tmp", path)
}
