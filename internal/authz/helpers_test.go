package authz_test

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/mux"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/testenv"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/workload"
)

// Listener ports of this package's tests: 12600-12699, inside internal/mux's test range
// (11000-14999) but apart from the ranges its own tests use.
const firstPort, lastPort = 12600, 12699

// cluster is one served workload cluster with kubeadm's RBAC, and its CA to issue client
// certificates for any user.
type cluster struct {
	t     *testing.T
	l     *mux.WorkloadClusterListener
	ca    *x509.Certificate
	caKey crypto.Signer
	admin client.Client // system:masters, in process
}

var clusterSeq atomic.Int32

func newCluster(t *testing.T) *cluster {
	t.Helper()
	m, err := mux.NewWorkloadClustersMux(store.NewManager(), "127.0.0.1", mux.WithPortRange(firstPort, lastPort))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Shutdown(context.Background()) })
	name := fmt.Sprintf("ns/c%d", clusterSeq.Add(1))
	l, err := m.InitWorkloadClusterListener(name)
	if err != nil {
		t.Fatal(err)
	}
	ca, caKey := newCA(t)
	if err := m.AddAPIServer(name, "kube-apiserver-cp0", ca, caKey); err != nil {
		t.Fatal(err)
	}
	// Deleting the cluster ends the authorizer's watches.
	t.Cleanup(func() { _ = m.DeleteWorkloadClusterListener(name) })
	c := &cluster{t: t, l: l, ca: ca, caKey: caKey, admin: l.Store().Client()}
	for _, obj := range workload.DefaultRBAC() {
		if err := c.admin.Create(context.Background(), obj); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

func newCA(t testing.TB) (*x509.Certificate, crypto.Signer) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "kubernetes"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return ca, key
}

var serial atomic.Int64

// clientCert issues a client certificate of the cluster's CA: CN user, O groups.
func (c *cluster) clientCert(name string, groups ...string) (certPEM, keyPEM []byte) {
	c.t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		c.t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano() + serial.Add(1)),
		Subject:      pkix.Name{CommonName: name, Organization: groups},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.ca, key.Public(), c.caKey)
	if err != nil {
		c.t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		c.t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

func (c *cluster) caPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.ca.Raw})
}

// config is a client configuration authenticating as name in groups.
func (c *cluster) config(name string, groups ...string) *rest.Config {
	certPEM, keyPEM := c.clientCert(name, groups...)
	return &rest.Config{Host: c.l.Address(), TLSClientConfig: rest.TLSClientConfig{CAData: c.caPEM(), CertData: certPEM, KeyData: keyPEM}}
}

func (c *cluster) clientset(name string, groups ...string) *kubernetes.Clientset {
	return kubernetes.NewForConfigOrDie(c.config(name, groups...))
}

// kubectl runs the envtest build's kubectl as one identity.
type kubectl struct {
	t          *testing.T
	bin, home  string
	kubeconfig string
}

func (c *cluster) kubectl(name string, groups ...string) *kubectl {
	c.t.Helper()
	bin, ok := testenv.Binary("kubectl")
	if !ok {
		c.t.Skip("kubectl binary not found (run hack/envtest.sh or set KUBEBUILDER_ASSETS)")
	}
	home := c.t.TempDir()
	certPEM, keyPEM := c.clientCert(name, groups...)
	files := map[string][]byte{"ca.crt": c.caPEM(), "client.crt": certPEM, "client.key": keyPEM}
	for f, data := range files {
		if err := os.WriteFile(filepath.Join(home, f), data, 0o600); err != nil {
			c.t.Fatal(err)
		}
	}
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: goofy
  cluster: {server: %q, certificate-authority: %q}
contexts:
- name: goofy
  context: {cluster: goofy, user: u, namespace: default}
current-context: goofy
users:
- name: u
  user: {client-certificate: %q, client-key: %q}
`, c.l.Address(), filepath.Join(home, "ca.crt"), filepath.Join(home, "client.crt"), filepath.Join(home, "client.key"))
	kc := filepath.Join(home, "kubeconfig")
	if err := os.WriteFile(kc, []byte(cfg), 0o600); err != nil {
		c.t.Fatal(err)
	}
	return &kubectl{t: c.t, bin: bin, home: home, kubeconfig: kc}
}

// run runs kubectl and returns its exit status (0 or the exit code), stdout and stderr.
func (k *kubectl) run(args ...string) (int, string, string) {
	k.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, k.bin, append([]string{"--kubeconfig", k.kubeconfig, "--cache-dir", filepath.Join(k.home, "cache")}, args...)...)
	cmd.Env = append(os.Environ(), "HOME="+k.home, "KUBECONFIG="+k.kubeconfig)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			k.t.Fatalf("kubectl %s: %v", strings.Join(args, " "), err)
		}
		code = ee.ExitCode()
	}
	return code, stdout.String(), stderr.String()
}

// ok runs kubectl expecting success and returns stdout.
func (k *kubectl) ok(args ...string) string {
	k.t.Helper()
	code, out, errOut := k.run(args...)
	if code != 0 {
		k.t.Fatalf("kubectl %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// fails runs kubectl expecting a failure and returns stderr.
func (k *kubectl) fails(args ...string) string {
	k.t.Helper()
	code, out, errOut := k.run(args...)
	if code == 0 {
		k.t.Fatalf("kubectl %s succeeded:\n%s", strings.Join(args, " "), out)
	}
	return errOut
}
