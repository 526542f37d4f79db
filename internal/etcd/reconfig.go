package etcd

import "go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

// etcd's strict reconfiguration check (--strict-reconfig-check, on by default) refuses a
// membership change that would leave the cluster without a quorum: first by counting started
// voting members (a member is started once it has published its name, which AddMember does
// when its pod runs), then by the members the answering one is connected to. An unhealthy
// member (SetMemberUnhealthy) is started but not connected, as a member whose peer link is down.

// quorum is a majority of n voting members.
func quorum(n int) int { return n/2 + 1 }

// mayAddVoter is etcd's check before adding a voting member (learners are not checked): after
// the add, the started voting members must still be a quorum, except when a one-member cluster
// gets its second member (etcd's restore path).
func (s *Server) mayAddVoter(st *state, self uint64) error {
	voters, started := votersOf(st, 0)
	voters++ // the new member counts, not started
	if !(started == 1 && voters == 2) && started < quorum(voters) {
		return rpctypes.ErrGRPCMemberNotEnoughStarted
	}
	if voters-1 > 1 && s.connectedVoters(st, self) < quorum(voters) {
		return rpctypes.ErrGRPCUnhealthy
	}
	return nil
}

// mayRemoveVoter is etcd's check before removing member id (learners are not checked): the
// started voting members that remain must be a quorum of those that remain and, unless the
// member removed is down (then it is not part of the active quorum), the connected ones too.
func (s *Server) mayRemoveVoter(st *state, self, id uint64) error {
	target := st.byID(id)
	if target == nil || target.IsLearner {
		return nil
	}
	voters, started := votersOf(st, id)
	if started < quorum(voters) {
		return rpctypes.ErrGRPCMemberNotEnoughStarted
	}
	if id != self && !s.connected(*target) {
		return nil
	}
	all := voters + 1
	if s.connectedVoters(st, self)-1 < 1+(all-1)/2 {
		return rpctypes.ErrGRPCUnhealthy
	}
	return nil
}

// mayPromote is etcd's check before promoting a learner: counting the learner as a started
// voting member, the started voting members must be a quorum.
func mayPromote(st *state) error {
	voters, started := votersOf(st, 0)
	if started+1 < quorum(voters+1) {
		return rpctypes.ErrGRPCMemberNotEnoughStarted
	}
	return nil
}

// votersOf counts the voting members of st other than except, and how many of them started.
func votersOf(st *state, except uint64) (voters, started int) {
	for _, m := range st.Members {
		if m.IsLearner || m.ID == except {
			continue
		}
		voters++
		if m.Name != "" {
			started++
		}
	}
	return voters, started
}

// connectedVoters counts the voting members the answering member self reaches, itself included.
func (s *Server) connectedVoters(st *state, self uint64) int {
	n := 0
	for _, m := range st.Members {
		if !m.IsLearner && (m.ID == self || s.connected(m)) {
			n++
		}
	}
	return n
}

// connected reports whether a member's peer link would be up: it has started and is healthy.
// s.mu is held (the checks run inside update).
func (s *Server) connected(m memberState) bool { return m.Name != "" && !s.unhealthy[m.Name] }
