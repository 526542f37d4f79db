package simulate

import "time"

// Hooks for the package's external tests.

// SetPodGCQuarantine shortens the pod garbage collector's quarantine of unknown nodes for the
// clusters started afterwards.
func (s *Simulator) SetPodGCQuarantine(d time.Duration) { s.podGCQuarantine = d }

// ForgetLeaseRenewal makes the next read of a cluster's node leases renew them, as if the last
// renewal pass were long ago.
func (s *Simulator) ForgetLeaseRenewal(cluster string) {
	s.mu.Lock()
	cl := s.clusters[cluster]
	s.mu.Unlock()
	for _, ctrl := range cl.controllers {
		if nl, ok := ctrl.(*nodeLeases); ok {
			nl.renewedAt.Store(0)
		}
	}
}

// SetPodFailureBackoff sets the first delay of the Job controller's pod failure back-off and of
// the kubelets' crash-loop back-off.
func (s *Simulator) SetPodFailureBackoff(d time.Duration) { s.podFailureBackoff.Store(int64(d)) }

// SetForceDetachTimeout shortens the attach/detach controller's wait for a not-Ready node to
// unmount a volume before it detaches it anyway.
func (s *Simulator) SetForceDetachTimeout(d time.Duration) { s.forceDetachTimeout.Store(int64(d)) }
