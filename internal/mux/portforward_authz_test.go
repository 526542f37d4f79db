package mux

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"testing"
	"time"

	gwebsocket "github.com/gorilla/websocket"
	. "github.com/onsi/gomega"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	//lint:ignore SA1019 client-go's port-forward dialers speak it
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	clientportforward "k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
	streamhttp "k8s.io/streaming/pkg/httpstream"
	"sigs.k8s.io/cluster-api/controlplane/kubeadm/pkg/proxy"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/portforward"
)

// This file's listener ports: 12800-12809.

// portForwardRole grants user verbs on pods/portforward in kube-system, and nothing else.
func portForwardRole(t *testing.T, l *WorkloadClusterListener, user string, verbs ...string) {
	t.Helper()
	c, _ := l.GetClient()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "pf-" + user, Namespace: metav1.NamespaceSystem},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods/portforward"}, Verbs: verbs}}}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "pf-" + user, Namespace: metav1.NamespaceSystem},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}}}
	if err := c.Create(ctx, role); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, binding); err != nil {
		t.Fatal(err)
	}
}

// userConfig is a rest.Config for a certificate of the cluster CA.
func userConfig(t *testing.T, l *WorkloadClusterListener, cc clusterCerts, cn string, groups ...string) *rest.Config {
	t.Helper()
	cfg := &rest.Config{Host: l.Address(), TLSClientConfig: rest.TLSClientConfig{CAData: pemCert(cc.ca)}, QPS: -1, Timeout: 20 * time.Second}
	cfg.CertData, cfg.KeyData = clientCert(t, cc, cn, groups, time.Hour)
	return cfg
}

// dialPortForward upgrades a port-forward to pod with client-go's dialer, as kubectl does:
// SPDY tunneled through a WebSocket (a GET, kubectl's default since 1.31) when websocket, else
// SPDY (a POST). The dial is bounded: the dialers take no context.
func dialPortForward(t *testing.T, cfg *rest.Config, pod string, websocket bool) (httpstream.Connection, error) {
	t.Helper()
	u := kubernetes.NewForConfigOrDie(cfg).CoreV1().RESTClient().Post().Namespace(metav1.NamespaceSystem).Resource("pods").Name(pod).SubResource("portforward").URL()
	var d httpstream.Dialer
	if websocket {
		var err error
		if d, err = clientportforward.NewSPDYOverWebsocketDialer(u, cfg); err != nil {
			t.Fatal(err)
		}
	} else {
		rt, upgrader, err := spdy.RoundTripperFor(cfg)
		if err != nil {
			t.Fatal(err)
		}
		d = spdy.NewDialer(upgrader, &http.Client{Transport: rt}, http.MethodPost, u)
	}
	type result struct {
		conn httpstream.Connection
		err  error
	}
	done := make(chan result, 1)
	go func() {
		conn, _, err := d.Dial(portforward.ProtocolV1)
		done <- result{conn, err}
	}()
	select {
	case r := <-done:
		if r.conn != nil {
			t.Cleanup(func() { _ = r.conn.Close() })
		}
		return r.conn, r.err
	case <-time.After(30 * time.Second):
		t.Fatalf("port-forward to %s: no answer in 30s", pod)
		return nil, nil
	}
}

// forwardToEtcd proves conn forwards: an etcd MemberList through a stream to port 2379.
func forwardToEtcd(t *testing.T, conn httpstream.Connection, cc clusterCerts, id string) error {
	t.Helper()
	_, data := forwardPair(t, conn, EtcdClientPort, id)
	defer func() { _ = data.Reset() }()
	etcdClient := keyPair(t, cc.etcdCA, cc.etcdCAKey, "kube-etcd-healthcheck-client")
	tc, err := dialTLS(t, streamConn{proxy.NewConn(conn, data), data}, "etcd-0", &etcdClient, "h2")
	if err != nil {
		return err
	}
	_, err = memberList(grpcOver(t, tc))
	return err
}

// rawWebSocketUpgrade sends the WebSocket upgrade GET itself and returns the HTTP status and,
// when refused, the Status of the body.
func rawWebSocketUpgrade(t *testing.T, l *WorkloadClusterListener, cc clusterCerts, cn, pod string) (int, metav1.Status) {
	t.Helper()
	d := gwebsocket.Dialer{
		TLSClientConfig:  &tls.Config{RootCAs: pool(cc.ca), Certificates: []tls.Certificate{keyPair(t, cc.ca, cc.caKey, cn)}},
		Subprotocols:     []string{portforward.ProtocolTunnelV1},
		HandshakeTimeout: 10 * time.Second,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ws, resp, err := d.DialContext(ctx, "wss://"+l.HostPort()+"/api/v1/namespaces/kube-system/pods/"+pod+"/portforward?ports=2379", nil)
	if err == nil {
		_ = ws.Close()
		return resp.StatusCode, metav1.Status{}
	}
	if resp == nil {
		t.Fatalf("upgrade of %s's port-forward: %v", pod, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var st metav1.Status
	if jerr := json.Unmarshal(body, &st); jerr != nil {
		t.Fatalf("%d %s: %v", resp.StatusCode, body, jerr)
	}
	return resp.StatusCode, st
}

// TestWebSocketPortForwardNeedsCreateSince135: kube-apiserver 1.35+ (feature gate
// AuthorizePodWebsocketUpgradeCreatePermission, beta, on by default) authorizes the WebSocket
// upgrade of pods/portforward, a GET, a second time as create: get alone is 403
// `pods "<name>" is forbidden`, get and create forward. Clusters of older versions forward with get
// alone; system:masters is exempt; SPDY's POST is create at any version.
func TestWebSocketPortForwardNeedsCreateSince135(t *testing.T) {
	g := NewWithT(t)
	m := newTestMux(t, WithPortRange(12800, 12809))
	cc := newClusterCerts(t)
	const wcl = "ns/pf-authz"
	l, err := m.InitWorkloadClusterListener(wcl)
	g.Expect(err).NotTo(HaveOccurred())
	runningPod(t, l, "etcd-0")
	g.Expect(m.AddEtcdMember(wcl, "etcd-0", cc.etcdCA, cc.etcdCAKey)).To(Succeed())
	g.Expect(m.AddAPIServer(wcl, "kube-apiserver-0", cc.ca, cc.caKey)).To(Succeed())
	portForwardRole(t, l, "viewer", "get")
	portForwardRole(t, l, "forwarder", "get", "create")
	viewer := userConfig(t, l, cc, "viewer")
	forwarder := userConfig(t, l, cc, "forwarder")
	const forbidden = `pods "etcd-0" is forbidden`

	l.Store().SetKubernetesVersion("v1.36.3")

	// get alone: refused, by the raw upgrade and by client-go's dialer alike.
	code, st := rawWebSocketUpgrade(t, l, cc, "viewer", "etcd-0")
	g.Expect(code).To(Equal(http.StatusForbidden))
	g.Expect(st.Reason).To(Equal(metav1.StatusReasonForbidden))
	g.Expect(st.Message).To(ContainSubstring(forbidden))
	_, err = dialPortForward(t, viewer, "etcd-0", true)
	// client-go's WebSocket transport reports a refused upgrade as k8s.io/streaming's
	// UpgradeFailureError, without Unwrap: its Cause is the server's Status.
	var uf *streamhttp.UpgradeFailureError
	g.Expect(errors.As(err, &uf)).To(BeTrue(), "%v", err)
	var se *apierrors.StatusError
	g.Expect(errors.As(uf.Cause, &se)).To(BeTrue(), "%v", err)
	g.Expect(se.ErrStatus.Code).To(BeEquivalentTo(http.StatusForbidden))
	g.Expect(se.ErrStatus.Message).To(ContainSubstring(forbidden))
	// SPDY's POST is create: refused too.
	_, err = dialPortForward(t, viewer, "etcd-0", false)
	g.Expect(err).To(MatchError(ContainSubstring(forbidden + `: User "viewer" cannot create resource "pods/portforward"`)))

	// get and create: the upgrade succeeds and forwards.
	code, _ = rawWebSocketUpgrade(t, l, cc, "forwarder", "etcd-0")
	g.Expect(code).To(Equal(http.StatusSwitchingProtocols))
	conn, err := dialPortForward(t, forwarder, "etcd-0", true)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(forwardToEtcd(t, conn, cc, "0")).To(Succeed())

	// system:masters is exempt (CAPI's <cluster>-kubeconfig).
	conn, err = dialPortForward(t, capiRESTConfig(t, "pf-authz", l, cc), "etcd-0", true)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(forwardToEtcd(t, conn, cc, "0")).To(Succeed())

	// Before 1.35, get alone forwards; SPDY still needs create.
	l.Store().SetKubernetesVersion("v1.34.2")
	code, _ = rawWebSocketUpgrade(t, l, cc, "viewer", "etcd-0")
	g.Expect(code).To(Equal(http.StatusSwitchingProtocols))
	conn, err = dialPortForward(t, viewer, "etcd-0", true)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(forwardToEtcd(t, conn, cc, "0")).To(Succeed())
	_, err = dialPortForward(t, viewer, "etcd-0", false)
	g.Expect(err).To(MatchError(ContainSubstring(forbidden + `: User "viewer" cannot create resource "pods/portforward"`)))
}
