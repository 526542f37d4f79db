package azure

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
	"golang.org/x/sync/errgroup"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/azure/metadata"
)

// nicSource is where candidates' primary NICs are read from: the NICs of one uniform scale set,
// which live under the set (scaleSet set), or the top-level NICs of one resource group.
type nicSource struct {
	resourceGroup string
	scaleSet      string
}

func (s nicSource) String() string {
	if s.scaleSet != "" {
		return "of scale set " + s.scaleSet
	}
	return "in resource group " + s.resourceGroup
}

// nicGroup is the candidates (indexes into describeAll's slice) whose NICs come from one source.
type nicGroup struct {
	source     nicSource
	candidates []int
}

// nicLookup is what was found of one candidate's primary NIC.
type nicLookup struct {
	nic *armnetwork.Interface // nil: the VM has none
	// gone: the VM names a NIC that no longer exists (ARM answered 404, or the listing lacks it),
	// as while a scale set scales in. err is the 404, if there was one.
	gone bool
	err  error
}

// describeAll reads the candidates' primary NICs and returns the instances that have a private IP,
// sorted by name, then provider ID.
//
// The NICs are read per source, not per VM: one listing of a uniform scale set's NICs
// (NewListVirtualMachineScaleSetNetworkInterfacesPager), one listing of a resource group's NICs
// (NewListPager) for standalone VMs and flexible scale-set members, each joined to the VMs by the
// NIC's properties.virtualMachine.id. A re-read of a scale set of any size thus costs the pages of
// one NIC listing, where it cost one request per VM. A source only one candidate needs (a lone
// VM, a NIC in another resource group) is read with that one NIC's request instead, which is never
// more requests than its listing.
func (c *Cloud) describeAll(ctx context.Context, candidates []vmCandidate) ([]metadata.InstanceMetadata, error) {
	groups, err := c.nicGroups(candidates)
	if err != nil {
		return nil, err
	}
	found := make([]nicLookup, len(candidates))
	// Run a few sources at once (uniform scale sets, resource groups of NICs).
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(nicLookups)
	for _, grp := range groups {
		g.Go(func() error {
			if len(grp.candidates) == 1 {
				i := grp.candidates[0]
				nic, err := c.primaryInterface(gctx, candidates[i])
				if isNotFound(err) {
					found[i] = nicLookup{gone: true, err: err}
					return nil
				}
				if err != nil {
					return fmt.Errorf("azure: reading the network interface of %s: %w", candidates[i].resourceID, err)
				}
				found[i] = nicLookup{nic: nic}
				return nil
			}
			index, err := c.listInterfaces(gctx, grp.source)
			if err != nil {
				return fmt.Errorf("azure: listing the network interfaces %s: %w", grp.source, err)
			}
			for _, i := range grp.candidates {
				found[i] = index.primaryOf(candidates[i])
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	out := make([]metadata.InstanceMetadata, 0, len(candidates))
	for i, cand := range candidates {
		if m := c.withAddresses(cand, found[i]); m != nil {
			out = append(out, *m)
		}
	}
	slices.SortFunc(out, func(a, b metadata.InstanceMetadata) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.ProviderID, b.ProviderID))
	})
	return out, nil
}

// nicGroups groups the candidates by the source of their NICs: uniform scale-set VMs by scale set,
// the others by the resource group of their primary NIC (compared case-insensitively, as ARM
// compares names), in the order the candidates come.
func (c *Cloud) nicGroups(candidates []vmCandidate) ([]*nicGroup, error) {
	var groups []*nicGroup
	byKey := map[nicSource]*nicGroup{}
	for i, cand := range candidates {
		src := nicSource{resourceGroup: c.resourceGroup, scaleSet: cand.scaleSet}
		if cand.scaleSet == "" {
			id, err := arm.ParseResourceID(*cand.primaryNIC.ID)
			if err != nil {
				return nil, fmt.Errorf("azure: reading the network interface of %s: bad network interface ID %q: %w", cand.resourceID, *cand.primaryNIC.ID, err)
			}
			src.resourceGroup = id.ResourceGroupName
		}
		key := nicSource{resourceGroup: strings.ToLower(src.resourceGroup), scaleSet: strings.ToLower(src.scaleSet)}
		grp := byKey[key]
		if grp == nil {
			grp = &nicGroup{source: src}
			byKey[key] = grp
			groups = append(groups, grp)
		}
		grp.candidates = append(grp.candidates, i)
	}
	return groups, nil
}

// nicIndex is one listing of NICs, by the VM each is attached to and by ID (both lower-cased: ARM
// is inconsistent about the case of resource group names in IDs).
type nicIndex struct {
	byVM map[string][]*armnetwork.Interface
	byID map[string]*armnetwork.Interface
	// gone: the listing itself answered 404 (the scale set or resource group went meanwhile).
	gone bool
}

func newNICIndex(nics []*armnetwork.Interface) nicIndex {
	x := nicIndex{byVM: map[string][]*armnetwork.Interface{}, byID: map[string]*armnetwork.Interface{}}
	for _, nic := range nics {
		if nic == nil {
			continue
		}
		if nic.ID != nil {
			x.byID[strings.ToLower(*nic.ID)] = nic
		}
		if nic.Properties != nil && nic.Properties.VirtualMachine != nil && nic.Properties.VirtualMachine.ID != nil {
			vm := strings.ToLower(*nic.Properties.VirtualMachine.ID)
			x.byVM[vm] = append(x.byVM[vm], nic)
		}
	}
	return x
}

// primaryOf joins a candidate to its primary NIC: among the NICs attached to the VM, the one the
// VM names as primary, or, when it names none (a uniform scale-set VM may not), the one marked
// primary. A named NIC listed without its VM reference is still found by its ID. A named NIC the
// listing lacks is gone: the VM existed when the VMs were listed, its NIC before it, and the NICs
// are listed after the VMs.
func (x nicIndex) primaryOf(cand vmCandidate) nicLookup {
	if x.gone {
		return nicLookup{gone: true}
	}
	attached := x.byVM[strings.ToLower(cand.resourceID)]
	if cand.primaryNIC == nil {
		return nicLookup{nic: pickPrimary(attached)}
	}
	want := *cand.primaryNIC.ID
	for _, nic := range attached {
		if strings.EqualFold(deref(nic.ID), want) {
			return nicLookup{nic: nic}
		}
	}
	if nic := x.byID[strings.ToLower(want)]; nic != nil {
		return nicLookup{nic: nic}
	}
	return nicLookup{gone: true}
}

// listInterfaces lists the NICs of one source (all pages). A 404 (the scale set or resource group
// went meanwhile) makes every NIC of it gone, as a 404 on each NIC would.
func (c *Cloud) listInterfaces(ctx context.Context, src nicSource) (nicIndex, error) {
	var nics []*armnetwork.Interface
	var err error
	if src.scaleSet != "" {
		nics, err = allInterfaces(ctx, c.interfaces.NewListVirtualMachineScaleSetNetworkInterfacesPager(src.resourceGroup, src.scaleSet, nil),
			func(page armnetwork.InterfacesClientListVirtualMachineScaleSetNetworkInterfacesResponse) []*armnetwork.Interface {
				return page.Value
			})
	} else {
		nics, err = allInterfaces(ctx, c.interfaces.NewListPager(src.resourceGroup, nil),
			func(page armnetwork.InterfacesClientListResponse) []*armnetwork.Interface { return page.Value })
	}
	if isNotFound(err) {
		return nicIndex{gone: true}, nil
	}
	if err != nil {
		return nicIndex{}, err
	}
	return newNICIndex(nics), nil
}

// allInterfaces follows a pager of NICs to its end.
func allInterfaces[T any](ctx context.Context, pager *runtime.Pager[T], values func(T) []*armnetwork.Interface) ([]*armnetwork.Interface, error) {
	var out []*armnetwork.Interface
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		out = append(out, values(page)...)
	}
	return out, nil
}

// pickPrimary returns the NIC marked primary, or the first one, or nil when there is none.
func pickPrimary(nics []*armnetwork.Interface) *armnetwork.Interface {
	nics = slices.DeleteFunc(slices.Clone(nics), func(nic *armnetwork.Interface) bool { return nic == nil })
	for _, nic := range nics {
		if nic.Properties != nil && nic.Properties.Primary != nil && *nic.Properties.Primary {
			return nic
		}
	}
	if len(nics) > 0 {
		return nics[0]
	}
	return nil
}

// withAddresses fills in the candidate's IPs from its primary NIC. It returns nil (and logs) when
// the VM must be skipped.
func (c *Cloud) withAddresses(cand vmCandidate, found nicLookup) *metadata.InstanceMetadata {
	if found.gone {
		// Normal during scale-in: the VM is listed but its NIC is already deleted.
		attrs := []any{"id", cand.resourceID}
		if found.err != nil {
			attrs = append(attrs, slog.Any("error", found.err))
		}
		c.log.Info("skipping VM whose network interface is gone (being deleted?)", attrs...)
		return nil
	}
	nic := found.nic
	if nic == nil {
		c.log.Warn("skipping VM without a network interface", "id", cand.resourceID)
		return nil
	}
	primary, others := splitIPConfigurations(nic)
	if primary == "" {
		c.log.Warn("skipping VM whose primary network interface has no primary private IP", "id", cand.resourceID, "nic", deref(nic.ID))
		return nil
	}
	meta := cand.meta
	meta.VPCIP = primary
	meta.AliasIPRanges = hostPrefixes(others)
	return &meta
}

// primaryInterface fetches one candidate's primary NIC by itself. Standalone VMs' NICs are
// top-level resources (possibly in another resource group); uniform scale-set VMs' NICs live under
// the scale set and are read through the scale-set NIC API.
func (c *Cloud) primaryInterface(ctx context.Context, cand vmCandidate) (*armnetwork.Interface, error) {
	if cand.scaleSet == "" {
		id, err := arm.ParseResourceID(*cand.primaryNIC.ID)
		if err != nil {
			return nil, fmt.Errorf("bad network interface ID %q: %w", *cand.primaryNIC.ID, err)
		}
		resp, err := c.interfaces.Get(ctx, id.ResourceGroupName, id.Name, nil)
		if err != nil {
			return nil, err
		}
		return &resp.Interface, nil
	}
	if cand.primaryNIC != nil {
		id, err := arm.ParseResourceID(*cand.primaryNIC.ID)
		if err != nil {
			return nil, fmt.Errorf("bad network interface ID %q: %w", *cand.primaryNIC.ID, err)
		}
		resp, err := c.interfaces.GetVirtualMachineScaleSetNetworkInterface(ctx, c.resourceGroup, cand.scaleSet, cand.instanceID, id.Name, nil)
		if err != nil {
			return nil, err
		}
		return &resp.Interface, nil
	}
	// The scale-set VM did not name its NICs: list them and take the primary one.
	nics, err := allInterfaces(ctx, c.interfaces.NewListVirtualMachineScaleSetVMNetworkInterfacesPager(c.resourceGroup, cand.scaleSet, cand.instanceID, nil),
		func(page armnetwork.InterfacesClientListVirtualMachineScaleSetVMNetworkInterfacesResponse) []*armnetwork.Interface {
			return page.Value
		})
	if err != nil {
		return nil, err
	}
	return pickPrimary(nics), nil
}
