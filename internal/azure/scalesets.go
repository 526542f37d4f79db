package azure

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/azure/metadata"
)

// ErrScaleSetNotFound: no scale set of the resource group matches the selector (or it went while
// it was being read). Errors of ScaleSet wrap it; test with errors.Is.
var ErrScaleSetNotFound = errors.New("scale set not found")

// ErrScaleSetAmbiguous: more than one scale set of the resource group carries the selector's tags.
var ErrScaleSetAmbiguous = errors.New("more than one scale set matches")

// ScaleSetSelector chooses one virtual machine scale set in the resource group: by Name, or, when
// Name is empty, by Tags (every tag given must be on the scale set; tag names compare
// case-insensitively, as ARM compares them, values exactly). The scale set need not carry the
// cluster's UID tag, nor its VMs a role tag: the selector alone says the set is the caller's.
type ScaleSetSelector struct {
	Name string
	Tags map[string]string
}

func (s ScaleSetSelector) String() string {
	if s.Name != "" {
		return fmt.Sprintf("named %q", s.Name)
	}
	keys := slices.Sorted(maps.Keys(s.Tags))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + s.Tags[k]
	}
	return "tagged " + strings.Join(parts, ",")
}

// ScaleSet is a virtual machine scale set and its VMs, as one call of Cloud.ScaleSet saw them.
type ScaleSet struct {
	// Name and ID (the ARM resource ID) of the scale set.
	Name, ID string
	// ProviderID is "azure://" + ID with the resource group lower-cased: the form CAPZ gives an
	// AzureMachinePool's spec.providerID.
	ProviderID string
	// Flexible is true for a scale set in Flexible orchestration mode, whose VMs are ordinary VMs
	// (provider IDs of the .../virtualMachines/<name> form); false for Uniform (.../virtualMachineScaleSets/<set>/virtualMachines/<instance ID>).
	Flexible bool
	// Capacity is the scale set's sku.capacity, the number of VMs it is asked to have; nil when
	// it has none (a flexible scale set without a VM profile).
	Capacity *int64
	// Instances are the VMs that could be described (ID, computer or resource name, a NIC whose
	// primary IP configuration has a private IP), all with Role worker, sorted by name, then
	// provider ID. Their provider IDs are exactly what cloud-provider-azure writes on their nodes.
	Instances []metadata.InstanceMetadata
	// Members are the provider IDs of every VM the scale set lists with a valid resource ID,
	// described or not (a VM whose NIC is already gone during scale-in is a member but no
	// instance), sorted: a VM that is not a member is no longer in the scale set.
	Members []string
}

// ScaleSet finds the scale set sel selects in the resource group and lists its VMs: a uniform set's
// through the scale-set VM API, a flexible set's from the resource group's VMs whose
// virtualMachineScaleSet is the set; their NICs come from one listing, the set's NICs (uniform) or
// the resource group's (flexible), whatever the number of VMs. A scale set that does not exist
// (or vanishes while being read) is an error wrapping ErrScaleSetNotFound; more than one matching
// the tags, one wrapping ErrScaleSetAmbiguous. Other ARM errors (after the SDK's retries of 429 and 5xx) fail the call.
func (c *Cloud) ScaleSet(ctx context.Context, sel ScaleSetSelector) (*ScaleSet, error) {
	ss, err := c.findScaleSet(ctx, sel)
	if err != nil {
		return nil, err
	}
	if ss.ID == nil || ss.Name == nil || *ss.Name == "" {
		return nil, fmt.Errorf("azure: the scale set %s in resource group %s has no ID or name", sel, c.resourceGroup)
	}
	out := &ScaleSet{Name: *ss.Name, ID: *ss.ID}
	if out.ProviderID, err = ProviderIDFromResourceID(*ss.ID); err != nil {
		return nil, fmt.Errorf("azure: scale set %s: %w", *ss.Name, err)
	}
	if ss.SKU != nil && ss.SKU.Capacity != nil {
		out.Capacity = ss.SKU.Capacity
	}
	out.Flexible = ss.Properties != nil && ss.Properties.OrchestrationMode != nil &&
		*ss.Properties.OrchestrationMode == armcompute.OrchestrationModeFlexible

	var candidates []vmCandidate
	if out.Flexible {
		candidates, out.Members, err = c.flexibleMembers(ctx, out.Name, out.ID)
	} else {
		candidates, out.Members, err = c.uniformMembers(ctx, out.Name)
	}
	if isNotFound(err) {
		return nil, fmt.Errorf("azure: listing the VMs of scale set %s: %w (%w)", out.Name, ErrScaleSetNotFound, err)
	}
	if err != nil {
		return nil, fmt.Errorf("azure: listing the VMs of scale set %s: %w", out.Name, err)
	}
	slices.Sort(out.Members)
	if out.Instances, err = c.describeAll(ctx, candidates); err != nil {
		return nil, err
	}
	return out, nil
}

// findScaleSet reads the scale set by name, or lists the resource group's scale sets and picks the
// one carrying sel's tags.
func (c *Cloud) findScaleSet(ctx context.Context, sel ScaleSetSelector) (*armcompute.VirtualMachineScaleSet, error) {
	if sel.Name != "" {
		resp, err := c.scaleSets.Get(ctx, c.resourceGroup, sel.Name, nil)
		if isNotFound(err) {
			return nil, fmt.Errorf("azure: scale set %q in resource group %s: %w (%w)", sel.Name, c.resourceGroup, ErrScaleSetNotFound, err)
		}
		if err != nil {
			return nil, fmt.Errorf("azure: reading scale set %q in resource group %s: %w", sel.Name, c.resourceGroup, err)
		}
		return &resp.VirtualMachineScaleSet, nil
	}
	if len(sel.Tags) == 0 {
		return nil, fmt.Errorf("azure: a scale set selector needs a name or tags")
	}
	var found []*armcompute.VirtualMachineScaleSet
	pager := c.scaleSets.NewListPager(c.resourceGroup, nil)
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if isNotFound(err) {
			return nil, fmt.Errorf("azure: listing scale sets in resource group %s: %w (%w)", c.resourceGroup, ErrScaleSetNotFound, err)
		}
		if err != nil {
			return nil, fmt.Errorf("azure: listing scale sets in resource group %s: %w", c.resourceGroup, err)
		}
		for _, ss := range page.Value {
			if ss != nil && hasTags(ss.Tags, sel.Tags) {
				found = append(found, ss)
			}
		}
	}
	switch len(found) {
	case 0:
		return nil, fmt.Errorf("azure: no scale set %s in resource group %s: %w", sel, c.resourceGroup, ErrScaleSetNotFound)
	case 1:
		return found[0], nil
	}
	names := make([]string, len(found))
	for i, ss := range found {
		names[i] = deref(ss.Name)
	}
	slices.Sort(names)
	return nil, fmt.Errorf("azure: scale sets %s in resource group %s are all %s: %w", strings.Join(names, ", "), c.resourceGroup, sel, ErrScaleSetAmbiguous)
}

// hasTags reports whether tags carries every tag of want (names case-insensitive, values exact).
func hasTags(tags map[string]*string, want map[string]string) bool {
	for k, v := range want {
		got, ok := tagValue(tags, k)
		if !ok || got != v {
			return false
		}
	}
	return true
}

// poolRole makes every VM of a scale set a worker: a scale set is a pool of workers.
func poolRole(vmFields) (metadata.Role, bool) { return metadata.RoleWorker, true }

// describePoolVM describes a scale set's VM, whatever its tags.
func (c *Cloud) describePoolVM(f vmFields) (vmCandidate, bool) { return c.describe(f, poolRole) }

// uniformMembers lists a uniform scale set's VMs (all pages).
func (c *Cloud) uniformMembers(ctx context.Context, scaleSet string) ([]vmCandidate, []string, error) {
	var out []vmCandidate
	var members []string
	pager := c.scaleSetVMs.NewListPager(c.resourceGroup, scaleSet, nil)
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return nil, nil, err
		}
		for _, vm := range page.Value {
			if vm == nil {
				continue
			}
			f := scaleSetVMFields(vm, vm.Tags)
			f.chosen = "of scale set " + scaleSet
			if id, err := ProviderIDFromResourceID(deref(vm.ID)); err == nil {
				members = append(members, id)
			}
			if cand, ok := c.scaleSetVMCandidate(scaleSet, vm, f, c.describePoolVM); ok {
				out = append(out, cand)
			}
		}
	}
	return out, members, nil
}

// flexibleMembers lists a flexible scale set's VMs: the resource group's VMs whose
// virtualMachineScaleSet reference is the set. ARM filters them (the $filter
// cloud-provider-azure uses too); the reference is checked again here, so a filter ignored
// never adds another VM.
func (c *Cloud) flexibleMembers(ctx context.Context, scaleSet, scaleSetID string) ([]vmCandidate, []string, error) {
	var out []vmCandidate
	var members []string
	filter := fmt.Sprintf("'virtualMachineScaleSet/id' eq '%s'", scaleSetID)
	pager := c.vms.NewListPager(c.resourceGroup, &armcompute.VirtualMachinesClientListOptions{Filter: &filter})
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return nil, nil, err
		}
		for _, vm := range page.Value {
			if vm == nil || vm.Properties == nil || vm.Properties.VirtualMachineScaleSet == nil ||
				!strings.EqualFold(deref(vm.Properties.VirtualMachineScaleSet.ID), scaleSetID) {
				continue
			}
			f := vmFields{kind: "VM", chosen: "of scale set " + scaleSet, id: vm.ID, name: vm.Name, tags: vm.Tags, zones: vm.Zones,
				network: vm.Properties.NetworkProfile, os: vm.Properties.OSProfile}
			if id, err := ProviderIDFromResourceID(deref(vm.ID)); err == nil {
				members = append(members, id)
			}
			cand, ok := c.describePoolVM(f)
			if !ok {
				continue
			}
			if cand.primaryNIC == nil {
				c.skip(f, "it has no network interface")
				continue
			}
			out = append(out, cand)
		}
	}
	return out, members, nil
}
