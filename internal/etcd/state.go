package etcd

import (
	"fmt"
	"net/url"
	"slices"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// state is everything about the cluster's etcd that must survive a restart.
// Leadership is explicit: Leader only changes through an election (the leader
// is gone or there was none) or MoveLeader, and every change bumps Term.
type state struct {
	// Term is the raft term; Index the raft index, bumped by every write.
	Term    uint64        `json:"term"`
	Index   uint64        `json:"index"`
	Leader  uint64        `json:"leader,string"` // member ID, 0 = no leader
	Members []memberState `json:"members"`
	Alarms  []alarmState  `json:"alarms,omitempty"`
	// Leaderless holds the leaderless fault: no member is elected while it is set.
	Leaderless bool `json:"leaderless,omitempty"`
}

type memberState struct {
	ID         uint64   `json:"id,string"` // string: IDs exceed the 2^53 a JSON number keeps exactly in most tools
	Name       string   `json:"name,omitempty"`
	PeerURLs   []string `json:"peerURLs"`
	ClientURLs []string `json:"clientURLs,omitempty"`
	IsLearner  bool     `json:"isLearner,omitempty"`
}

type alarmState struct {
	MemberID uint64       `json:"memberID,string"`
	Alarm    pb.AlarmType `json:"alarm"`
}

func (st *state) clone() state {
	out := *st
	out.Members = make([]memberState, len(st.Members))
	for i, m := range st.Members {
		m.PeerURLs = slices.Clone(m.PeerURLs)
		m.ClientURLs = slices.Clone(m.ClientURLs)
		out.Members[i] = m
	}
	out.Alarms = slices.Clone(st.Alarms)
	return out
}

// byName finds a started member.
func (st *state) byName(name string) *memberState {
	for i := range st.Members {
		if name != "" && st.Members[i].Name == name {
			return &st.Members[i]
		}
	}
	return nil
}

func (st *state) byID(id uint64) *memberState {
	for i := range st.Members {
		if id != 0 && st.Members[i].ID == id {
			return &st.Members[i]
		}
	}
	return nil
}

// unstartedFor finds a member announced by MemberAdd whose peer URL points at
// host name: kubeadm's join adds the member first, then starts it.
func (st *state) unstartedFor(name string) *memberState {
	for i := range st.Members {
		m := &st.Members[i]
		if m.Name != "" {
			continue
		}
		for _, u := range m.PeerURLs {
			if p, err := url.Parse(u); err == nil && p.Hostname() == name {
				return m
			}
		}
	}
	return nil
}

// freeID returns want unless another member already has it; then a
// deterministic variant, so a hash collision never merges two members.
func (st *state) freeID(want uint64, parts ...string) uint64 {
	for i := 0; st.byID(want) != nil; i++ {
		want = nonZeroHash(append(parts, fmt.Sprint(i))...)
	}
	return want
}

func (st *state) sorted() []memberState {
	out := slices.Clone(st.Members)
	slices.SortFunc(out, func(a, b memberState) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	return out
}

func (st *state) remove(id uint64) {
	st.Members = slices.DeleteFunc(st.Members, func(m memberState) bool { return m.ID == id })
	// Alarms belong to members; a removed member cannot clear its own.
	st.Alarms = slices.DeleteFunc(st.Alarms, func(a alarmState) bool { return a.MemberID == id })
	if st.Leader == id {
		st.Leader = 0
		st.electIfLeaderless()
	}
}

// electIfLeaderless makes the started voting member with the lowest ID the
// leader when there is none: deterministic, so every restart agrees.
func (st *state) electIfLeaderless() {
	if st.Leader != 0 || st.Leaderless {
		return
	}
	for _, m := range st.sorted() {
		if m.Name != "" && !m.IsLearner {
			st.Leader = m.ID
			st.Term++
			return
		}
	}
}

func (st *state) transferLeadership(to uint64) {
	if st.Leader != to {
		st.Leader = to
		st.Term++
	}
}

func (st *state) hasAlarm(a alarmState) bool { return slices.Contains(st.Alarms, a) }

func (st *state) alarmsPB() []*pb.AlarmMember {
	out := make([]*pb.AlarmMember, 0, len(st.Alarms))
	for _, a := range st.Alarms {
		out = append(out, &pb.AlarmMember{MemberID: a.MemberID, Alarm: a.Alarm})
	}
	return out
}

func (m memberState) export() Member {
	out := Member{
		Name:       m.Name,
		ID:         m.ID,
		PeerURLs:   slices.Clone(m.PeerURLs),
		ClientURLs: slices.Clone(m.ClientURLs),
		IsLearner:  m.IsLearner,
	}
	if m.Name != "" {
		out.PodName = PodNameForMember(m.Name)
	}
	return out
}
