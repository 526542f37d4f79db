package harness

import (
	"fmt"
	"sort"
	"strings"
)

// EnableCAPIFeatureGates turns on feature gates of CAPI core and the kubeadm control-plane
// manager (e.g. "MachineTaintPropagation", which both validate and core acts on) for every plane
// this process starts afterwards; the gates ClusterTopology already has stay on. Call it before
// Start. It exists for CAPI's own e2e specs (test/capi-e2e), which enable the alpha features
// their flavors use, as CAPI's e2e configuration does.
func EnableCAPIFeatureGates(gates ...string) {
	if len(gates) == 0 {
		return
	}
	sorted := append([]string(nil), gates...)
	sort.Strings(sorted)
	var flag strings.Builder
	for i, g := range sorted {
		if i > 0 {
			flag.WriteString(",")
		}
		fmt.Fprintf(&flag, "%s=true", g)
	}
	// component-base's --feature-gates merges repeated flags, so this one adds to the first.
	for i := range capiComponents {
		if c := &capiComponents[i]; c.component == "core" || c.component == "controlplane/kubeadm" {
			c.args = append(c.args, "--feature-gates="+flag.String())
		}
	}
}
