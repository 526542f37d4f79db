package azure

import (
	"fmt"
	"strings"
)

// providerIDPrefix is the scheme cloud-provider-azure uses for node provider IDs.
const providerIDPrefix = "azure://"

// ProviderIDFromResourceID returns the Kubernetes provider ID for an ARM resource ID of a VM or a
// scale-set VM: "azure://" + the ID with only the resource group name lower-cased. ARM and IMDS
// report the resource group in whatever case it was created with (and sometimes spell the segment
// "resourcegroups"); cloud-provider-azure lower-cases the name, so we do the same to match the
// provider IDs on real nodes. The segment key keeps its spelling, everything else is unchanged.
func ProviderIDFromResourceID(resourceID string) (string, error) {
	segments := strings.Split(resourceID, "/")
	// A VM ID looks like /subscriptions/<sub>/resourceGroups/<rg>/providers/<ns>/<type>/<name>...
	if len(segments) < 9 || segments[0] != "" || !strings.EqualFold(segments[1], "subscriptions") ||
		segments[2] == "" || !strings.EqualFold(segments[3], "resourceGroups") || segments[4] == "" ||
		!strings.EqualFold(segments[5], "providers") {
		return "", fmt.Errorf("%q is not an ARM resource ID of a virtual machine", resourceID)
	}
	for _, s := range segments[6:] {
		if s == "" {
			return "", fmt.Errorf("%q is not an ARM resource ID of a virtual machine: empty segment", resourceID)
		}
	}
	segments[4] = strings.ToLower(segments[4])
	return providerIDPrefix + strings.Join(segments, "/"), nil
}

// tagValue looks a tag up by key. ARM treats tag names case-insensitively, so "Goofy-UID" and
// "goofy-uid" are the same tag; an exact match wins over a case-folded one.
func tagValue(tags map[string]*string, key string) (string, bool) {
	if v, ok := tags[key]; ok {
		if v == nil {
			return "", true
		}
		return *v, true
	}
	for k, v := range tags {
		if strings.EqualFold(k, key) {
			if v == nil {
				return "", true
			}
			return *v, true
		}
	}
	return "", false
}
