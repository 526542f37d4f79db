//go:build linux

package azure

import "github.com/coreos/go-iptables/iptables"

// newSystemIPTables drives the host's iptables (or ip6tables) binary.
func newSystemIPTables(ipv6 bool) (IPTables, error) {
	proto := iptables.ProtocolIPv4
	if ipv6 {
		proto = iptables.ProtocolIPv6
	}
	return iptables.NewWithProtocol(proto)
}
