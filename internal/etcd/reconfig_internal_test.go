package etcd

import (
	"testing"

	. "github.com/onsi/gomega"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// TestPromoteKeepsAQuorumOfStartedMembers: promoting counts the learner as started, but two
// voting members that never started outvote it and the one started member (a state the API
// cannot reach since MemberAdd checks the same, but restored or older state can).
func TestPromoteKeepsAQuorumOfStartedMembers(t *testing.T) {
	g := NewWithT(t)
	st := &state{Members: []memberState{
		{ID: 1, Name: "a"}, {ID: 2}, {ID: 3}, {ID: 4, Name: "l", IsLearner: true},
	}}
	g.Expect(mayPromote(st)).To(MatchError(rpctypes.ErrGRPCMemberNotEnoughStarted))
	st.Members[1].Name = "b"
	g.Expect(mayPromote(st)).To(Succeed())
}
