package etcd

import (
	"context"
	"fmt"
	"hash/fnv"
	"strings"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// PodNamePrefix is the prefix kubeadm gives the etcd static pod: etcd-<node>.
const PodNamePrefix = "etcd-"

// MemberNameForPod returns the etcd member name for an etcd pod name
// (etcd-<node> -> <node>), or an error if the name is not an etcd pod name.
func MemberNameForPod(podName string) (string, error) {
	name, ok := strings.CutPrefix(podName, PodNamePrefix)
	if !ok || name == "" {
		return "", fmt.Errorf("%q is not an etcd pod name (want %s<node>)", podName, PodNamePrefix)
	}
	return name, nil
}

// PodNameForMember is the inverse of MemberNameForPod.
func PodNameForMember(memberName string) string { return PodNamePrefix + memberName }

// ClusterIDFor derives the etcd cluster ID from the workload cluster name, so it
// is the same in every process that simulates the cluster.
func ClusterIDFor(clusterName string) uint64 {
	return nonZeroHash("cluster", clusterName)
}

// MemberIDFor derives the ID of an etcd member from the cluster and member name
// (the node name). Real etcd picks random IDs; a hash keeps them stable across
// restarts and re-creations while still being unique in practice.
func MemberIDFor(clusterName, memberName string) uint64 {
	return nonZeroHash("member", clusterName, memberName)
}

// nonZeroHash is FNV-64a over the parts, never 0 because etcd uses 0 for "none".
func nonZeroHash(parts ...string) uint64 {
	h := fnv.New64a()
	for _, p := range parts {
		// The separator keeps ("ab","c") and ("a","bc") apart.
		_, _ = h.Write([]byte(p))
		_, _ = h.Write([]byte{0})
	}
	if v := h.Sum64(); v != 0 {
		return v
	}
	return 1
}

type (
	memberKey struct{}
	serverKey struct{}
)

// ContextWithServer marks ctx as a call for the etcd cluster s, for the services of
// RegisterRouted. The mux sets it when it routes a connection to this package.
func ContextWithServer(ctx context.Context, s *Server) context.Context {
	return context.WithValue(ctx, serverKey{}, s)
}

func serverFromContext(ctx context.Context) *Server {
	s, _ := ctx.Value(serverKey{}).(*Server)
	return s
}

// ContextWithMember marks ctx as a call for the member running in the etcd pod
// podName (etcd-<node>), typically the TLS server name the client dialed. The
// mux sets it when it routes a connection to this package.
func ContextWithMember(ctx context.Context, podName string) context.Context {
	return context.WithValue(ctx, memberKey{}, podName)
}

// podNameFromContext returns the pod a call is addressed to: the explicit value
// from ContextWithMember, else the SNI of the TLS connection the call came on
// (grpc puts credentials.TLSInfo in the peer both for its own TLS listener and
// for ServeHTTP over a TLS http.Server).
func podNameFromContext(ctx context.Context) (string, bool) {
	if v, ok := ctx.Value(memberKey{}).(string); ok && v != "" {
		return v, true
	}
	p, ok := peer.FromContext(ctx)
	if !ok {
		return "", false
	}
	if info, ok := p.AuthInfo.(credentials.TLSInfo); ok && info.State.ServerName != "" {
		return info.State.ServerName, true
	}
	return "", false
}
