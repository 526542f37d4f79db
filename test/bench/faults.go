package bench

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"strconv"

	"sigs.k8s.io/yaml"

	infrav1 "github.com/goofy-capi/cluster-api-provider-goofy/api/v1alpha1"
)

// FaultProfile is what `make bench FAULTS=<file>` reads: faults (docs/faults.md) given to a share
// of the clusters, spread evenly over the run, so that a scale run includes chaos.
//
//	share: "0.2"                 # of the clusters; "1" when omitted
//	cluster:                     # GoofyCluster spec.simulation
//	  apiServer:
//	    errors: [{code: 503, ratio: "0.2"}]
//	machine:                     # spec.template.spec.simulation of the cluster's GoofyMachineTemplates
//	  nodeNotReady: false
type FaultProfile struct {
	Share   string                     `json:"share,omitempty"`
	Cluster *infrav1.ClusterSimulation `json:"cluster,omitempty"`
	Machine *infrav1.MachineSimulation `json:"machine,omitempty"`

	share float64
}

// LoadFaultProfile reads and checks a profile; unknown fields are errors.
func LoadFaultProfile(path string) (*FaultProfile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	p := &FaultProfile{}
	if err := yaml.UnmarshalStrict(data, p); err != nil {
		return nil, fmt.Errorf("fault profile %s: %w", path, err)
	}
	p.share = 1
	if p.Share != "" {
		if p.share, err = strconv.ParseFloat(p.Share, 64); err != nil || p.share < 0 || p.share > 1 {
			return nil, fmt.Errorf("fault profile %s: share %q is not a decimal in [0,1]", path, p.Share)
		}
	}
	if p.Cluster == nil && p.Machine == nil {
		return nil, fmt.Errorf("fault profile %s: neither cluster nor machine faults", path)
	}
	return p, nil
}

// appliesTo reports whether cluster i gets the faults: share × n clusters, evenly spread.
func (p *FaultProfile) appliesTo(i int) bool {
	return math.Floor(float64(i+1)*p.share) > math.Floor(float64(i)*p.share)
}

// inject sets the profile's faults in one cluster's rendered manifests.
func (p *FaultProfile) inject(manifests []byte) ([]byte, error) {
	var out [][]byte
	for _, doc := range bytes.Split(manifests, []byte("\n---\n")) {
		obj := map[string]any{}
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			return nil, err
		}
		spec, _ := obj["spec"].(map[string]any)
		switch kind, _ := obj["kind"].(string); {
		case kind == "GoofyCluster" && p.Cluster != nil && spec != nil:
			spec["simulation"] = p.Cluster
		case kind == "GoofyMachineTemplate" && p.Machine != nil && spec != nil:
			if tmpl, ok := spec["template"].(map[string]any); ok {
				ts, _ := tmpl["spec"].(map[string]any)
				if ts == nil {
					ts = map[string]any{}
					tmpl["spec"] = ts
				}
				ts["simulation"] = p.Machine
			}
		default:
			out = append(out, doc)
			continue
		}
		data, err := yaml.Marshal(obj)
		if err != nil {
			return nil, err
		}
		out = append(out, bytes.TrimSpace(data))
	}
	return bytes.Join(out, []byte("\n---\n")), nil
}
