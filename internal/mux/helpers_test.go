package mux

import (
	"context"
	"crypto"
	"crypto/x509"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	"sigs.k8s.io/cluster-api/util/certs"
	"sigs.k8s.io/cluster-api/util/kubeconfig"
	"sigs.k8s.io/cluster-api/util/secret"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// clusterCerts are the CAs CAPI generates for a cluster (<cluster>-ca, <cluster>-etcd), made with
// CAPI's own util/secret package as KCP does.
type clusterCerts struct {
	ca, etcdCA       *x509.Certificate
	caKey, etcdCAKey crypto.Signer
}

func newClusterCerts(t testing.TB) clusterCerts {
	t.Helper()
	return decodeClusterCerts(t, newClusterCAs(t))
}

// newClusterCAs generates the two CAs as CAPI stores them in the cluster's Secrets (PEM).
func newClusterCAs(t testing.TB) secret.Certificates {
	t.Helper()
	all := secret.NewCertificatesForInitialControlPlane(&bootstrapv1.ClusterConfiguration{})
	cas := secret.Certificates{all.GetByPurpose(secret.ClusterCA), all.GetByPurpose(secret.EtcdCA)}
	if err := cas.Generate(); err != nil {
		t.Fatal(err)
	}
	return cas
}

// decodeClusterCerts parses the CAs' PEM as the GoofyMachine reconciler does at each provisioning.
func decodeClusterCerts(t testing.TB, cas secret.Certificates) clusterCerts {
	t.Helper()
	decode := func(p secret.Purpose) (*x509.Certificate, crypto.Signer) {
		kp := cas.GetByPurpose(p).KeyPair
		c, err := certs.DecodeCertPEM(kp.Cert)
		if err != nil {
			t.Fatal(err)
		}
		k, err := certs.DecodePrivateKeyPEM(kp.Key)
		if err != nil {
			t.Fatal(err)
		}
		return c, k
	}
	var cc clusterCerts
	cc.ca, cc.caKey = decode(secret.ClusterCA)
	cc.etcdCA, cc.etcdCAKey = decode(secret.EtcdCA)
	return cc
}

// capiRESTConfig builds the rest.Config exactly as CAPI builds <cluster>-kubeconfig.
func capiRESTConfig(t testing.TB, name string, l *WorkloadClusterListener, cc clusterCerts) *rest.Config {
	t.Helper()
	cfg, err := kubeconfig.New(name, l.Address(), cc.ca, cc.caKey)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := clientcmd.NewDefaultClientConfig(*cfg, nil).ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	return rc
}

// Listener ports of this package: tests 11000-14999, benchmarks 3900-9999. They stay apart from
// the controllers tests (15000-15999) and the e2e suite (20000-32767), which run in parallel, and
// below the kernel's ephemeral range, where an outgoing connection can take a port between two tests.

func newTestMux(t testing.TB, opts ...Option) *WorkloadClustersMux {
	t.Helper()
	m, err := NewWorkloadClustersMux(store.NewManager(), "127.0.0.1", append([]Option{WithPortRange(11000, 11999)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Shutdown(context.Background()) })
	return m
}

// runningPod creates a Running static pod in kube-system of the workload cluster.
func runningPod(t testing.TB, l *WorkloadClusterListener, name string) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceSystem},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
	}
	c, _ := l.GetClient()
	if err := c.Create(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	pod.Status.Phase = corev1.PodRunning
	if err := c.Status().Update(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
}
