package etcd_test

import (
	"context"
	"errors"
	"testing"

	. "github.com/onsi/gomega"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/etcd"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

func TestIDsAreStableAndDistinct(t *testing.T) {
	g := NewWithT(t)
	g.Expect(etcd.MemberIDFor("c1", "n1")).To(Equal(etcd.MemberIDFor("c1", "n1")))
	g.Expect(etcd.MemberIDFor("c1", "n1")).NotTo(BeZero())
	g.Expect(etcd.MemberIDFor("c1", "n1")).NotTo(Equal(etcd.MemberIDFor("c1", "n2")))
	g.Expect(etcd.MemberIDFor("c1", "n1")).NotTo(Equal(etcd.MemberIDFor("c2", "n1")))
	g.Expect(etcd.MemberIDFor("ab", "c")).NotTo(Equal(etcd.MemberIDFor("a", "bc")))
	g.Expect(etcd.ClusterIDFor("c1")).NotTo(Equal(etcd.ClusterIDFor("c2")))
	g.Expect(etcd.ClusterIDFor("c1")).NotTo(BeZero())
}

func TestMembershipAndLeadership(t *testing.T) {
	g := NewWithT(t)
	s, err := etcd.NewServer(t.Context(), fake.NewClientBuilder().Build(), cluster)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s.Leader()).To(BeEmpty())

	idA, err := s.AddMember(t.Context(), "etcd-a")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(idA).To(Equal(id("a")))
	again, err := s.AddMember(t.Context(), "etcd-a")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again).To(Equal(idA), "AddMember is idempotent")
	_, err = s.AddMember(t.Context(), "etcd-b")
	g.Expect(err).NotTo(HaveOccurred())

	g.Expect(s.Leader()).To(Equal("etcd-a"), "the first member leads")
	g.Expect(s.RaftTerm()).To(BeEquivalentTo(1))
	g.Expect(s.Members()).To(HaveLen(2))
	g.Expect(s.HasMember("etcd-b")).To(BeTrue())
	g.Expect(s.HasMember("etcd-x")).To(BeFalse())

	_, err = s.AddMember(t.Context(), "kube-apiserver-a")
	g.Expect(err).To(HaveOccurred(), "only etcd pods run members")

	g.Expect(s.RemoveMember(t.Context(), "etcd-a")).To(Succeed())
	g.Expect(s.Leader()).To(Equal("etcd-b"), "removing the leader elects another")
	g.Expect(s.RaftTerm()).To(BeEquivalentTo(2))
	g.Expect(s.RemoveMember(t.Context(), "etcd-a")).To(Succeed(), "removal is idempotent")

	g.Expect(s.RemoveMember(t.Context(), "etcd-b")).To(Succeed())
	g.Expect(s.Leader()).To(BeEmpty())
	_, err = s.AddMember(t.Context(), "etcd-c")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s.Leader()).To(Equal("etcd-c"))
	g.Expect(s.RaftTerm()).To(BeEquivalentTo(3))
}

// A Server rebuilt over the same workload store (what HotRestart does) answers
// with the same members, IDs, leader, term and alarms.
func TestStateSurvivesRestart(t *testing.T) {
	g := NewWithT(t)
	store := fake.NewClientBuilder().Build()
	e := newEnvOn(t, store, "etcd-a", "etcd-b", "etcd-c")
	a := e.client("etcd-a")
	_, err := a.MoveLeader(ctx(t), id("c"))
	g.Expect(err).NotTo(HaveOccurred())
	_, err = pb.NewMaintenanceClient(a.ActiveConnection()).Alarm(ctx(t), &pb.AlarmRequest{Action: pb.AlarmRequest_ACTIVATE, MemberID: id("b"), Alarm: pb.AlarmType_NOSPACE})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = a.MemberAdd(ctx(t), []string{"https://d:2380"})
	g.Expect(err).NotTo(HaveOccurred())

	// The state is a ConfigMap in the workload cluster's kube-system.
	cm := &corev1.ConfigMap{}
	g.Expect(store.Get(t.Context(), client.ObjectKey{Namespace: metav1.NamespaceSystem, Name: etcd.StateConfigMapName}, cm)).To(Succeed())
	g.Expect(cm.Data).To(HaveKey(etcd.StateKey))

	restarted := newEnvOn(t, store)
	g.Expect(restarted.server.Members()).To(Equal(e.server.Members()))
	g.Expect(restarted.server.Leader()).To(Equal("etcd-c"))
	g.Expect(restarted.server.RaftTerm()).To(BeEquivalentTo(2))

	st, err := restarted.client("etcd-b").Status(ctx(t), "etcd-b")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Leader).To(Equal(id("c")))
	g.Expect(st.Header.MemberId).To(Equal(id("b")))
	alarms, err := restarted.client("etcd-a").AlarmList(ctx(t))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(alarms.Alarms).To(HaveLen(1))

	// Starting the announced member after the restart still finds it.
	started, err := restarted.server.AddMember(ctx(t), "etcd-d")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(started).To(Equal(id("d")))
	g.Expect(restarted.server.Members()).To(HaveLen(4))
}

func TestFailedWriteLeavesStateUnchanged(t *testing.T) {
	g := NewWithT(t)
	fail := false
	store := fake.NewClientBuilder().WithInterceptorFuncs(interceptor.Funcs{
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if fail {
				return errors.New("store unavailable")
			}
			return c.Update(ctx, obj, opts...)
		},
	}).Build()
	e := newEnvOn(t, store, "etcd-a", "etcd-b")

	fail = true
	_, err := e.server.AddMember(ctx(t), "etcd-c")
	g.Expect(err).To(MatchError(ContainSubstring("store unavailable")))
	g.Expect(e.server.HasMember("etcd-c")).To(BeFalse())

	// etcd's "request timed out" (clientv3 retries it a few times first).
	_, err = e.client("etcd-a").MoveLeader(ctx(t), id("b"))
	g.Expect(err).To(MatchError(rpctypes.ErrTimeout))
	g.Expect(e.server.Leader()).To(Equal("etcd-a"))

	fail = false
	_, err = e.client("etcd-a").MoveLeader(ctx(t), id("b"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(e.server.Leader()).To(Equal("etcd-b"))
}

func TestCorruptStateIsAnError(t *testing.T) {
	g := NewWithT(t)
	store := fake.NewClientBuilder().WithObjects(&corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: etcd.StateConfigMapName},
		Data:       map[string]string{etcd.StateKey: "{not json"},
	}).Build()
	_, err := etcd.NewServer(t.Context(), store, cluster)
	g.Expect(err).To(MatchError(ContainSubstring(etcd.StateConfigMapName)))
}

// The same over the workload store the mux really uses: the state is an
// ordinary ConfigMap in the cluster's kube-system.
func TestStateSurvivesRestartOnTheWorkloadStore(t *testing.T) {
	g := NewWithT(t)
	wc, err := store.NewManager().AddCluster(cluster, store.ClusterOptions{})
	g.Expect(err).NotTo(HaveOccurred())

	s, err := etcd.NewServer(t.Context(), wc.Client(), cluster)
	g.Expect(err).NotTo(HaveOccurred())
	for _, p := range []string{"etcd-a", "etcd-b", "etcd-c"} {
		_, err := s.AddMember(t.Context(), p)
		g.Expect(err).NotTo(HaveOccurred())
	}
	g.Expect(s.RemoveMember(t.Context(), "etcd-a")).To(Succeed())
	leader := s.Leader()
	g.Expect(leader).NotTo(BeEmpty())

	cm := &corev1.ConfigMap{}
	g.Expect(wc.Client().Get(t.Context(), client.ObjectKey{Namespace: metav1.NamespaceSystem, Name: etcd.StateConfigMapName}, cm)).To(Succeed())

	restarted, err := etcd.NewServer(t.Context(), wc.Client(), cluster)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(restarted.Members()).To(Equal(s.Members()))
	g.Expect(restarted.Leader()).To(Equal(leader))
	g.Expect(restarted.RaftTerm()).To(Equal(s.RaftTerm()))
}
