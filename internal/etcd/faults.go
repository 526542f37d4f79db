package etcd

import (
	"context"
	"math/rand/v2"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Latency is an injected delay: Base plus a uniform random share of it up to Jitter.
type Latency struct {
	Base   time.Duration
	Jitter float64
}

// Draw returns one delay.
func (l Latency) Draw() time.Duration {
	if l.Base <= 0 {
		return 0
	}
	if l.Jitter <= 0 {
		return l.Base
	}
	return l.Base + time.Duration(float64(l.Base)*l.Jitter*rand.Float64())
}

// Sleep waits one drawn delay or until ctx ends.
func (l Latency) Sleep(ctx context.Context) error {
	d := l.Draw()
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Faults are the faults of a whole simulated etcd cluster (SetFaults). Leaderless is kept in the
// persisted state instead (SetLeaderless): a restart must not hand the cluster a leader.
type Faults struct {
	Latency Latency
	// Alarm is raised on every started member; AlarmType_NONE for none.
	Alarm pb.AlarmType
}

// SetFaults replaces the injected faults; nil removes them. Calls check them through one atomic
// load, so an etcd without faults pays nothing else.
func (s *Server) SetFaults(f *Faults) {
	if f != nil && *f == (Faults{}) {
		f = nil
	}
	s.faults.Store(f)
}

// SetMemberUnhealthy makes every call addressed to the member of pod podName fail (or answer
// again), as calls to a member whose health check fails.
func (s *Server) SetMemberUnhealthy(podName string, unhealthy bool) error {
	name, err := MemberNameForPod(podName)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if unhealthy {
		s.unhealthy[name] = true
	} else {
		delete(s.unhealthy, name)
	}
	return nil
}

// SetLeaderless makes the cluster lose its leader (every member answers as etcd does without
// one) or, when cleared, elect one again with a higher raft term. The state is persisted.
func (s *Server) SetLeaderless(ctx context.Context, leaderless bool) error {
	return s.update(ctx, func(st *state) (bool, error) {
		if st.Leaderless == leaderless {
			return false, nil
		}
		st.Leaderless = leaderless
		if leaderless {
			st.Leader = 0
			st.Term++ // the members campaign: the term moves on even without a winner
			return true, nil
		}
		st.electIfLeaderless()
		return true, nil
	})
}

// Leaderless reports whether the leaderless fault holds.
func (s *Server) Leaderless() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.Leaderless
}

// errUnhealthy is what a call to an unhealthy member gets.
func errUnhealthy(name string) error {
	return status.Errorf(codes.Unavailable, "etcdserver: member %s is unhealthy: its health check fails", name)
}

// withAlarm adds alarm a on every started member of st.
func withAlarm(st *state, a pb.AlarmType) {
	for _, m := range st.sorted() {
		if m.Name == "" {
			continue
		}
		if as := (alarmState{MemberID: m.ID, Alarm: a}); !st.hasAlarm(as) {
			st.Alarms = append(st.Alarms, as)
		}
	}
}
