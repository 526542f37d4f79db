package azure

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/azure/metadata"
)

// HairpinChain is the nat-table chain PrepareControlPlaneNode owns.
const HairpinChain = "GOOFY-LB-HAIRPIN"

// IPTables is the slice of github.com/coreos/go-iptables' *iptables.IPTables that
// PrepareControlPlaneNode uses.
type IPTables interface {
	// ClearChain empties a chain, creating it if it does not exist.
	ClearChain(table, chain string) error
	// Append adds a rule at the end of a chain.
	Append(table, chain string, rulespec ...string) error
	// AppendUnique adds a rule at the end of a chain unless it is already there.
	AppendUnique(table, chain string, rulespec ...string) error
}

// PrepareControlPlaneNode works around Azure's internal load balancers, which do not hairpin: a
// backend VM cannot reach itself through the load balancer's private IP, so `kubeadm init` (and
// kubelet, before the first API server is healthy behind the balancer) would hang. On a
// control-plane node behind an internal load balancer it installs, in the nat table, a chain that
// REDIRECTs tcp traffic for the load balancer's private IP, port 6443, to the node itself, and
// jumps to it from PREROUTING and OUTPUT. Re-running rewrites the chain, so it is idempotent and
// follows a changed load-balancer IP. Workers and nodes behind a public load balancer are left
// alone. Off Linux (without an injected IPTables) it returns an error.
func (c *Cloud) PrepareControlPlaneNode(ctx context.Context, log *slog.Logger) error {
	if log == nil {
		log = c.log
	}
	self, err := c.Self(ctx)
	if err != nil {
		return err
	}
	if self.Role != metadata.RoleControlPlane {
		log.Info("not a control-plane node; no load-balancer hairpin rule needed", "role", self.Role)
		return nil
	}
	fe, err := c.loadBalancerFrontend(ctx)
	if err != nil {
		return err
	}
	if fe.publicIP != "" {
		log.Info("load balancer is public; no hairpin rule needed", "loadBalancer", fe.lbName, "publicIP", fe.publicIP)
		return nil
	}
	addr, err := netip.ParseAddr(fe.privateIP)
	if err != nil {
		return fmt.Errorf("azure: load balancer %s has a bad private IP %q: %w", fe.lbName, fe.privateIP, err)
	}
	ipt := c.ipt
	if ipt == nil {
		if ipt, err = newSystemIPTables(addr.Is6()); err != nil {
			return fmt.Errorf("azure: hairpin rule: %w", err)
		}
	}
	steps := []struct {
		what string
		do   func() error
	}{
		{"create or flush chain " + HairpinChain, func() error { return ipt.ClearChain("nat", HairpinChain) }},
		{"add the redirect rule", func() error {
			return ipt.Append("nat", HairpinChain, "-p", "tcp", "-d", addr.String(), "--dport", APIServerPort, "-j", "REDIRECT")
		}},
		{"jump from PREROUTING", func() error { return ipt.AppendUnique("nat", "PREROUTING", "-j", HairpinChain) }},
		{"jump from OUTPUT", func() error { return ipt.AppendUnique("nat", "OUTPUT", "-j", HairpinChain) }},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			return fmt.Errorf("azure: hairpin rule: %s: %w", s.what, err)
		}
	}
	log.Info("redirecting the internal load balancer's API server address to this node",
		"loadBalancer", fe.lbName, "address", addr.String(), "port", APIServerPort, "chain", HairpinChain)
	return nil
}
