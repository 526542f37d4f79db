// Package metadata holds the cloud-neutral description of one instance (VM) that the Azure backend
// discovers, so callers such as the controllers need not import the Azure SDK.
package metadata

import (
	"fmt"
	"strings"
)

// Role is the part an instance plays in a cluster.
type Role string

const (
	// RoleControlPlane marks a control-plane instance.
	RoleControlPlane Role = "control-plane"
	// RoleWorker marks a worker instance.
	RoleWorker Role = "worker"
)

// ParseRole turns a tag value into a Role. It accepts "control-plane", "controlplane" and "worker"
// in any letter case, because tags are typed by hand in portals and templates.
func ParseRole(s string) (Role, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "control-plane", "controlplane":
		return RoleControlPlane, nil
	case "worker":
		return RoleWorker, nil
	case "":
		return "", fmt.Errorf("empty role (want %q or %q)", RoleControlPlane, RoleWorker)
	default:
		return "", fmt.Errorf("unknown role %q (want %q or %q)", s, RoleControlPlane, RoleWorker)
	}
}

// InstanceMetadata describes one instance of a cluster.
type InstanceMetadata struct {
	// Name is the instance's host name (the OS computer name, lower-cased), which is also the name
	// its Kubernetes node gets.
	Name string
	// ProviderID is the Kubernetes provider ID: "azure://" + the ARM resource ID with the resource
	// group lower-cased, exactly as cloud-provider-azure writes it on the node.
	ProviderID string
	// Role is control-plane or worker, from the instance's role tag.
	Role Role
	// VPCIP is the private IP of the primary IP configuration of the primary network interface.
	VPCIP string
	// SecondaryIPRange is not used on Azure (there is no per-NIC secondary range); always empty.
	SecondaryIPRange string
	// AliasIPRanges are the private IPs of the primary NIC's other IP configurations as host
	// prefixes (a.b.c.d/32 or x::y/128), the addresses Azure CNI hands to pods.
	AliasIPRanges []string
	// Zone is the availability zone ("1", "2", "3"), empty for a regional instance.
	Zone string
}
