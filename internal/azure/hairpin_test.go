package azure

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
	. "github.com/onsi/gomega"
)

// recordingIPTables is an in-memory iptables: it keeps each table/chain's rules, records the
// calls, and fails the call named in failOn.
type recordingIPTables struct {
	rules  map[string][]string // "table/chain" -> rules
	calls  []string
	failOn string
}

func newRecordingIPTables() *recordingIPTables {
	// The built-in chains exist already and may hold other software's rules.
	return &recordingIPTables{rules: map[string][]string{
		"nat/PREROUTING": {"-j KUBE-SERVICES"},
		"nat/OUTPUT":     {"-j KUBE-SERVICES"},
	}}
}

func (r *recordingIPTables) record(method, table, chain string, spec []string) error {
	r.calls = append(r.calls, strings.TrimSpace(fmt.Sprintf("%s %s/%s %s", method, table, chain, strings.Join(spec, " "))))
	if method == r.failOn {
		return errors.New("iptables: exit status 4: Another app is currently holding the xtables lock")
	}
	return nil
}

func (r *recordingIPTables) ClearChain(table, chain string) error {
	if err := r.record("ClearChain", table, chain, nil); err != nil {
		return err
	}
	r.rules[table+"/"+chain] = []string{}
	return nil
}

func (r *recordingIPTables) Append(table, chain string, spec ...string) error {
	if err := r.record("Append", table, chain, spec); err != nil {
		return err
	}
	key := table + "/" + chain
	if _, ok := r.rules[key]; !ok {
		return fmt.Errorf("iptables: chain %s does not exist", key)
	}
	r.rules[key] = append(r.rules[key], strings.Join(spec, " "))
	return nil
}

func (r *recordingIPTables) AppendUnique(table, chain string, spec ...string) error {
	if err := r.record("AppendUnique", table, chain, spec); err != nil {
		return err
	}
	key := table + "/" + chain
	if _, ok := r.rules[key]; !ok {
		return fmt.Errorf("iptables: chain %s does not exist", key)
	}
	if !slices.Contains(r.rules[key], strings.Join(spec, " ")) {
		r.rules[key] = append(r.rules[key], strings.Join(spec, " "))
	}
	return nil
}

// hairpinEnv is a node (IMDS with the given role) of a cluster with the given load balancer.
func hairpinEnv(t *testing.T, role string, lb *armnetwork.LoadBalancer, ipt IPTables) (testEnv, *fakeAzure) {
	t.Helper()
	f := &fakeAzure{}
	f.serveLoadBalancers([]*armnetwork.LoadBalancer{lb})
	f.servePublicIPs(map[string]*string{"Public-IPs/api-pip": to.Ptr("203.0.113.7")})
	srv := newIMDSServer(t, imdsDoc(selfVMID, "cp-0", "", clusterTags(role), "10.0.0.4"))
	return newTestCloud(t, f, func(c *Config) { c.IMDS = testIMDS(srv); c.IPTables = ipt }, nil), f
}

var wantHairpin = map[string][]string{
	"nat/PREROUTING":       {"-j KUBE-SERVICES", "-j GOOFY-LB-HAIRPIN"},
	"nat/OUTPUT":           {"-j KUBE-SERVICES", "-j GOOFY-LB-HAIRPIN"},
	"nat/GOOFY-LB-HAIRPIN": {"-p tcp -d 10.0.0.100 --dport 6443 -j REDIRECT"},
}

func TestPrepareControlPlaneNodeBehindInternalLB(t *testing.T) {
	g := NewWithT(t)
	ipt := newRecordingIPTables()
	env, f := hairpinEnv(t, "control-plane", internalLB("api-lb", testUID, "10.0.0.100"), ipt)

	g.Expect(env.cloud.PrepareControlPlaneNode(context.Background(), nil)).To(Succeed())
	g.Expect(ipt.rules).To(Equal(wantHairpin))
	g.Expect(env.logs.String()).To(ContainSubstring("redirecting the internal load balancer's API server address to this node"))

	// Idempotent: a second run leaves the same rules.
	g.Expect(env.cloud.PrepareControlPlaneNode(context.Background(), nil)).To(Succeed())
	g.Expect(ipt.rules).To(Equal(wantHairpin))

	// A changed load-balancer IP replaces the old rule instead of adding to it.
	f.serveLoadBalancers([]*armnetwork.LoadBalancer{internalLB("api-lb", testUID, "10.0.0.101")})
	g.Expect(env.cloud.PrepareControlPlaneNode(context.Background(), nil)).To(Succeed())
	g.Expect(ipt.rules["nat/GOOFY-LB-HAIRPIN"]).To(Equal([]string{"-p tcp -d 10.0.0.101 --dport 6443 -j REDIRECT"}))
	g.Expect(ipt.rules["nat/OUTPUT"]).To(Equal(wantHairpin["nat/OUTPUT"]))
}

func TestPrepareControlPlaneNodeIPv6(t *testing.T) {
	g := NewWithT(t)
	ipt := newRecordingIPTables()
	env, _ := hairpinEnv(t, "control-plane", internalLB("api-lb", testUID, "fd00::100"), ipt)
	g.Expect(env.cloud.PrepareControlPlaneNode(context.Background(), nil)).To(Succeed())
	g.Expect(ipt.rules["nat/GOOFY-LB-HAIRPIN"]).To(Equal([]string{"-p tcp -d fd00::100 --dport 6443 -j REDIRECT"}))
}

func TestPrepareControlPlaneNodeSkips(t *testing.T) {
	for name, tc := range map[string]struct {
		role    string
		lb      *armnetwork.LoadBalancer
		wantLog string
	}{
		"worker":    {role: "worker", lb: internalLB("api-lb", testUID, "10.0.0.100"), wantLog: "not a control-plane node"},
		"public LB": {role: "control-plane", lb: publicLB("api-lb", testUID, pipID), wantLog: "load balancer is public; no hairpin rule needed"},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			ipt := newRecordingIPTables()
			before := maps.Clone(ipt.rules)
			env, _ := hairpinEnv(t, tc.role, tc.lb, ipt)
			g.Expect(env.cloud.PrepareControlPlaneNode(context.Background(), env.cloud.log)).To(Succeed())
			g.Expect(ipt.calls).To(BeEmpty())
			g.Expect(ipt.rules).To(Equal(before))
			g.Expect(env.logs.String()).To(ContainSubstring(tc.wantLog))
		})
	}
}

func TestPrepareControlPlaneNodeFailures(t *testing.T) {
	for _, method := range []string{"ClearChain", "Append", "AppendUnique"} {
		t.Run("iptables "+method+" fails", func(t *testing.T) {
			g := NewWithT(t)
			ipt := newRecordingIPTables()
			ipt.failOn = method
			env, _ := hairpinEnv(t, "control-plane", internalLB("api-lb", testUID, "10.0.0.100"), ipt)
			err := env.cloud.PrepareControlPlaneNode(context.Background(), nil)
			g.Expect(err).To(MatchError(ContainSubstring("hairpin rule")))
			g.Expect(err).To(MatchError(ContainSubstring("xtables lock")))
		})
	}
	t.Run("no load balancer", func(t *testing.T) {
		g := NewWithT(t)
		ipt := newRecordingIPTables()
		env, _ := hairpinEnv(t, "control-plane", internalLB("other", "someone-else", "10.0.0.100"), ipt)
		g.Expect(env.cloud.PrepareControlPlaneNode(context.Background(), nil)).To(MatchError(ContainSubstring("no load balancer")))
		g.Expect(ipt.calls).To(BeEmpty())
	})
	t.Run("bad load-balancer IP", func(t *testing.T) {
		g := NewWithT(t)
		ipt := newRecordingIPTables()
		env, _ := hairpinEnv(t, "control-plane", internalLB("api-lb", testUID, "10.0.0.300"), ipt)
		g.Expect(env.cloud.PrepareControlPlaneNode(context.Background(), nil)).To(MatchError(ContainSubstring(`bad private IP "10.0.0.300"`)))
		g.Expect(ipt.calls).To(BeEmpty())
	})
	t.Run("IMDS fails", func(t *testing.T) {
		g := NewWithT(t)
		ipt := newRecordingIPTables()
		srv := newIMDSServer(t, nil)
		srv.Close()
		env := newTestCloud(t, &fakeAzure{}, func(c *Config) { c.IMDS = testIMDS(srv); c.IPTables = ipt }, nil)
		g.Expect(env.cloud.PrepareControlPlaneNode(context.Background(), nil)).To(MatchError(ContainSubstring("self: IMDS")))
		g.Expect(ipt.calls).To(BeEmpty())
	})
}
