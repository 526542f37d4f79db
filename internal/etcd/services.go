package etcd

import (
	"context"
	"net/url"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/api/v3/version"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The three services are thin adapters: validation and etcd error semantics
// here, state changes in Server/state. Methods of the Unimplemented structs
// answer codes.Unimplemented for what a simulated member does not offer
// (writes, watches, leases, hashes, snapshots).

// target is the Server a service answers as: its own (Server.Register), or the one each call's
// context names (RegisterRouted, ContextWithServer).
type target struct{ s *Server }

// begin starts a call on the target Server.
func (t target) begin(ctx context.Context) (*Server, *call, error) {
	s := t.s
	if s == nil {
		if s = serverFromContext(ctx); s == nil {
			return nil, nil, status.Error(codes.Unavailable, "etcd: no cluster addressed")
		}
	}
	c, err := s.begin(ctx)
	return s, c, err
}

type clusterService struct {
	pb.UnimplementedClusterServer
	target
}

func (c *clusterService) MemberList(ctx context.Context, req *pb.MemberListRequest) (*pb.MemberListResponse, error) {
	_, call, err := c.begin(ctx)
	if err != nil {
		return nil, err
	}
	if req.Linearizable && call.leaderless() {
		return nil, rpctypes.ErrGRPCNoLeader
	}
	return &pb.MemberListResponse{Header: call.header, Members: toPB(call.st.sorted())}, nil
}

// MemberAdd announces a member that is not started yet (no name, no client
// URLs), like etcd does; AddMember starts it once its pod runs.
func (c *clusterService) MemberAdd(ctx context.Context, req *pb.MemberAddRequest) (*pb.MemberAddResponse, error) {
	s, call, err := c.begin(ctx)
	if err != nil {
		return nil, err
	}
	if !validURLs(req.PeerURLs) {
		return nil, rpctypes.ErrGRPCMemberBadURLs
	}
	var added memberState
	self := call.member.ID
	call, err = s.mutate(ctx, call, func(st *state) (bool, error) {
		if !req.IsLearner {
			if err := s.mayAddVoter(st, self); err != nil {
				return false, err
			}
		}
		for _, m := range st.Members {
			for _, u := range m.PeerURLs {
				for _, want := range req.PeerURLs {
					if u == want {
						return false, rpctypes.ErrGRPCPeerURLExist
					}
				}
			}
		}
		if req.IsLearner {
			for _, m := range st.Members {
				if m.IsLearner {
					return false, rpctypes.ErrGRPCTooManyLearners
				}
			}
		}
		// Derive the ID from the peer host: it is the node name in a simulated
		// cluster, so the member keeps the ID AddMember would have given it.
		host := req.PeerURLs[0]
		if p, err := url.Parse(host); err == nil {
			host = p.Hostname()
		}
		added = memberState{
			ID:        st.freeID(MemberIDFor(s.clusterName, host), s.clusterName, req.PeerURLs[0]),
			PeerURLs:  append([]string(nil), req.PeerURLs...),
			IsLearner: req.IsLearner,
		}
		st.Members = append(st.Members, added)
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	return &pb.MemberAddResponse{
		Header:  call.header,
		Member:  toPB([]memberState{added})[0],
		Members: toPB(call.st.sorted()),
	}, nil
}

func (c *clusterService) MemberRemove(ctx context.Context, req *pb.MemberRemoveRequest) (*pb.MemberRemoveResponse, error) {
	s, call, err := c.begin(ctx)
	if err != nil {
		return nil, err
	}
	self := call.member.ID
	call, err = s.mutate(ctx, call, func(st *state) (bool, error) {
		if st.byID(req.ID) == nil {
			return false, rpctypes.ErrGRPCMemberNotFound
		}
		if err := s.mayRemoveVoter(st, self, req.ID); err != nil {
			return false, err
		}
		st.remove(req.ID)
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	return &pb.MemberRemoveResponse{Header: call.header, Members: toPB(call.st.sorted())}, nil
}

func (c *clusterService) MemberUpdate(ctx context.Context, req *pb.MemberUpdateRequest) (*pb.MemberUpdateResponse, error) {
	s, call, err := c.begin(ctx)
	if err != nil {
		return nil, err
	}
	if !validURLs(req.PeerURLs) {
		return nil, rpctypes.ErrGRPCMemberBadURLs
	}
	call, err = s.mutate(ctx, call, func(st *state) (bool, error) {
		m := st.byID(req.ID)
		if m == nil {
			return false, rpctypes.ErrGRPCMemberNotFound
		}
		m.PeerURLs = append([]string(nil), req.PeerURLs...)
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	return &pb.MemberUpdateResponse{Header: call.header, Members: toPB(call.st.sorted())}, nil
}

// MemberPromote turns a started learner into a voting member; a learner that
// never started is not in sync with the leader and cannot be promoted.
func (c *clusterService) MemberPromote(ctx context.Context, req *pb.MemberPromoteRequest) (*pb.MemberPromoteResponse, error) {
	s, call, err := c.begin(ctx)
	if err != nil {
		return nil, err
	}
	call, err = s.mutate(ctx, call, func(st *state) (bool, error) {
		m := st.byID(req.ID)
		switch {
		case m == nil:
			return false, rpctypes.ErrGRPCMemberNotFound
		case !m.IsLearner:
			return false, rpctypes.ErrGRPCMemberNotLearner
		case m.Name == "":
			return false, rpctypes.ErrGRPCLearnerNotReady
		}
		if err := mayPromote(st); err != nil {
			return false, err
		}
		m.IsLearner = false
		st.electIfLeaderless()
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	return &pb.MemberPromoteResponse{Header: call.header, Members: toPB(call.st.sorted())}, nil
}

type maintenanceService struct {
	pb.UnimplementedMaintenanceServer
	target
}

func (m *maintenanceService) Status(ctx context.Context, _ *pb.StatusRequest) (*pb.StatusResponse, error) {
	s, call, err := m.begin(ctx)
	if err != nil {
		return nil, err
	}
	resp := &pb.StatusResponse{
		Header:           call.header,
		Version:          version.Version,
		DbSize:           s.dbSizeOf(call.member.ID),
		DbSizeInUse:      defaultDBSizeInUse,
		DbSizeQuota:      defaultDBQuota,
		Leader:           call.st.Leader,
		RaftIndex:        call.st.Index,
		RaftAppliedIndex: call.st.Index,
		RaftTerm:         call.st.Term,
		IsLearner:        call.member.IsLearner,
		StorageVersion:   version.Cluster(version.Version) + ".0",
	}
	// Like etcd: errors are for humans, alarms included.
	if call.st.Leader == 0 {
		resp.Errors = append(resp.Errors, "etcdserver: no leader")
	}
	for _, a := range call.st.alarmsPB() {
		resp.Errors = append(resp.Errors, a.String())
	}
	return resp, nil
}

func (m *maintenanceService) Alarm(ctx context.Context, req *pb.AlarmRequest) (*pb.AlarmResponse, error) {
	s, call, err := m.begin(ctx)
	if err != nil {
		return nil, err
	}
	if call.leaderless() {
		// Alarm requests, listing included, go through raft.
		return nil, rpctypes.ErrGRPCNoLeader
	}
	alarm := alarmState{MemberID: req.MemberID, Alarm: req.Alarm}
	var affected []*pb.AlarmMember
	switch req.Action {
	case pb.AlarmRequest_GET:
		return &pb.AlarmResponse{Header: call.header, Alarms: call.st.alarmsPB()}, nil
	case pb.AlarmRequest_ACTIVATE:
		if req.Alarm == pb.AlarmType_NONE {
			return &pb.AlarmResponse{Header: call.header}, nil
		}
		call, err = s.mutate(ctx, call, func(st *state) (bool, error) {
			if st.byID(req.MemberID) == nil {
				return false, rpctypes.ErrGRPCMemberNotFound
			}
			affected = []*pb.AlarmMember{{MemberID: alarm.MemberID, Alarm: alarm.Alarm}}
			if st.hasAlarm(alarm) {
				return false, nil
			}
			st.Alarms = append(st.Alarms, alarm)
			return true, nil
		})
	case pb.AlarmRequest_DEACTIVATE:
		call, err = s.mutate(ctx, call, func(st *state) (bool, error) {
			if !st.hasAlarm(alarm) {
				return false, nil
			}
			affected = []*pb.AlarmMember{{MemberID: alarm.MemberID, Alarm: alarm.Alarm}}
			for i, a := range st.Alarms {
				if a == alarm {
					st.Alarms = append(st.Alarms[:i], st.Alarms[i+1:]...)
					break
				}
			}
			return true, nil
		})
	default:
		return nil, status.Errorf(codes.InvalidArgument, "etcdserver: unknown alarm action %v", req.Action)
	}
	if err != nil {
		return nil, err
	}
	return &pb.AlarmResponse{Header: call.header, Alarms: affected}, nil
}

// MoveLeader is answered by the leader only, and only moves leadership to a
// started voting member, as etcd does.
func (m *maintenanceService) MoveLeader(ctx context.Context, req *pb.MoveLeaderRequest) (*pb.MoveLeaderResponse, error) {
	s, call, err := m.begin(ctx)
	if err != nil {
		return nil, err
	}
	call, err = s.mutate(ctx, call, func(st *state) (bool, error) {
		if st.Leader != call.member.ID {
			return false, rpctypes.ErrGRPCNotLeader
		}
		t := st.byID(req.TargetID)
		if t == nil || t.IsLearner || t.Name == "" {
			return false, rpctypes.ErrGRPCBadLeaderTransferee
		}
		if st.Leader == t.ID {
			return false, nil
		}
		st.transferLeadership(t.ID)
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	return &pb.MoveLeaderResponse{Header: call.header}, nil
}

func (m *maintenanceService) Defragment(ctx context.Context, _ *pb.DefragmentRequest) (*pb.DefragmentResponse, error) {
	s, call, err := m.begin(ctx)
	if err != nil {
		return nil, err
	}
	s.defragment(call.member.ID)
	return &pb.DefragmentResponse{Header: call.header}, nil
}

type kvService struct {
	pb.UnimplementedKVServer
	target
}

// Range answers every read with an empty result: the simulated etcd stores no
// keys. That is what `etcdctl endpoint health` needs (it reads key "health").
func (k *kvService) Range(ctx context.Context, req *pb.RangeRequest) (*pb.RangeResponse, error) {
	_, call, err := k.begin(ctx)
	if err != nil {
		return nil, err
	}
	if len(req.Key) == 0 {
		return nil, rpctypes.ErrGRPCEmptyKey
	}
	if call.st.Leader == 0 && !req.Serializable {
		// A linearizable read needs a leader.
		return nil, rpctypes.ErrGRPCNoLeader
	}
	return &pb.RangeResponse{Header: call.header}, nil
}

// Put stores nothing (the simulated etcd has no keys) but fails as etcd does when it cannot
// write: no leader, or the NOSPACE alarm raised.
func (k *kvService) Put(ctx context.Context, req *pb.PutRequest) (*pb.PutResponse, error) {
	_, call, err := k.begin(ctx)
	if err != nil {
		return nil, err
	}
	if len(req.Key) == 0 {
		return nil, rpctypes.ErrGRPCEmptyKey
	}
	if call.leaderless() {
		return nil, rpctypes.ErrGRPCNoLeader
	}
	for _, a := range call.st.Alarms {
		if a.Alarm == pb.AlarmType_NOSPACE {
			return nil, rpctypes.ErrGRPCNoSpace
		}
	}
	return k.UnimplementedKVServer.Put(ctx, req)
}
