package etcd_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/etcd"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/etcd/etcdtest"
)

// etcdctlBinary finds the etcdctl that hack/envtest.sh builds.
func etcdctlBinary(t *testing.T) string {
	t.Helper()
	dirs := []string{os.Getenv("KUBEBUILDER_ASSETS")}
	if home, err := os.UserCacheDir(); err == nil {
		dirs = append(dirs, filepath.Join(home, "goofy", "envtest", "k8s-v1.36.3-etcd-v3.6.14"))
	}
	for _, d := range dirs {
		if d == "" {
			continue
		}
		if p := filepath.Join(d, "etcdctl"); fileExists(p) {
			return p
		}
	}
	t.Skip("etcdctl not found in KUBEBUILDER_ASSETS or the envtest cache; run hack/envtest.sh")
	return ""
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

// The real etcdctl against the fake etcd, one endpoint per member as after
// `kubectl port-forward pod/etcd-<node>`: the connection says which member
// answers (ServeMember), not the TLS server name, which is just 127.0.0.1.
func TestEtcdctl(t *testing.T) {
	bin := etcdctlBinary(t)
	g := NewWithT(t)
	s, err := etcd.NewServer(t.Context(), fake.NewClientBuilder().Build(), cluster)
	g.Expect(err).NotTo(HaveOccurred())
	pki := etcdtest.NewPKI(t)
	endpoints := map[string]string{}
	for _, p := range []string{"etcd-a", "etcd-b"} {
		_, err := s.AddMember(t.Context(), p)
		g.Expect(err).NotTo(HaveOccurred())
		endpoints[p] = "https://" + etcdtest.ServeMember(t, s, pki, p)
	}
	ca, cert, key := pki.WriteClientFiles(t, t.TempDir())
	etcdctl := func(endpoints []string, args ...string) []byte {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), bin, append([]string{
			"--endpoints=" + strings.Join(endpoints, ","), "--cacert=" + ca, "--cert=" + cert, "--key=" + key,
			"--dial-timeout=5s", "--command-timeout=10s",
		}, args...)...)
		out, err := cmd.CombinedOutput()
		g.Expect(err).NotTo(HaveOccurred(), "etcdctl %v: %s", args, out)
		return out
	}
	both := []string{endpoints["etcd-a"], endpoints["etcd-b"]}

	var list struct {
		Header struct {
			MemberID uint64 `json:"member_id"`
		} `json:"header"`
		Members []struct {
			ID   uint64 `json:"ID"`
			Name string `json:"name"`
		} `json:"members"`
	}
	g.Expect(json.Unmarshal(etcdctl(both[1:], "member", "list", "-w", "json"), &list)).To(Succeed())
	g.Expect(list.Members).To(HaveLen(2))
	g.Expect(list.Header.MemberID).To(Equal(id("b")))

	var status []struct {
		Endpoint string
		Status   struct {
			Header struct {
				MemberID uint64 `json:"member_id"`
			} `json:"header"`
			Version string `json:"version"`
			Leader  uint64 `json:"leader"`
		}
	}
	g.Expect(json.Unmarshal(etcdctl(both, "endpoint", "status", "-w", "json"), &status)).To(Succeed())
	g.Expect(status).To(HaveLen(2))
	for _, st := range status {
		g.Expect(st.Status.Header.MemberID).To(Equal(map[string]uint64{endpoints["etcd-a"]: id("a"), endpoints["etcd-b"]: id("b")}[st.Endpoint]))
		g.Expect(st.Status.Leader).To(Equal(id("a")))
		g.Expect(st.Status.Version).To(HavePrefix("3.6."))
	}

	g.Expect(string(etcdctl(both, "endpoint", "health"))).To(ContainSubstring("is healthy"))

	// move-leader finds the leader by comparing each endpoint's header with
	// the leader it reports, then asks it.
	out := etcdctl(both, "move-leader", fmt.Sprintf("%x", id("b")))
	g.Expect(string(out)).To(ContainSubstring("Leadership transferred"))
	g.Expect(s.Leader()).To(Equal("etcd-b"))

	g.Expect(strings.TrimSpace(string(etcdctl(both[:1], "alarm", "list")))).To(BeEmpty())
}
