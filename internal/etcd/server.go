package etcd

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Member is one etcd member as the mux sees it.
type Member struct {
	// Name is the etcd member name (the node name); empty for a member that was
	// added through MemberAdd and has not been started by AddMember yet.
	Name string
	// PodName is the etcd static pod, etcd-<Name>; empty when Name is.
	PodName    string
	ID         uint64
	PeerURLs   []string
	ClientURLs []string
	IsLearner  bool
}

const (
	// Values reported by Status; a simulated member has a small, constant database.
	defaultDBSize      int64 = 4 << 20
	defaultDBSizeInUse int64 = 2 << 20
	defaultDBQuota     int64 = 2 << 30 // etcd's default --quota-backend-bytes
	// revision is the KV revision in every header: the fake etcd has no keys, and
	// a fresh etcd starts at revision 1.
	revision int64 = 1
)

// Server is the etcd of one simulated workload cluster: every member of it.
// It is safe for concurrent use.
type Server struct {
	clusterName string
	clusterID   uint64
	store       *stateStore

	mu sync.Mutex
	st state
	// dbSize is per member and not persisted: it only moves with Defragment.
	dbSize map[uint64]int64
	// unhealthy are the member names whose calls fail (SetMemberUnhealthy).
	unhealthy map[string]bool

	// faults are the injected faults (SetFaults), nil when there are none.
	faults atomic.Pointer[Faults]
}

// NewServer returns the Server of clusterName, recovering members, leader, raft
// term and alarms from the workload cluster store c (see stateStore).
func NewServer(ctx context.Context, c client.Client, clusterName string) (*Server, error) {
	if c == nil {
		return nil, errors.New("etcd: a workload cluster client is required")
	}
	if clusterName == "" {
		return nil, errors.New("etcd: cluster name is required")
	}
	s := &Server{
		clusterName: clusterName,
		clusterID:   ClusterIDFor(clusterName),
		store:       &stateStore{c: c},
		dbSize:      map[uint64]int64{},
		unhealthy:   map[string]bool{},
	}
	st, err := s.store.load(ctx)
	if err != nil {
		return nil, fmt.Errorf("etcd: loading state of cluster %s: %w", clusterName, err)
	}
	s.st = st
	return s, nil
}

// Register adds the Cluster, Maintenance and KV services to g, answering as s.
func (s *Server) Register(g *grpc.Server) { register(g, target{s: s}) }

// RegisterRouted adds the Cluster, Maintenance and KV services to g, answering each call as the
// Server its context names (ContextWithServer): one grpc.Server serves the etcd of every cluster
// of a process, where a grpc.Server and its service tables per cluster cost about 2.5 KB each.
func RegisterRouted(g *grpc.Server) { register(g, target{}) }

func register(g *grpc.Server, t target) {
	pb.RegisterClusterServer(g, &clusterService{target: t})
	pb.RegisterMaintenanceServer(g, &maintenanceService{target: t})
	pb.RegisterKVServer(g, &kvService{target: t})
}

// ClusterID is the etcd cluster ID reported in every response header.
func (s *Server) ClusterID() uint64 { return s.clusterID }

// AddMember starts the member that runs in the etcd pod podName (etcd-<node>)
// and returns its ID. It is idempotent. A member announced before through
// MemberAdd with a peer URL on host <node> is started rather than duplicated.
// The first voting member becomes the leader.
func (s *Server) AddMember(ctx context.Context, podName string) (uint64, error) {
	name, err := MemberNameForPod(podName)
	if err != nil {
		return 0, err
	}
	var id uint64
	err = s.update(ctx, func(st *state) (bool, error) {
		if m := st.byName(name); m != nil {
			id = m.ID
			return false, nil
		}
		if m := st.unstartedFor(name); m != nil {
			m.Name = name
			m.ClientURLs = []string{clientURL(name)}
			id = m.ID
		} else {
			id = st.freeID(MemberIDFor(s.clusterName, name), s.clusterName, name)
			st.Members = append(st.Members, memberState{
				ID:         id,
				Name:       name,
				PeerURLs:   []string{peerURL(name)},
				ClientURLs: []string{clientURL(name)},
			})
		}
		st.electIfLeaderless()
		return true, nil
	})
	return id, err
}

// RemoveMember removes the member of pod podName; a missing member is not an
// error. Removing the leader elects another voting member.
func (s *Server) RemoveMember(ctx context.Context, podName string) error {
	name, err := MemberNameForPod(podName)
	if err != nil {
		return err
	}
	err = s.update(ctx, func(st *state) (bool, error) {
		m := st.byName(name)
		if m == nil {
			return false, nil
		}
		st.remove(m.ID)
		return true, nil
	})
	if err == nil {
		s.mu.Lock()
		delete(s.unhealthy, name)
		s.mu.Unlock()
	}
	return err
}

// HasMember reports whether the member of pod podName is started.
func (s *Server) HasMember(podName string) bool {
	name, err := MemberNameForPod(podName)
	if err != nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.byName(name) != nil
}

// Members returns all members ordered by ID, as MemberList does.
func (s *Server) Members() []Member {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Member, 0, len(s.st.Members))
	for _, m := range s.st.sorted() {
		out = append(out, m.export())
	}
	return out
}

// Leader returns the pod name of the leader, or "" when there is none.
func (s *Server) Leader() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m := s.st.byID(s.st.Leader); m != nil {
		return PodNameForMember(m.Name)
	}
	return ""
}

// RaftTerm is the current raft term; it grows with every leader change.
func (s *Server) RaftTerm() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.Term
}

// update applies fn to a copy of the state and, if fn changed it, persists the
// copy before making it current: a failed write leaves the Server unchanged.
func (s *Server) update(ctx context.Context, fn func(st *state) (changed bool, err error)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	next := s.st.clone()
	changed, err := fn(&next)
	if err != nil || !changed {
		return err
	}
	next.Index++
	if err := s.store.save(ctx, &next); err != nil {
		return fmt.Errorf("etcd: persisting state of cluster %s: %w", s.clusterName, err)
	}
	s.st = next
	return nil
}

// call is what every RPC starts with: a snapshot of the state and the member
// that answers. A call for a member that does not exist fails like a call to a
// member that is down.
type call struct {
	st     state
	member memberState
	header *pb.ResponseHeader
}

// leaderless reports whether the call finds no leader: the calls that need one fail.
func (c *call) leaderless() bool { return c.st.Leader == 0 }

func (s *Server) begin(ctx context.Context) (*call, error) {
	f := s.faults.Load()
	if f != nil {
		if err := f.Latency.Sleep(ctx); err != nil {
			return nil, status.FromContextError(err).Err()
		}
	}
	pod, ok := podNameFromContext(ctx)
	if !ok {
		return nil, status.Error(codes.Unavailable, "etcd: no member addressed (missing TLS server name)")
	}
	name, err := MemberNameForPod(pod)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "etcd: %v", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.st.byName(name)
	if m == nil {
		return nil, status.Errorf(codes.Unavailable, "etcd: member %s of cluster %s is not running", name, s.clusterName)
	}
	if s.unhealthy[name] {
		return nil, errUnhealthy(name)
	}
	c := &call{st: s.st.clone(), member: *m, header: s.header(&s.st, m.ID)}
	if f != nil && f.Alarm != pb.AlarmType_NONE {
		withAlarm(&c.st, f.Alarm)
	}
	return c, nil
}

func (s *Server) header(st *state, memberID uint64) *pb.ResponseHeader {
	return &pb.ResponseHeader{ClusterId: s.clusterID, MemberId: memberID, Revision: revision, RaftTerm: st.Term}
}

// mutate runs fn as a write answered by the member of c; errors from fn are etcd
// errors, a failure to persist is reported as a timed-out request.
func (s *Server) mutate(ctx context.Context, c *call, fn func(st *state) (bool, error)) (*call, error) {
	if c.leaderless() {
		// A proposal needs a leader.
		return nil, rpctypes.ErrGRPCNoLeader
	}
	err := s.update(ctx, fn)
	if err != nil {
		if _, ok := status.FromError(err); ok {
			return nil, err
		}
		return nil, rpctypes.ErrGRPCTimeout
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return &call{st: s.st.clone(), member: c.member, header: s.header(&s.st, c.member.ID)}, nil
}

func (s *Server) dbSizeOf(id uint64) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v, ok := s.dbSize[id]; ok {
		return v
	}
	return defaultDBSize
}

func (s *Server) defragment(id uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dbSize[id] = defaultDBSizeInUse
}

func peerURL(name string) string   { return "https://" + name + ":2380" }
func clientURL(name string) string { return "https://" + name + ":2379" }

// validURLs checks peer URLs the way etcd does: absolute http(s) URLs with a host.
func validURLs(urls []string) bool {
	if len(urls) == 0 {
		return false
	}
	for _, u := range urls {
		p, err := url.Parse(u)
		if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			return false
		}
	}
	return true
}

func toPB(members []memberState) []*pb.Member {
	out := make([]*pb.Member, 0, len(members))
	for _, m := range members {
		out = append(out, &pb.Member{
			ID:         m.ID,
			Name:       m.Name,
			PeerURLs:   slices.Clone(m.PeerURLs),
			ClientURLs: slices.Clone(m.ClientURLs),
			IsLearner:  m.IsLearner,
		})
	}
	return out
}
