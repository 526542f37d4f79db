package controllers

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"testing"
	"time"

	"github.com/blang/semver/v4"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	kubeadmtypes "sigs.k8s.io/cluster-api/bootstrap/kubeadm/pkg/types"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	kcp "sigs.k8s.io/cluster-api/controlplane/kubeadm/pkg"
	kcpetcd "sigs.k8s.io/cluster-api/controlplane/kubeadm/pkg/etcd"
	"sigs.k8s.io/cluster-api/controlplane/kubeadm/pkg/proxy"
	"sigs.k8s.io/cluster-api/util/cache"
	"sigs.k8s.io/cluster-api/util/certs"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/secret"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/goofy-capi/cluster-api-provider-goofy/api/v1alpha1"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/mux"
)

// listenerClusterCache gives KCP's workload-cluster code what CAPI's ClusterCache would: a REST
// config and a client for the workload cluster, here straight from the mux's listener. The other
// methods are not used by that code (the embedded nil interface would panic if they were).
type listenerClusterCache struct {
	clustercache.ClusterCache
	mux *mux.WorkloadClustersMux
}

func (c *listenerClusterCache) GetRESTConfig(_ context.Context, cluster client.ObjectKey) (*rest.Config, error) {
	l, ok := c.mux.Listener(mux.ClusterKey(cluster.Namespace, cluster.Name))
	if !ok {
		return nil, clustercache.ErrClusterNotConnected
	}
	return l.RESTConfig()
}

func (c *listenerClusterCache) GetClient(ctx context.Context, cluster client.ObjectKey) (client.Client, error) {
	rc, err := c.GetRESTConfig(ctx, cluster)
	if err != nil {
		return nil, err
	}
	return client.New(rc, client.Options{Scheme: testScheme})
}

// etcdClient opens KCP's etcd client on etcd-<node>, through the listener's port-forward, with a
// client certificate signed by the <cluster>-etcd CA as KCP makes it.
func etcdClient(t testing.TB, f *fixture, l *mux.WorkloadClusterListener, node string) *kcpetcd.Client {
	t.Helper()
	ctx := context.Background()
	s, err := secret.GetFromNamespacedName(ctx, k8sClient, client.ObjectKeyFromObject(f.cluster), secret.EtcdCA)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := certs.DecodeCertPEM(s.Data[secret.TLSCrtDataName])
	if err != nil {
		t.Fatal(err)
	}
	caKey, err := certs.DecodePrivateKeyPEM(s.Data[secret.TLSKeyDataName])
	if err != nil {
		t.Fatal(err)
	}
	key, err := certs.NewPrivateKey()
	if err != nil {
		t.Fatal(err)
	}
	cert, err := (&certs.Config{CommonName: "cluster-api.x-k8s.io", Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}).NewSignedCert(key, ca, caKey)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	rc, err := l.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	dialCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	c, err := kcpetcd.NewClient(dialCtx, kcpetcd.ClientConfiguration{
		Endpoint: "etcd-" + node,
		Proxy:    proxy.Proxy{Kind: "pods", Namespace: metav1.NamespaceSystem, KubeConfig: rc, Port: mux.EtcdClientPort},
		TLSConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12,
			Certificates: []tls.Certificate{{Certificate: [][]byte{cert.Raw}, PrivateKey: key, Leaf: cert}}},
		DialTimeout: 10 * time.Second,
		CallTimeout: 10 * time.Second,
	})
	if err != nil {
		t.Fatalf("etcd client for %s: %v", node, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// etcdLeaderName asks etcd-<via> which member leads.
func etcdLeaderName(t testing.TB, f *fixture, l *mux.WorkloadClusterListener, via string) string {
	t.Helper()
	c := etcdClient(t, f, l, via)
	members, err := c.Members(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range members {
		if m.ID == c.LeaderID {
			return m.Name
		}
	}
	t.Fatalf("leader %x is not a member", c.LeaderID)
	return ""
}

// TestKCPReportsHealthyControlPlane runs KCP's own workload-cluster code against a simulated
// three-machine control plane: it must find kubeadm-config, report every control-plane component
// and etcd member healthy, and its upgrade edits of kubeadm-config, kube-proxy and CoreDNS must be
// accepted. A missing static pod must turn its condition false (the check can fail).
func TestKCPReportsHealthyControlPlane(t *testing.T) {
	requireEnv(t)
	g := NewWithT(t)
	ctx := context.Background()
	h := newHarness(t)
	f := newFixture(t, newNamespace(t), "kcp", nil)
	h.provisionCluster(t, f)
	for _, name := range []string{"kcp-cp-0", "kcp-cp-1", "kcp-cp-2"} {
		_, gm := newMachine(t, f, name, machineOpts{controlPlane: true})
		h.reconcileUntilReady(t, gm)
	}
	get(t, f.cluster)

	mgmt := &kcp.Management{
		Client:              k8sClient,
		SecretCachingClient: k8sClient,
		ClusterCache:        &listenerClusterCache{mux: h.mux},
		ClientCertCache:     cache.New[kcp.ClientCertEntry](ctx, time.Hour),
		EtcdDialTimeout:     10 * time.Second,
		EtcdCallTimeout:     10 * time.Second,
	}
	kcpObj := &controlplanev1.KubeadmControlPlane{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "kcp"},
		Spec: controlplanev1.KubeadmControlPlaneSpec{
			Version: kubernetesVersion,
			MachineTemplate: controlplanev1.KubeadmControlPlaneMachineTemplate{Spec: controlplanev1.KubeadmControlPlaneMachineTemplateSpec{
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "GoofyMachineTemplate", Name: "kcp"},
			}},
		},
	}
	newControlPlane := func() (*kcp.ControlPlane, kcp.WorkloadCluster) {
		t.Helper()
		machines, err := mgmt.GetControlPlaneMachinesForCluster(ctx, f.cluster)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(machines).To(HaveLen(3))
		for _, m := range machines {
			// CAPI's Machine controller links the Node found by providerID.
			m.Status.NodeRef = clusterv1.MachineNodeReference{Name: m.Name}
		}
		cp, err := kcp.NewControlPlane(ctx, mgmt, k8sClient, f.cluster, kcpObj, machines)
		g.Expect(err).NotTo(HaveOccurred())
		w, err := cp.GetWorkloadCluster(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		return cp, w
	}

	cp, w := newControlPlane()
	initialized, err := w.HasKubeadmConfig(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(initialized).To(BeTrue())

	w.UpdateStaticPodConditions(ctx, cp)
	w.UpdateEtcdConditions(ctx, cp)
	healthy := []string{
		controlplanev1.KubeadmControlPlaneMachineAPIServerPodHealthyCondition,
		controlplanev1.KubeadmControlPlaneMachineControllerManagerPodHealthyCondition,
		controlplanev1.KubeadmControlPlaneMachineSchedulerPodHealthyCondition,
		controlplanev1.KubeadmControlPlaneMachineEtcdPodHealthyCondition,
		controlplanev1.KubeadmControlPlaneMachineEtcdMemberHealthyCondition,
	}
	for _, m := range cp.Machines {
		for _, c := range healthy {
			g.Expect(conditions.IsTrue(m, c)).To(BeTrue(), "%s on %s: %+v", c, m.Name, conditions.Get(m, c))
		}
	}
	for _, c := range []string{controlplanev1.KubeadmControlPlaneControlPlaneComponentsHealthyCondition, controlplanev1.KubeadmControlPlaneEtcdClusterHealthyCondition} {
		g.Expect(conditions.IsTrue(cp.KCP, c)).To(BeTrue(), "%s: %+v", c, conditions.Get(cp.KCP, c))
	}
	g.Expect(cp.EtcdMembersAndMachinesAreMatching).To(BeTrue())
	g.Expect(cp.EtcdMembers).To(HaveLen(3))
	g.Expect(cp.EtcdLeader).NotTo(BeNil())
	g.Expect(cp.EtcdLeader.Name).To(Equal("kcp-cp-0"))
	g.Expect(cp.Nodes).To(HaveLen(3))

	// KCP's rollout edits: kubeadm-config, kube-proxy's image and a CoreDNS upgrade (with its
	// Corefile migration) are accepted.
	g.Expect(w.UpdateClusterConfiguration(ctx, semver.MustParse("1.36.3"),
		w.UpdateEtcdLocalInKubeadmConfigMap(bootstrapv1.LocalEtcd{ExtraArgs: []bootstrapv1.Arg{{Name: "quota-backend-bytes", Value: ptr.To("8589934592")}}}))).To(Succeed())
	kcpObj.Spec.Version = "v1.36.4"
	kcpObj.Spec.KubeadmConfigSpec.ClusterConfiguration.DNS = bootstrapv1.DNS{ImageTag: "v1.14.3"}
	g.Expect(w.UpdateKubeProxyImageInfo(ctx, kcpObj)).To(Succeed())
	g.Expect(w.UpdateCoreDNS(ctx, kcpObj)).To(Succeed())
	cs := workloadClient(t, mustListener(t, h, f))
	ds, err := cs.AppsV1().DaemonSets(metav1.NamespaceSystem).Get(ctx, "kube-proxy", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ds.Spec.Template.Spec.Containers[0].Image).To(Equal("registry.k8s.io/kube-proxy:v1.36.4"))
	dns, err := cs.AppsV1().Deployments(metav1.NamespaceSystem).Get(ctx, "coredns", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(dns.Spec.Template.Spec.Containers[0].Image).To(Equal("registry.k8s.io/coredns/coredns:v1.14.3"))
	cm, err := cs.CoreV1().ConfigMaps(metav1.NamespaceSystem).Get(ctx, "kubeadm-config", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	cc, _, err := kubeadmtypes.UnmarshalClusterConfiguration(cm.Data["ClusterConfiguration"])
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cc.Etcd.Local.ExtraArgs).To(ContainElement(HaveField("Name", "quota-backend-bytes")))
	g.Expect(cc.DNS.ImageTag).To(Equal("v1.14.3"))

	// Without its scheduler pod (force-deleted: a graceful delete keeps it Terminating for a
	// moment), a machine is reported unhealthy.
	g.Expect(cs.CoreV1().Pods(metav1.NamespaceSystem).Delete(ctx, "kube-scheduler-kcp-cp-2", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})).To(Succeed())
	cp, w = newControlPlane()
	w.UpdateStaticPodConditions(ctx, cp)
	g.Expect(conditions.IsFalse(cp.Machines["kcp-cp-2"], controlplanev1.KubeadmControlPlaneMachineSchedulerPodHealthyCondition)).To(BeTrue())
	g.Expect(conditions.IsTrue(cp.KCP, controlplanev1.KubeadmControlPlaneControlPlaneComponentsHealthyCondition)).To(BeFalse())
}

func mustListener(t testing.TB, h *harness, f *fixture) *mux.WorkloadClusterListener {
	t.Helper()
	l, ok := h.mux.Listener(mux.ClusterKey(f.ns, f.cluster.Name))
	if !ok {
		t.Fatalf("no listener for %s/%s", f.ns, f.cluster.Name)
	}
	return l
}
