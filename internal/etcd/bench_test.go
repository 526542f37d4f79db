package etcd_test

import (
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/etcd"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/etcd/etcdtest"
)

// BenchmarkMemberListDirect is the baseline for the port-forward benchmark in
// internal/portforward: clientv3 over TLS straight to the fake etcd.
func BenchmarkMemberListDirect(b *testing.B) {
	s, err := etcd.NewServer(b.Context(), fake.NewClientBuilder().Build(), cluster)
	if err != nil {
		b.Fatal(err)
	}
	for _, p := range []string{"etcd-a", "etcd-b", "etcd-c"} {
		if _, err := s.AddMember(b.Context(), p); err != nil {
			b.Fatal(err)
		}
	}
	pki := etcdtest.NewPKI(b, "etcd-a")
	e := &env{t: nil, server: s, pki: pki, addr: etcdtest.Serve(b, s, pki)}
	cli := e.clientTB(b, "etcd-a")
	b.ResetTimer()
	for range b.N {
		if _, err := cli.MemberList(b.Context()); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "roundtrips/s")
}
