// Package etcd serves the etcd gRPC API (Cluster, Maintenance and the part of KV
// that health checks use) for one simulated workload cluster.
//
// A real control plane runs one etcd member per control-plane node, in the static
// pod kube-system/etcd-<node>; kubeadm names the member after the node. KCP reaches
// a member by port-forwarding to that pod and dialing TLS with SNI etcd-<node>, so
// every call is answered by one specific member. This package keeps one Server per
// workload cluster holding the membership, the leader and the alarms; the caller
// (the mux) tells the Server which member a call is for, either explicitly with
// ContextWithMember or implicitly through the TLS server name that grpc records
// in the peer of the call. A process serving many clusters registers the services
// once (RegisterRouted) and names each call's Server with ContextWithServer.
//
// The API of Server speaks in pod names (etcd-<node>), like the mux does; the
// etcd member names reported to clients are the node names, as kubeadm makes them.
//
// Membership changes over gRPC (MemberAdd, MemberRemove, MemberPromote) pass etcd's strict
// reconfiguration check, on by default in etcd: a change that would leave too few started or
// connected voting members for a quorum is refused with etcd's own errors (reconfig.go).
//
// The state that must outlive the process (members, their IDs, the leader, the
// raft term and the alarms) is written through to a ConfigMap in the workload
// cluster's own store, so a Server rebuilt after a restart answers exactly as
// before.
package etcd
