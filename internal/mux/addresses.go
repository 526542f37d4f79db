package mux

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// Listener addresses (WithListenerAddresses): a port range holds as many listeners as it has
// ports, on one address. Spreading the listeners over several addresses, each with the whole
// range, multiplies that: 8 loopback addresses with the default range hold 80,000 listeners, and
// a range kept below the kernel's ephemeral ports (ip_local_port_range) needs no outgoing
// connection's port.

// MaxListenerAddresses bounds how many listener addresses a mux takes (a /20 of IPv4).
const MaxListenerAddresses = 4096

// endpoint is what a listener binds: a port on one of the listener addresses, or on the one bind
// address (addr empty) without them.
type endpoint struct {
	addr string
	port int
}

// ParseListenerAddresses reads a comma-separated list of listener addresses (the manager's
// --listener-addresses), each an IP address ("127.0.0.2"), an inclusive range of them
// ("127.0.0.1-127.0.0.8"), or a CIDR prefix ("127.0.0.0/29": its addresses but, for IPv4
// prefixes of /30 and wider, the network and broadcast ones). The result keeps the order given,
// without duplicates, at most MaxListenerAddresses.
func ParseListenerAddresses(spec string) ([]string, error) {
	var out []string
	seen := map[netip.Addr]bool{}
	add := func(a netip.Addr) error {
		a = a.Unmap()
		if a.IsUnspecified() {
			return fmt.Errorf("listener address %s: an unspecified address would take the port on every address", a)
		}
		if seen[a] {
			return nil
		}
		if len(out) == MaxListenerAddresses {
			return fmt.Errorf("listener addresses %q: more than %d addresses", spec, MaxListenerAddresses)
		}
		seen[a] = true
		out = append(out, a.String())
		return nil
	}
	for item := range strings.SplitSeq(spec, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		var err error
		switch {
		case strings.Contains(item, "/"):
			err = addPrefix(item, add)
		case strings.Contains(item, "-"):
			err = addRange(item, add)
		default:
			var a netip.Addr
			if a, err = netip.ParseAddr(item); err == nil {
				err = add(a)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("listener addresses %q: %w", spec, err)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("listener addresses %q: no address", spec)
	}
	return out, nil
}

func addRange(item string, add func(netip.Addr) error) error {
	lo, hi, _ := strings.Cut(item, "-")
	first, err1 := netip.ParseAddr(strings.TrimSpace(lo))
	last, err2 := netip.ParseAddr(strings.TrimSpace(hi))
	if err := errors.Join(err1, err2); err != nil {
		return err
	}
	first, last = first.Unmap(), last.Unmap()
	if first.BitLen() != last.BitLen() || last.Less(first) {
		return fmt.Errorf("range %s: want FIRST-LAST of one family, FIRST not after LAST", item)
	}
	for a := first; ; a = a.Next() {
		if err := add(a); err != nil {
			return err
		}
		if a == last {
			return nil
		}
	}
}

func addPrefix(item string, add func(netip.Addr) error) error {
	p, err := netip.ParsePrefix(item)
	if err != nil {
		return err
	}
	p = p.Masked()
	hostBits := p.Addr().BitLen() - p.Bits()
	if hostBits > 12 {
		return fmt.Errorf("prefix %s: more than %d addresses", item, MaxListenerAddresses)
	}
	n := 1 << hostBits
	a := p.Addr()
	skipEnds := p.Addr().Is4() && hostBits >= 2
	for i := range n {
		if !(skipEnds && (i == 0 || i == n-1)) {
			if err := add(a); err != nil {
				return err
			}
		}
		a = a.Next()
	}
	return nil
}

// canonicalAddresses checks WithListenerAddresses' addresses: IP addresses, not unspecified, no
// duplicates; returned in their canonical form, which endpoints and records use.
func canonicalAddresses(addrs []string) ([]string, error) {
	if len(addrs) > MaxListenerAddresses {
		return nil, fmt.Errorf("more than %d listener addresses", MaxListenerAddresses)
	}
	out := make([]string, 0, len(addrs))
	seen := map[string]bool{}
	for _, s := range addrs {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("listener address %q: %w", s, err)
		}
		a = a.Unmap()
		if a.IsUnspecified() || a.Zone() != "" {
			return nil, fmt.Errorf("listener address %q: want a unicast address without zone", s)
		}
		if seen[a.String()] {
			return nil, fmt.Errorf("listener address %s given twice", a)
		}
		seen[a.String()] = true
		out = append(out, a.String())
	}
	return out, nil
}

// addrOf is the listener address a host names, in the form endpoints use (canonical), and ""
// for any other host: without listener addresses (there is one bind address, whatever host the
// endpoint advertises), and with them for a host that is not one of them (empty, a name, an
// address the manager no longer listens on). "" means unspecified: resolve takes the address of
// the cluster's record, else the first, and the reconciler moves the endpoint's host to the
// listener's, as it does when the advertised host changes.
func (m *WorkloadClustersMux) addrOf(host string) string {
	if len(m.addresses) == 0 || host == "" {
		return ""
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if s := a.Unmap().String(); m.isAddress[s] {
			return s
		}
	}
	return ""
}

// defaultAddr is addrOf with unspecified as the first address (for comparing endpoints that no
// record resolves).
func (m *WorkloadClustersMux) defaultAddr(host string) string {
	if a := m.addrOf(host); a != "" || len(m.addresses) == 0 {
		return a
	}
	return m.addresses[0]
}

// resolve is the endpoint a claim of port on addr (empty: unspecified) means for wclName: with
// listener addresses and no address given, the address of the cluster's record on that port,
// else the first address. m.mu is held.
func (m *WorkloadClustersMux) resolve(wclName, addr string, port int) endpoint {
	if len(m.addresses) == 0 || addr != "" {
		return endpoint{addr: addr, port: port}
	}
	if rec, ok := m.records[wclName]; ok && rec.Port == port {
		return rec.endpoint()
	}
	return endpoint{addr: m.addresses[0], port: port}
}

// slots is the size of the address × port space.
func (m *WorkloadClustersMux) slots() int {
	return max(len(m.addresses), 1) * (m.portMax - m.portMin + 1)
}

// slot is the endpoint at index i of the address × port space, address by address.
func (m *WorkloadClustersMux) slot(i int) endpoint {
	size := m.portMax - m.portMin + 1
	ep := endpoint{port: m.portMin + i%size}
	if len(m.addresses) > 0 {
		ep.addr = m.addresses[i/size]
	}
	return ep
}

// bindAddr is the address ep's listener binds to.
func (m *WorkloadClustersMux) bindAddr(ep endpoint) string {
	if ep.addr != "" {
		return ep.addr
	}
	return m.bindAddress
}

// advertised is the host ep's listener advertises: its address, else the mux's host.
func (m *WorkloadClustersMux) advertised(ep endpoint) string {
	if ep.addr != "" {
		return ep.addr
	}
	return m.host
}

// describe names ep in messages: "port N" with one bind address, host:port with several.
func (m *WorkloadClustersMux) describe(ep endpoint) string {
	if ep.addr == "" {
		return "port " + strconv.Itoa(ep.port)
	}
	return net.JoinHostPort(ep.addr, strconv.Itoa(ep.port))
}
