package etcd_test

import (
	"testing"

	. "github.com/onsi/gomega"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// TestMemberAddKeepsAQuorumOfStartedMembers: etcd's strict reconfiguration check through
// clientv3. A one-member cluster takes a second voting member before it has started (etcd's
// restore path), a third is refused until the second has started; learners are not counted.
func TestMemberAddKeepsAQuorumOfStartedMembers(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t, "etcd-a")
	a := e.client("etcd-a")

	_, err := a.MemberAdd(ctx(t), []string{"https://b:2380"})
	g.Expect(err).NotTo(HaveOccurred(), "1 started of 2 voting members: etcd allows it")
	_, err = a.MemberAdd(ctx(t), []string{"https://c:2380"})
	g.Expect(err).To(MatchError(rpctypes.ErrMemberNotEnoughStarted), "1 started of 3 voting members is no quorum")
	_, err = a.MemberAddAsLearner(ctx(t), []string{"https://d:2380"})
	g.Expect(err).NotTo(HaveOccurred(), "a learner does not vote")

	_, err = e.server.AddMember(ctx(t), "etcd-b")
	g.Expect(err).NotTo(HaveOccurred())
	_, err = a.MemberAdd(ctx(t), []string{"https://c:2380"})
	g.Expect(err).NotTo(HaveOccurred(), "2 started of 3 voting members")
}

// TestMembershipChangesNeedConnectedQuorum: an unhealthy member is started but not connected.
// Adding a voter, or removing a healthy member, while too few are connected answers etcd's
// "unhealthy cluster"; removing the member that is down is allowed (KCP's remediation).
func TestMembershipChangesNeedConnectedQuorum(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t, "etcd-a", "etcd-b", "etcd-c")
	a := e.client("etcd-a")
	g.Expect(e.server.SetMemberUnhealthy("etcd-b", true)).To(Succeed())

	_, err := a.MemberAdd(ctx(t), []string{"https://d:2380"})
	g.Expect(err).To(MatchError(rpctypes.ErrUnhealthy), "2 of 3 connected cannot carry 4 members")
	_, err = a.MemberRemove(ctx(t), id("c"))
	g.Expect(err).To(MatchError(rpctypes.ErrUnhealthy), "removing healthy c leaves a alone with b down")

	resp, err := a.MemberRemove(ctx(t), id("b"))
	g.Expect(err).NotTo(HaveOccurred(), "the member that is down is not part of the active quorum")
	g.Expect(resp.Members).To(HaveLen(2))
	_, err = a.MemberAdd(ctx(t), []string{"https://d:2380"})
	g.Expect(err).NotTo(HaveOccurred(), "2 of 2 connected")
}
