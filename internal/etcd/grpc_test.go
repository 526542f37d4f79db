package etcd_test

import (
	"context"
	"net"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/api/v3/version"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/etcd"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/etcd/etcdtest"
)

const cluster = "wl-1"

// env is one fake etcd served over TLS, as KCP reaches it: one client per
// member, the endpoint being the pod name (and so the TLS server name).
type env struct {
	t      *testing.T
	server *etcd.Server
	pki    *etcdtest.PKI
	addr   string
}

func newEnv(t *testing.T, pods ...string) *env {
	t.Helper()
	return newEnvOn(t, fake.NewClientBuilder().Build(), pods...)
}

// newEnvOn builds the Server over the workload store c and adds pods.
func newEnvOn(t *testing.T, c client.Client, pods ...string) *env {
	t.Helper()
	g := NewWithT(t)
	s, err := etcd.NewServer(t.Context(), c, cluster)
	g.Expect(err).NotTo(HaveOccurred())
	for _, p := range pods {
		_, err := s.AddMember(t.Context(), p)
		g.Expect(err).NotTo(HaveOccurred())
	}
	pki := etcdtest.NewPKI(t, "etcd-a", "etcd-b", "etcd-c", "etcd-d", "etcd-zzz")
	return &env{t: t, server: s, pki: pki, addr: etcdtest.Serve(t, s, pki)}
}

// client returns a clientv3 client that talks to the member in pod.
func (e *env) client(pod string) *clientv3.Client {
	e.t.Helper()
	return e.clientTB(e.t, pod)
}

func (e *env) clientTB(tb testing.TB, pod string) *clientv3.Client {
	tb.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{pod},
		DialTimeout: 5 * time.Second,
		DialOptions: []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "tcp", e.addr)
		})},
		TLS:    e.pki.ClientTLS(),
		Logger: zap.NewNop(),
	})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = cli.Close() })
	return cli
}

func id(name string) uint64 { return etcd.MemberIDFor(cluster, name) }

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestMemberListAndHeadersOverTLS(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t, "etcd-a", "etcd-b", "etcd-c")

	for _, name := range []string{"a", "b", "c"} {
		resp, err := e.client("etcd-" + name).MemberList(ctx(t))
		g.Expect(err).NotTo(HaveOccurred())
		// The header names the member that answered, not some fixed one.
		g.Expect(resp.Header.ClusterId).To(Equal(etcd.ClusterIDFor(cluster)))
		g.Expect(resp.Header.MemberId).To(Equal(id(name)))
		g.Expect(resp.Header.RaftTerm).To(BeEquivalentTo(1))
		g.Expect(resp.Header.Revision).To(BeNumerically(">", 0))
		g.Expect(resp.Members).To(HaveLen(3))
		names := map[string]uint64{}
		for _, m := range resp.Members {
			names[m.Name] = m.ID
			g.Expect(m.ClientURLs).To(ConsistOf("https://" + m.Name + ":2379"))
			g.Expect(m.PeerURLs).To(ConsistOf("https://" + m.Name + ":2380"))
		}
		g.Expect(names).To(Equal(map[string]uint64{"a": id("a"), "b": id("b"), "c": id("c")}))
	}
}

func TestStatusReportsLeaderAndVersion(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t, "etcd-a", "etcd-b")

	for _, pod := range []string{"etcd-a", "etcd-b"} {
		st, err := e.client(pod).Status(ctx(t), pod)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(st.Leader).To(Equal(id("a")), "the first member added leads")
		g.Expect(st.Version).To(Equal(version.Version))
		g.Expect(st.Version).To(HavePrefix("3.6."))
		g.Expect(st.DbSize).To(BeNumerically(">", 0))
		g.Expect(st.RaftTerm).To(BeEquivalentTo(1))
		g.Expect(st.RaftIndex).To(BeNumerically(">", 0))
		g.Expect(st.Errors).To(BeEmpty())
	}
}

func TestMoveLeader(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t, "etcd-a", "etcd-b", "etcd-c")
	a, b := e.client("etcd-a"), e.client("etcd-b")

	_, err := b.MoveLeader(ctx(t), id("c"))
	g.Expect(err).To(MatchError(rpctypes.ErrNotLeader), "only the leader answers MoveLeader")

	_, err = a.MoveLeader(ctx(t), 12345)
	g.Expect(err).To(MatchError(rpctypes.ErrBadLeaderTransferee), "the transferee must be a member")

	resp, err := a.MoveLeader(ctx(t), id("b"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(resp.Header.MemberId).To(Equal(id("a")))
	g.Expect(e.server.Leader()).To(Equal("etcd-b"))

	st, err := e.client("etcd-c").Status(ctx(t), "etcd-c")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Leader).To(Equal(id("b")))
	g.Expect(st.RaftTerm).To(BeEquivalentTo(2), "a leader change starts a new term")

	_, err = a.MoveLeader(ctx(t), id("c"))
	g.Expect(err).To(MatchError(rpctypes.ErrNotLeader), "a is no longer the leader")
}

func TestAlarmsListAndDisarm(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t, "etcd-a", "etcd-b")
	a := e.client("etcd-a")

	// clientv3 has no call to raise an alarm; use the raw Maintenance client.
	raw := pb.NewMaintenanceClient(a.ActiveConnection())
	_, err := raw.Alarm(ctx(t), &pb.AlarmRequest{Action: pb.AlarmRequest_ACTIVATE, MemberID: id("b"), Alarm: pb.AlarmType_NOSPACE})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = raw.Alarm(ctx(t), &pb.AlarmRequest{Action: pb.AlarmRequest_ACTIVATE, MemberID: 999, Alarm: pb.AlarmType_CORRUPT})
	g.Expect(err).To(MatchError(ContainSubstring("member not found")))

	list, err := a.AlarmList(ctx(t))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(list.Alarms).To(HaveLen(1))
	g.Expect(list.Alarms[0].MemberID).To(Equal(id("b")))
	g.Expect(list.Alarms[0].Alarm).To(Equal(pb.AlarmType_NOSPACE))

	st, err := a.Status(ctx(t), "etcd-a")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Errors).To(ConsistOf(ContainSubstring("NOSPACE")))

	// MemberID 0 and NONE: clientv3 lists the alarms and disarms each one.
	_, err = a.AlarmDisarm(ctx(t), &clientv3.AlarmMember{})
	g.Expect(err).NotTo(HaveOccurred())
	list, err = a.AlarmList(ctx(t))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(list.Alarms).To(BeEmpty())
}

func TestMemberAddPromoteRemove(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t, "etcd-a", "etcd-b")
	a := e.client("etcd-a")

	// kubeadm join with learner mode: announce, start, promote.
	added, err := a.MemberAddAsLearner(ctx(t), []string{"https://d:2380"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(added.Member.ID).To(Equal(id("d")))
	g.Expect(added.Member.Name).To(BeEmpty(), "not started yet")
	g.Expect(added.Member.IsLearner).To(BeTrue())
	g.Expect(added.Members).To(HaveLen(3))

	_, err = a.MemberAddAsLearner(ctx(t), []string{"https://e:2380"})
	g.Expect(err).To(MatchError(rpctypes.ErrTooManyLearners))
	_, err = a.MemberAdd(ctx(t), []string{"https://d:2380"})
	g.Expect(err).To(MatchError(rpctypes.ErrPeerURLExist))
	// clientv3 validates URLs itself; the server must too.
	_, err = pb.NewClusterClient(a.ActiveConnection()).MemberAdd(ctx(t), &pb.MemberAddRequest{PeerURLs: []string{"not a url"}})
	g.Expect(err).To(MatchError(rpctypes.ErrGRPCMemberBadURLs))

	_, err = a.MemberPromote(ctx(t), id("d"))
	g.Expect(err).To(MatchError(rpctypes.ErrMemberLearnerNotReady), "a learner that never started is not in sync")

	started, err := e.server.AddMember(ctx(t), "etcd-d")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(started).To(Equal(id("d")), "starting the announced member keeps its ID")

	_, err = a.MemberPromote(ctx(t), id("a"))
	g.Expect(err).To(MatchError(rpctypes.ErrMemberNotLearner))
	promoted, err := a.MemberPromote(ctx(t), id("d"))
	g.Expect(err).NotTo(HaveOccurred())
	for _, m := range promoted.Members {
		g.Expect(m.IsLearner).To(BeFalse())
	}

	// The new member answers for itself.
	st, err := e.client("etcd-d").Status(ctx(t), "etcd-d")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Header.MemberId).To(Equal(id("d")))

	removed, err := a.MemberRemove(ctx(t), id("b"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(removed.Members).To(HaveLen(2))
	_, err = a.MemberRemove(ctx(t), id("b"))
	g.Expect(err).To(MatchError(rpctypes.ErrMemberNotFound))
	g.Expect(e.server.HasMember("etcd-b")).To(BeFalse())
}

func TestRemovingTheLeaderElectsAnother(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t, "etcd-a", "etcd-b", "etcd-c")
	a := e.client("etcd-a")

	_, err := a.MemberRemove(ctx(t), id("a"))
	g.Expect(err).NotTo(HaveOccurred())

	// The lowest remaining ID wins, so every process elects the same leader.
	want := min(id("b"), id("c"))
	st, err := e.client("etcd-c").Status(ctx(t), "etcd-c")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Leader).To(Equal(want))
	g.Expect(st.RaftTerm).To(BeEquivalentTo(2))

	// The removed member is gone, like a stopped etcd: raw call, no retries.
	_, err = pb.NewClusterClient(e.rawConn("etcd-a")).MemberList(ctx(t), &pb.MemberListRequest{})
	g.Expect(status.Code(err)).To(Equal(codes.Unavailable))
}

func TestUnknownMemberIsUnavailable(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t, "etcd-a")
	_, err := pb.NewMaintenanceClient(e.rawConn("etcd-zzz")).Status(ctx(t), &pb.StatusRequest{})
	g.Expect(status.Code(err)).To(Equal(codes.Unavailable))
	_, err = pb.NewMaintenanceClient(e.rawConn("localhost")).Status(ctx(t), &pb.StatusRequest{})
	g.Expect(status.Code(err)).To(Equal(codes.Unavailable), "a server name that is no etcd pod")
}

func TestHealthRangeAndDefragment(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t, "etcd-a")
	a := e.client("etcd-a")

	// etcdctl endpoint health reads key "health".
	resp, err := a.Get(ctx(t), "health")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(resp.Count).To(BeZero())
	g.Expect(resp.Header.MemberId).To(Equal(id("a")))

	before, err := a.Status(ctx(t), "etcd-a")
	g.Expect(err).NotTo(HaveOccurred())
	_, err = a.Defragment(ctx(t), "etcd-a")
	g.Expect(err).NotTo(HaveOccurred())
	after, err := a.Status(ctx(t), "etcd-a")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(after.DbSize).To(BeNumerically("<", before.DbSize))

	_, err = a.Put(ctx(t), "k", "v")
	g.Expect(status.Code(err)).To(Equal(codes.Unimplemented))
}

func TestLinearizableReadWithoutLeaderFails(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t, "etcd-a")
	// A started learner with no voting member: nobody can lead.
	_, err := e.client("etcd-a").MemberAddAsLearner(ctx(t), []string{"https://d:2380"})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = e.server.AddMember(ctx(t), "etcd-d")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(e.server.RemoveMember(ctx(t), "etcd-a")).To(Succeed())
	g.Expect(e.server.Leader()).To(BeEmpty())

	d := pb.NewKVClient(e.rawConn("etcd-d"))
	_, err = d.Range(ctx(t), &pb.RangeRequest{Key: []byte("health")})
	g.Expect(err).To(MatchError(rpctypes.ErrGRPCNoLeader))
	_, err = d.Range(ctx(t), &pb.RangeRequest{Key: []byte("health"), Serializable: true})
	g.Expect(err).NotTo(HaveOccurred())
}

// ContextWithMember wins over the TLS server name: that is how the mux routes
// a connection it accepted itself.
func TestContextWithMemberSelectsTheAnsweringMember(t *testing.T) {
	g := NewWithT(t)
	s, err := etcd.NewServer(t.Context(), fake.NewClientBuilder().Build(), cluster)
	g.Expect(err).NotTo(HaveOccurred())
	for _, p := range []string{"etcd-a", "etcd-b"} {
		_, err := s.AddMember(t.Context(), p)
		g.Expect(err).NotTo(HaveOccurred())
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	gs := grpc.NewServer(grpc.UnaryInterceptor(func(c context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		return h(etcd.ContextWithMember(c, "etcd-b"), req)
	}))
	s.Register(gs)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = conn.Close() })
	resp, err := pb.NewMaintenanceClient(conn).Status(ctx(t), &pb.StatusRequest{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(resp.Header.MemberId).To(Equal(id("b")))
	g.Expect(resp.Leader).To(Equal(id("a")))
}

// rawConn is a plain grpc connection (no clientv3 retries) with SNI serverName.
func (e *env) rawConn(serverName string) *grpc.ClientConn {
	e.t.Helper()
	tlsCfg := e.pki.ClientTLS()
	tlsCfg.ServerName = serverName
	conn, err := grpc.NewClient(e.addr, grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)), grpc.WithAuthority(serverName))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// RegisterRouted: one grpc.Server answers for every cluster, each call as the Server its context
// names, and a call that names none is refused rather than answered by some cluster.
func TestRegisterRoutedAnswersAsTheServerInTheContext(t *testing.T) {
	g := NewWithT(t)
	servers := map[string]*etcd.Server{}
	for _, name := range []string{"east", "west"} {
		s, err := etcd.NewServer(t.Context(), fake.NewClientBuilder().Build(), name)
		g.Expect(err).NotTo(HaveOccurred())
		_, err = s.AddMember(t.Context(), "etcd-"+name+"-cp")
		g.Expect(err).NotTo(HaveOccurred())
		servers[name] = s
	}
	// The cluster a call is for comes from the metadata here; the mux knows it from the listener.
	gs := grpc.NewServer(grpc.UnaryInterceptor(func(c context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(c)
		if name := md.Get("cluster"); len(name) == 1 {
			c = etcd.ContextWithMember(etcd.ContextWithServer(c, servers[name[0]]), "etcd-"+name[0]+"-cp")
		}
		return h(c, req)
	}))
	etcd.RegisterRouted(gs)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = conn.Close() })

	for name, s := range servers {
		resp, err := pb.NewClusterClient(conn).MemberList(metadata.AppendToOutgoingContext(ctx(t), "cluster", name), &pb.MemberListRequest{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(resp.Header.ClusterId).To(Equal(s.ClusterID()))
		g.Expect(resp.Members).To(HaveLen(1))
		g.Expect(resp.Members[0].Name).To(Equal(name + "-cp"))
	}
	_, err = pb.NewMaintenanceClient(conn).Status(ctx(t), &pb.StatusRequest{})
	g.Expect(status.Code(err)).To(Equal(codes.Unavailable))
	g.Expect(err).To(MatchError(ContainSubstring("no cluster addressed")))
}
