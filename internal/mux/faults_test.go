package mux

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	kcpetcd "sigs.k8s.io/cluster-api/controlplane/kubeadm/pkg/etcd"
	"sigs.k8s.io/cluster-api/controlplane/kubeadm/pkg/proxy"

	infrav1 "github.com/goofy-capi/cluster-api-provider-goofy/api/v1alpha1"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/etcd"
)

// faultCluster is a served workload cluster with three control-plane members.
type faultCluster struct {
	m   *WorkloadClustersMux
	l   *WorkloadClusterListener
	cc  clusterCerts
	key string
	cfg *rest.Config
}

func newFaultCluster(t *testing.T, m *WorkloadClustersMux, key string) *faultCluster {
	t.Helper()
	g := NewWithT(t)
	cc := newClusterCerts(t)
	l, err := m.InitWorkloadClusterListener(key)
	g.Expect(err).NotTo(HaveOccurred())
	for _, n := range []string{"cp-0", "cp-1", "cp-2"} {
		runningPod(t, l, "etcd-"+n)
		runningPod(t, l, "kube-apiserver-"+n)
		g.Expect(m.AddEtcdMember(key, "etcd-"+n, cc.etcdCA, cc.etcdCAKey)).To(Succeed())
		g.Expect(m.AddAPIServer(key, "kube-apiserver-"+n, cc.ca, cc.caKey)).To(Succeed())
	}
	cfg := capiRESTConfig(t, strings.ReplaceAll(key, "/", "-"), l, cc)
	return &faultCluster{m: m, l: l, cc: cc, key: key, cfg: cfg}
}

func (c *faultCluster) clientset(t *testing.T) *kubernetes.Clientset {
	cs, err := kubernetes.NewForConfig(c.cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// etcdClient is KCP's etcd client for a member, through the port-forward as KCP reaches it.
func (c *faultCluster) etcdClient(t *testing.T, node string) (*kcpetcd.Client, error) {
	certPEM, keyPEM := clientCertFrom(t, c.cc.etcdCA, c.cc.etcdCAKey, "kube-etcd-healthcheck-client")
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := kcpetcd.NewClient(ctx, kcpetcd.ClientConfiguration{
		Endpoint:    "etcd-" + node,
		Proxy:       proxy.Proxy{Kind: "pods", Namespace: metav1.NamespaceSystem, KubeConfig: c.cfg, Port: EtcdClientPort},
		TLSConfig:   &tls.Config{RootCAs: pool(c.cc.etcdCA), Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		DialTimeout: 5 * time.Second,
		CallTimeout: 5 * time.Second,
	})
	if err == nil {
		t.Cleanup(func() { _ = cl.Close() })
	}
	return cl, err
}

func (c *faultCluster) set(t *testing.T, sim *infrav1.ClusterSimulation) {
	t.Helper()
	if err := c.l.SetFaults(context.Background(), ClusterFaults(sim, time.Now()).Faults); err != nil {
		t.Fatal(err)
	}
}

// rawGet GETs path with the admin identity, without client-go's retries.
func (c *faultCluster) rawGet(t *testing.T, path string) (*http.Response, metav1.Status) {
	t.Helper()
	rt, err := rest.TransportFor(c.cfg)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Transport: rt, Timeout: 10 * time.Second}).Get(c.l.Address() + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var st metav1.Status
	_ = json.Unmarshal(body, &st)
	return resp, st
}

func TestFaultUnreachable(t *testing.T) {
	g := NewWithT(t)
	m := newTestMux(t)
	c := newFaultCluster(t, m, "ns/unreachable")
	other := newFaultCluster(t, m, "ns/other")
	ctx := context.Background()
	cs := c.clientset(t)
	_, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kept"}}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	w, err := cs.CoreV1().ConfigMaps("default").Watch(ctx, metav1.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	defer w.Stop()

	c.set(t, &infrav1.ClusterSimulation{Unreachable: true})
	// New connections are refused, the open watch is closed.
	_, err = net.DialTimeout("tcp", c.l.HostPort(), time.Second)
	g.Expect(err).To(HaveOccurred())
	g.Eventually(func() bool {
		for {
			select {
			case _, ok := <-w.ResultChan():
				if !ok {
					return true
				}
			default:
				return false
			}
		}
	}, 5*time.Second, 50*time.Millisecond).Should(BeTrue(), "the open watch was not closed")
	// A restart of the machines' API servers does not bring it back, nor does another cluster suffer.
	g.Expect(m.AddAPIServer(c.key, "kube-apiserver-cp-0", c.cc.ca, c.cc.caKey)).To(Succeed())
	_, err = net.DialTimeout("tcp", c.l.HostPort(), time.Second)
	g.Expect(err).To(HaveOccurred())
	_, err = other.clientset(t).CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())

	// Removing the fault serves the same cluster, with its state, on the same port.
	c.set(t, nil)
	cm, err := cs.CoreV1().ConfigMaps("default").Get(ctx, "kept", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cm.Name).To(Equal("kept"))
}

func TestFaultAPIServerErrors(t *testing.T) {
	g := NewWithT(t)
	m := newTestMux(t)
	c := newFaultCluster(t, m, "ns/errors")
	other := newFaultCluster(t, m, "ns/calm")
	ctx := context.Background()
	c.set(t, &infrav1.ClusterSimulation{APIServer: &infrav1.APIServerSimulation{Errors: []infrav1.APIErrorFault{
		{Verbs: []string{"list"}, Resources: []string{"nodes"}, Code: 503, Ratio: "1"},
		{Verbs: []string{"get"}, Resources: []string{"configmaps"}, Code: 504, Ratio: "1.0"},
		{Resources: []string{"secrets"}, Code: 429, Ratio: "1"},
		{Verbs: []string{"*"}, Resources: []string{"pods/status"}, Code: 500, Ratio: "1"},
		{Resources: []string{"services"}, Code: 500, Ratio: "0"},
	}}})
	cs := c.clientset(t)

	_, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	g.Expect(apierrors.IsServiceUnavailable(err)).To(BeTrue(), "list nodes: %v", err)
	g.Expect(err.Error()).To(Equal("the server is currently unable to handle the request"))
	_, err = cs.CoreV1().ConfigMaps("default").Get(ctx, "x", metav1.GetOptions{})
	g.Expect(apierrors.IsTimeout(err)).To(BeTrue(), "get configmap: %v", err)
	_, err = cs.CoreV1().Pods("kube-system").UpdateStatus(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "etcd-cp-0", Namespace: "kube-system"}}, metav1.UpdateOptions{})
	g.Expect(apierrors.IsInternalError(err)).To(BeTrue(), "update pod status: %v", err)
	resp, st := c.rawGet(t, "/api/v1/namespaces/default/secrets")
	g.Expect(resp.StatusCode).To(Equal(http.StatusTooManyRequests))
	g.Expect(resp.Header.Get("Retry-After")).To(Equal("1"))
	g.Expect(st.Reason).To(Equal(metav1.StatusReasonTooManyRequests))
	g.Expect(st.Details.RetryAfterSeconds).To(Equal(int32(1)))

	// What no rule matches, ratio 0, and non-resource paths answer.
	_, err = cs.CoreV1().Nodes().Get(ctx, "none", metav1.GetOptions{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "get node: %v", err)
	_, err = cs.CoreV1().Services("default").List(ctx, metav1.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	resp, _ = c.rawGet(t, "/")
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	// Another cluster is not affected.
	_, err = other.clientset(t).CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())

	// A share: about half fail.
	c.set(t, &infrav1.ClusterSimulation{APIServer: &infrav1.APIServerSimulation{Errors: []infrav1.APIErrorFault{{Code: 500, Ratio: "0.5"}}}})
	failed := 0
	for range 200 {
		if resp, _ := c.rawGet(t, "/api/v1/namespaces/default"); resp.StatusCode == http.StatusInternalServerError {
			failed++
		}
	}
	g.Expect(failed).To(BeNumerically("~", 100, 40))

	c.set(t, nil)
	_, err = cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
}

func TestFaultAPIServerLatency(t *testing.T) {
	g := NewWithT(t)
	m := newTestMux(t)
	c := newFaultCluster(t, m, "ns/slow")
	ctx := context.Background()
	cs := c.clientset(t)
	timed := func() time.Duration {
		start := time.Now()
		_, err := cs.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		return time.Since(start)
	}
	timed() // the connection is set up
	g.Expect(c.l.faults.Load()).To(BeNil())
	c.set(t, &infrav1.ClusterSimulation{APIServer: &infrav1.APIServerSimulation{Latency: &infrav1.LatencyFault{
		Base: metav1.Duration{Duration: 200 * time.Millisecond}, Jitter: "0.5"}}})
	for range 3 {
		g.Expect(timed()).To(And(BeNumerically(">=", 200*time.Millisecond), BeNumerically("<", 600*time.Millisecond)))
	}
	// A watch gets the latency before each event.
	w, err := cs.CoreV1().ConfigMaps("default").Watch(ctx, metav1.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	defer w.Stop()
	start := time.Now()
	_, err = cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "e"}}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	<-w.ResultChan()
	g.Expect(time.Since(start)).To(BeNumerically(">=", 400*time.Millisecond), "create (200ms) + event (200ms)")

	// One delay per event, whatever the framing: a protobuf frame is written in two parts.
	c.set(t, &infrav1.ClusterSimulation{APIServer: &infrav1.APIServerSimulation{Latency: &infrav1.LatencyFault{
		Base: metav1.Duration{Duration: 200 * time.Millisecond}}}})
	pcfg := rest.CopyConfig(c.cfg)
	pcfg.ContentType = "application/vnd.kubernetes.protobuf"
	pcs, err := kubernetes.NewForConfig(pcfg)
	g.Expect(err).NotTo(HaveOccurred())
	pw, err := pcs.CoreV1().ConfigMaps("default").Watch(ctx, metav1.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	defer pw.Stop()
	_, err = cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "p"}}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	created := time.Now()
	for ev := range pw.ResultChan() { // after the existing objects' ADDED events
		if cm, ok := ev.Object.(*corev1.ConfigMap); ok && cm.Name == "p" {
			break
		}
	}
	g.Expect(time.Since(created)).To(And(BeNumerically(">=", 150*time.Millisecond), BeNumerically("<", 380*time.Millisecond)),
		"one 200ms delay per event")

	// An until in the past means no fault.
	past := metav1.NewTime(time.Now().Add(-time.Second))
	c.set(t, &infrav1.ClusterSimulation{APIServer: &infrav1.APIServerSimulation{Latency: &infrav1.LatencyFault{
		Base: metav1.Duration{Duration: 200 * time.Millisecond}, Until: &past}}})
	g.Expect(c.l.faults.Load()).To(BeNil(), "an ended fault is still set")
}

func TestFaultEtcd(t *testing.T) {
	g := NewWithT(t)
	m := newTestMux(t)
	c := newFaultCluster(t, m, "ns/etcdfaults")
	ctx := context.Background()
	cs := c.clientset(t)

	// NOSPACE: listed by the Alarm API for every member, in Status errors, and writes are refused.
	c.set(t, &infrav1.ClusterSimulation{Etcd: &infrav1.EtcdSimulation{Alarm: infrav1.EtcdAlarmNoSpace}})
	e0, err := c.etcdClient(t, "cp-0")
	g.Expect(err).NotTo(HaveOccurred())
	alarms, err := e0.Alarms(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(alarms).To(HaveLen(3))
	for _, a := range alarms {
		g.Expect(a.Type).To(Equal(kcpetcd.AlarmNoSpace))
	}
	st, err := e0.EtcdClient.Status(ctx, "etcd-cp-0")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Errors).To(ContainElement(ContainSubstring("NOSPACE")))
	_, err = cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "full"}}, metav1.CreateOptions{})
	g.Expect(apierrors.IsInternalError(err)).To(BeTrue(), "create: %v", err)
	g.Expect(err.Error()).To(ContainSubstring("etcdserver: mvcc: database space exceeded"))
	_, err = cs.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred(), "reads still work")

	// CORRUPT and latency.
	c.set(t, &infrav1.ClusterSimulation{Etcd: &infrav1.EtcdSimulation{Alarm: infrav1.EtcdAlarmCorrupt,
		Latency: &infrav1.LatencyFault{Base: metav1.Duration{Duration: 300 * time.Millisecond}}}})
	start := time.Now()
	alarms, err = e0.Alarms(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(time.Since(start)).To(BeNumerically(">=", 300*time.Millisecond))
	g.Expect(alarms).To(HaveLen(3))
	g.Expect(alarms[0].Type).To(Equal(kcpetcd.AlarmCorrupt))
	_, err = cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "ok"}}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred(), "CORRUPT refuses no write")

	// Leaderless: Status names no leader, calls that need one fail as etcd's; removing it elects
	// a leader with a higher term.
	c.set(t, nil)
	termBefore := c.l.etcd.RaftTerm()
	c.set(t, &infrav1.ClusterSimulation{Etcd: &infrav1.EtcdSimulation{Leaderless: true}})
	st, err = e0.EtcdClient.Status(ctx, "etcd-cp-0")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Leader).To(BeZero())
	g.Expect(st.Errors).To(ContainElement("etcdserver: no leader"))
	_, err = e0.Members(ctx)
	g.Expect(err).To(MatchError(ContainSubstring(rpctypes.ErrNoLeader.Error())))
	_, err = e0.Alarms(ctx)
	g.Expect(err).To(MatchError(ContainSubstring(rpctypes.ErrNoLeader.Error())))
	g.Expect(e0.MoveLeader(ctx, 1)).To(MatchError(ContainSubstring(rpctypes.ErrNoLeader.Error())))
	_, err = cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "nl"}}, metav1.CreateOptions{})
	g.Expect(err).To(MatchError(ContainSubstring("etcdserver: no leader")))
	// A member added meanwhile is not elected either.
	runningPod(t, c.l, "etcd-cp-3")
	g.Expect(m.AddEtcdMember(c.key, "etcd-cp-3", c.cc.etcdCA, c.cc.etcdCAKey)).To(Succeed())
	g.Expect(c.l.etcd.Leader()).To(BeEmpty())
	c.set(t, nil)
	g.Expect(c.l.etcd.Leader()).NotTo(BeEmpty())
	g.Expect(c.l.etcd.RaftTerm()).To(BeNumerically(">", termBefore))
	e1, err := c.etcdClient(t, "cp-1")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(e1.LeaderID).NotTo(BeZero())
	_, err = e1.Members(ctx)
	g.Expect(err).NotTo(HaveOccurred())

	// One unhealthy member: its calls fail, the others answer.
	g.Expect(m.SetEtcdMemberUnhealthy(c.key, "etcd-cp-2", true)).To(Succeed())
	_, err = c.etcdClient(t, "cp-2")
	g.Expect(err).To(MatchError(ContainSubstring("member cp-2 is unhealthy")))
	_, err = e1.EtcdClient.Status(ctx, "etcd-cp-1")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(m.SetEtcdMemberUnhealthy(c.key, "etcd-cp-2", false)).To(Succeed())
	_, err = c.etcdClient(t, "cp-2")
	g.Expect(err).NotTo(HaveOccurred())
}

// TestFaultLeaderlessSurvivesRestart: the leaderless state is persisted with the etcd state, so a
// new Server (a manager restart) elects nobody until the fault is removed.
func TestFaultLeaderlessSurvivesRestart(t *testing.T) {
	g := NewWithT(t)
	m := newTestMux(t)
	c := newFaultCluster(t, m, "ns/restart")
	c.set(t, &infrav1.ClusterSimulation{Etcd: &infrav1.EtcdSimulation{Leaderless: true}})
	srv, err := etcd.NewServer(context.Background(), c.l.cluster.Client(), c.key)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(srv.Leader()).To(BeEmpty())
	_, err = srv.AddMember(context.Background(), "etcd-cp-0")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(srv.Leader()).To(BeEmpty())
	g.Expect(srv.SetLeaderless(context.Background(), false)).To(Succeed())
	g.Expect(srv.Leader()).NotTo(BeEmpty())
}

// TestFaultUnreachableFromHotRestart: a cluster whose spec says unreachable does not serve after a
// restart, even once its machines re-add their API servers, until the fault is removed.
func TestFaultUnreachableFromHotRestart(t *testing.T) {
	g := NewWithT(t)
	m := newTestMux(t, WithPortRange(12400, 12409))
	cc := newClusterCerts(t)
	gc := goofyCluster("ns", "down", 12405)
	gc.Spec.Simulation = &infrav1.ClusterSimulation{Unreachable: true}
	g.Expect(m.HotRestart(&infrav1.GoofyClusterList{Items: []infrav1.GoofyCluster{gc}})).To(Succeed())
	g.Expect(m.AddAPIServer("ns/down", "kube-apiserver-x", cc.ca, cc.caKey)).To(Succeed())
	l, _ := m.Listener("ns/down")
	_, err := net.DialTimeout("tcp", l.HostPort(), time.Second)
	g.Expect(err).To(HaveOccurred(), "an unreachable cluster serves after the restart")
	g.Expect(l.SetFaults(context.Background(), nil)).To(Succeed())
	conn, err := net.DialTimeout("tcp", l.HostPort(), time.Second)
	g.Expect(err).NotTo(HaveOccurred())
	_ = conn.Close()
}
