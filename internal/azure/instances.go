package azure

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/azure/metadata"
)

// nicLookups bounds the concurrent network-interface reads (listings or single NICs) of one List
// or ScaleSet.
const nicLookups = 8

// vmCandidate is a VM whose tags say it belongs to the cluster, before its NIC is read.
type vmCandidate struct {
	resourceID string
	meta       metadata.InstanceMetadata // everything but the IPs
	primaryNIC *armcompute.NetworkInterfaceReference
	// scaleSet and instanceID are set for uniform scale-set VMs, whose NICs live under the scale set.
	scaleSet   string
	instanceID string
}

// vmFields are the parts of a VM or scale-set VM that decide whether and how it is listed.
type vmFields struct {
	kind     string // for log messages: "VM" or "scale-set VM"
	chosen   string // for log messages: why the VM is a candidate; empty: "tagged for the cluster"
	id, name *string
	tags     map[string]*string
	zones    []*string
	network  *armcompute.NetworkProfile
	os       *armcompute.OSProfile
}

// List returns the cluster's instances: standalone VMs (including flexible scale-set members) and
// uniform scale-set VMs in the resource group whose UID tag carries the cluster UID. A VM that is
// tagged for the cluster but cannot be described (no ID, no role, no NIC, no private IP, NIC
// already deleted during scale-in) is skipped and the reason logged. ARM errors fail the call.
// The NICs are read with one listing per uniform scale set and per resource group of NICs (see
// describeAll). The result is sorted by name, then provider ID.
func (c *Cloud) List(ctx context.Context) ([]metadata.InstanceMetadata, error) {
	candidates, err := c.standaloneCandidates(ctx)
	if err != nil {
		return nil, err
	}
	more, err := c.scaleSetCandidates(ctx)
	if err != nil {
		return nil, err
	}
	candidates = append(candidates, more...)
	return c.describeAll(ctx, candidates)
}

// standaloneCandidates lists the resource group's VMs (all pages).
func (c *Cloud) standaloneCandidates(ctx context.Context) ([]vmCandidate, error) {
	var out []vmCandidate
	pager := c.vms.NewListPager(c.resourceGroup, nil)
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("azure: listing VMs in resource group %s: %w", c.resourceGroup, err)
		}
		for _, vm := range page.Value {
			if vm == nil {
				continue
			}
			f := vmFields{kind: "VM", id: vm.ID, name: vm.Name, tags: vm.Tags, zones: vm.Zones}
			if vm.Properties != nil {
				f.network, f.os = vm.Properties.NetworkProfile, vm.Properties.OSProfile
			}
			if cand, ok := c.candidate(f); ok {
				if cand.primaryNIC == nil {
					c.skip(f, "it has no network interface")
					continue
				}
				out = append(out, cand)
			}
		}
	}
	return out, nil
}

// scaleSetCandidates lists the VMs of the resource group's uniform scale sets (all pages).
// Flexible scale sets are left out: their members are ordinary VMs and already listed.
func (c *Cloud) scaleSetCandidates(ctx context.Context) ([]vmCandidate, error) {
	var out []vmCandidate
	pager := c.scaleSets.NewListPager(c.resourceGroup, nil)
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("azure: listing scale sets in resource group %s: %w", c.resourceGroup, err)
		}
		for _, ss := range page.Value {
			if ss == nil {
				continue
			}
			if ss.Properties != nil && ss.Properties.OrchestrationMode != nil &&
				*ss.Properties.OrchestrationMode == armcompute.OrchestrationModeFlexible {
				continue
			}
			if ss.Name == nil || *ss.Name == "" {
				c.log.Warn("skipping a scale set without a name", "id", deref(ss.ID))
				continue
			}
			vms, err := c.scaleSetVMCandidates(ctx, *ss.Name, ss.Tags)
			if err != nil {
				return nil, err
			}
			out = append(out, vms...)
		}
	}
	return out, nil
}

// scaleSetVMCandidates lists one uniform scale set's VMs. A VM's own tags override the scale set's,
// so a role can be set on the scale set once.
func (c *Cloud) scaleSetVMCandidates(ctx context.Context, scaleSet string, scaleSetTags map[string]*string) ([]vmCandidate, error) {
	var out []vmCandidate
	pager := c.scaleSetVMs.NewListPager(c.resourceGroup, scaleSet, nil)
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("azure: listing VMs of scale set %s: %w", scaleSet, err)
		}
		for _, vm := range page.Value {
			if vm == nil {
				continue
			}
			tags := maps.Clone(scaleSetTags)
			if tags == nil && vm.Tags != nil {
				tags = map[string]*string{}
			}
			for k, v := range vm.Tags {
				// Drop a differently-cased duplicate of the key first: tag names are case-insensitive.
				maps.DeleteFunc(tags, func(old string, _ *string) bool { return strings.EqualFold(old, k) })
				tags[k] = v
			}
			f := scaleSetVMFields(vm, tags)
			if cand, ok := c.scaleSetVMCandidate(scaleSet, vm, f, c.candidate); ok {
				out = append(out, cand)
			}
		}
	}
	return out, nil
}

// scaleSetVMFields are the fields of a uniform scale set's VM, with the tags given.
func scaleSetVMFields(vm *armcompute.VirtualMachineScaleSetVM, tags map[string]*string) vmFields {
	f := vmFields{kind: "scale-set VM", id: vm.ID, name: vm.Name, tags: tags, zones: vm.Zones}
	if vm.Properties != nil {
		f.network, f.os = vm.Properties.NetworkProfile, vm.Properties.OSProfile
	}
	return f
}

// scaleSetVMCandidate describes a uniform scale set's VM with describe (which also decides
// whether it is wanted); one without an instance ID is skipped.
func (c *Cloud) scaleSetVMCandidate(scaleSet string, vm *armcompute.VirtualMachineScaleSetVM, f vmFields, describe func(vmFields) (vmCandidate, bool)) (vmCandidate, bool) {
	cand, ok := describe(f)
	if !ok {
		return vmCandidate{}, false
	}
	if vm.InstanceID == nil || *vm.InstanceID == "" {
		c.skip(f, "it has no instance ID")
		return vmCandidate{}, false
	}
	cand.scaleSet, cand.instanceID = scaleSet, *vm.InstanceID
	return cand, true
}

// candidate decides whether a VM belongs to the cluster and describes it. VMs of other clusters
// (or untagged ones) are skipped at debug level; tagged ones that are unusable at warning level.
func (c *Cloud) candidate(f vmFields) (vmCandidate, bool) {
	uid, ok := tagValue(f.tags, c.tags.UID)
	if !ok || uid != c.uid {
		c.log.Debug("skipping "+f.kind+" of another cluster", "id", deref(f.id), "name", deref(f.name))
		return vmCandidate{}, false
	}
	return c.describe(f, c.roleTag)
}

// roleTag reads a VM's role from its role tag.
func (c *Cloud) roleTag(f vmFields) (metadata.Role, bool) {
	roleTag, ok := tagValue(f.tags, c.tags.Role)
	if !ok {
		c.skip(f, fmt.Sprintf("it has no %q tag", c.tags.Role))
		return "", false
	}
	role, err := metadata.ParseRole(roleTag)
	if err != nil {
		c.skip(f, fmt.Sprintf("tag %q: %v", c.tags.Role, err))
		return "", false
	}
	return role, true
}

// describe turns a VM into a candidate (everything but its IPs), its role given by roleOf. A VM
// that cannot be described (no ID, no role, no name) is skipped at warning level.
func (c *Cloud) describe(f vmFields, roleOf func(vmFields) (metadata.Role, bool)) (vmCandidate, bool) {
	if f.id == nil || *f.id == "" {
		c.skip(f, "it has no resource ID")
		return vmCandidate{}, false
	}
	providerID, err := ProviderIDFromResourceID(*f.id)
	if err != nil {
		c.skip(f, err.Error())
		return vmCandidate{}, false
	}
	role, ok := roleOf(f)
	if !ok {
		return vmCandidate{}, false
	}
	name := ""
	if f.os != nil && f.os.ComputerName != nil {
		name = *f.os.ComputerName
	}
	if name == "" {
		name = deref(f.name)
	}
	if name == "" {
		c.skip(f, "it has neither a computer name nor a resource name")
		return vmCandidate{}, false
	}
	zone := ""
	if len(f.zones) > 0 && f.zones[0] != nil {
		zone = *f.zones[0]
	}
	return vmCandidate{
		resourceID: *f.id,
		meta:       metadata.InstanceMetadata{Name: strings.ToLower(name), ProviderID: providerID, Role: role, Zone: zone},
		primaryNIC: primaryNICRef(f.network),
	}, true
}

func (c *Cloud) skip(f vmFields, reason string) {
	c.log.Warn("skipping "+f.kind+" "+cmp.Or(f.chosen, "tagged for the cluster")+": "+reason, "id", deref(f.id), "name", deref(f.name))
}

// primaryNICRef picks the NIC marked primary, or the first one (Azure makes the first NIC primary
// when a VM has one NIC or none is marked).
func primaryNICRef(np *armcompute.NetworkProfile) *armcompute.NetworkInterfaceReference {
	if np == nil {
		return nil
	}
	var first *armcompute.NetworkInterfaceReference
	for _, ref := range np.NetworkInterfaces {
		if ref == nil || ref.ID == nil || *ref.ID == "" {
			continue
		}
		if ref.Properties != nil && ref.Properties.Primary != nil && *ref.Properties.Primary {
			return ref
		}
		if first == nil {
			first = ref
		}
	}
	return first
}

// splitIPConfigurations returns the private IP of the NIC's primary IP configuration (or of its
// only one) and the private IPs of the others.
func splitIPConfigurations(nic *armnetwork.Interface) (primary string, others []string) {
	if nic.Properties == nil {
		return "", nil
	}
	configs := slices.DeleteFunc(slices.Clone(nic.Properties.IPConfigurations), func(ic *armnetwork.InterfaceIPConfiguration) bool {
		return ic == nil || ic.Properties == nil
	})
	primaryIdx := -1
	for i, ic := range configs {
		if ic.Properties.Primary != nil && *ic.Properties.Primary {
			primaryIdx = i
			break
		}
	}
	if primaryIdx < 0 && len(configs) == 1 {
		primaryIdx = 0
	}
	for i, ic := range configs {
		ip := deref(ic.Properties.PrivateIPAddress)
		switch {
		case i == primaryIdx:
			primary = ip
		case ip != "":
			others = append(others, ip)
		}
	}
	return primary, others
}

// hostPrefixes turns addresses into single-address prefixes ("10.0.0.5/32", "fd00::5/128"),
// dropping anything that is not an IP.
func hostPrefixes(ips []string) []string {
	var out []string
	for _, s := range ips {
		addr, err := netip.ParseAddr(s)
		if err != nil {
			continue
		}
		out = append(out, netip.PrefixFrom(addr, addr.BitLen()).String())
	}
	return out
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
