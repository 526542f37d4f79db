package etcd_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	kcpetcd "sigs.k8s.io/cluster-api/controlplane/kubeadm/pkg/etcd"
	etcdutil "sigs.k8s.io/cluster-api/controlplane/kubeadm/pkg/etcd/util"
)

// kcpClient builds KCP's etcd client the way its NewClient does after dialing
// (Status of the endpoint gives the leader), over a clientv3 client to pod.
// The port-forward leg of NewClient is covered in internal/portforward.
func (e *env) kcpClient(pod string) *kcpetcd.Client {
	e.t.Helper()
	cli := e.client(pod)
	st, err := cli.Status(ctx(e.t), pod)
	if err != nil {
		e.t.Fatal(err)
	}
	return &kcpetcd.Client{EtcdClient: cli, Endpoint: pod, LeaderID: st.Leader, CallTimeout: 5 * time.Second}
}

// The calls KCP makes when it checks health and scales the control plane down.
func TestKCPEtcdClient(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t, "etcd-a", "etcd-b", "etcd-c")

	a := e.kcpClient("etcd-a")
	g.Expect(a.LeaderID).To(Equal(id("a")))
	members, err := a.Members(ctx(t))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(etcdutil.MemberNames(members)).To(ConsistOf("a", "b", "c"))
	for _, m := range members {
		g.Expect(m.ClusterID).To(Equal(e.server.ClusterID()))
		g.Expect(m.ID).NotTo(BeZero())
	}

	// KCP moves leadership off the machine it deletes, asking the leader.
	g.Expect(e.kcpClient("etcd-b").MoveLeader(ctx(t), id("c"))).To(MatchError(ContainSubstring("not leader")))
	g.Expect(a.MoveLeader(ctx(t), etcdutil.MemberForName(members, "b").ID)).To(Succeed())
	g.Expect(e.kcpClient("etcd-c").LeaderID).To(Equal(id("b")))

	g.Expect(a.RemoveMember(ctx(t), id("a"))).To(Succeed())
	members, err = e.kcpClient("etcd-b").Members(ctx(t))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(etcdutil.MemberNames(members)).To(ConsistOf("b", "c"))

	alarms, err := e.kcpClient("etcd-b").Alarms(ctx(t))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(alarms).To(BeEmpty())
	_, err = pb.NewMaintenanceClient(e.client("etcd-b").ActiveConnection()).Alarm(ctx(t), &pb.AlarmRequest{Action: pb.AlarmRequest_ACTIVATE, MemberID: id("c"), Alarm: pb.AlarmType_CORRUPT})
	g.Expect(err).NotTo(HaveOccurred())
	alarms, err = e.kcpClient("etcd-b").Alarms(ctx(t))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(alarms).To(ConsistOf(kcpetcd.MemberAlarm{MemberID: id("c"), Type: kcpetcd.AlarmCorrupt}))
}
