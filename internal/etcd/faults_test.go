package etcd_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/etcd"
)

// TestFaultsAsEtcdAnswers: each injected fault is answered with etcd's own errors, and only for the
// member or cluster it is set on.
func TestFaultsAsEtcdAnswers(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t, "etcd-a", "etcd-b", "etcd-c")
	a := e.client("etcd-a")

	// Without faults a Put is simply not offered.
	_, err := a.Put(ctx(t), "k", "v")
	g.Expect(err).To(MatchError(ContainSubstring("Unimplemented")))

	e.server.SetFaults(&etcd.Faults{Alarm: pb.AlarmType_NOSPACE})
	_, err = a.Put(ctx(t), "k", "v")
	g.Expect(err).To(MatchError(rpctypes.ErrNoSpace))
	alarms, err := a.AlarmList(ctx(t))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(alarms.Alarms).To(HaveLen(3))
	// The fault's alarms are not stored: removing the fault clears them.
	e.server.SetFaults(nil)
	alarms, err = a.AlarmList(ctx(t))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(alarms.Alarms).To(BeEmpty())

	e.server.SetFaults(&etcd.Faults{Latency: etcd.Latency{Base: 200 * time.Millisecond, Jitter: 0.5}})
	start := time.Now()
	_, err = a.Status(ctx(t), "etcd-a")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(time.Since(start)).To(And(BeNumerically(">=", 200*time.Millisecond), BeNumerically("<", time.Second)))
	e.server.SetFaults(&etcd.Faults{})

	term := e.server.RaftTerm()
	g.Expect(e.server.SetLeaderless(ctx(t), true)).To(Succeed())
	_, err = a.Put(ctx(t), "k", "v")
	g.Expect(err).To(MatchError(rpctypes.ErrNoLeader))
	_, err = a.Get(ctx(t), "health")
	g.Expect(err).To(MatchError(rpctypes.ErrNoLeader))
	_, err = a.MemberList(ctx(t))
	g.Expect(err).To(MatchError(rpctypes.ErrNoLeader))
	// Removing the leader elects nobody while the fault holds.
	g.Expect(e.server.RemoveMember(ctx(t), "etcd-a")).To(Succeed())
	g.Expect(e.server.Leader()).To(BeEmpty())
	g.Expect(e.server.SetLeaderless(ctx(t), false)).To(Succeed())
	g.Expect(e.server.Leader()).To(Equal("etcd-b"))
	g.Expect(e.server.RaftTerm()).To(BeNumerically(">", term))

	g.Expect(e.server.SetMemberUnhealthy("etcd-c", true)).To(Succeed())
	c := e.client("etcd-c")
	_, err = c.Status(ctx(t), "etcd-c")
	g.Expect(err).To(MatchError(ContainSubstring("etcdserver: member c is unhealthy")))
	short, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	_, err = c.Get(short, "health") // clientv3 retries Unavailable until the context ends
	g.Expect(err).To(HaveOccurred())
	_, err = e.client("etcd-b").Status(ctx(t), "etcd-b")
	g.Expect(err).NotTo(HaveOccurred())
}
