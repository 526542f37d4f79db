package bench

import (
	"fmt"
	"os/exec"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// ClientSettings are the knobs that decide how fast a provider can work through the scenario,
// set alike for either provider: the rate limit of its client to the management API server and
// how many infrastructure clusters and machines it reconciles at once. A zero field leaves the
// provider's shipped default.
type ClientSettings struct {
	QPS         float64 `json:"qps,omitempty"`
	Burst       int     `json:"burst,omitempty"`
	Concurrency int     `json:"concurrency,omitempty"`
}

// clientFlags are a provider's flags for ClientSettings.
type clientFlags struct {
	qps, burst, clusterConcurrency, machineConcurrency string
}

// providerClientFlags maps ClientSettings to each provider's flags. CAPD's are those of
// sigs.k8s.io/cluster-api/test/infrastructure/docker's main.go (v1.14.2), whose DevCluster and
// DevMachine controllers run the in-memory backend; its other knobs (the DevMachineTemplate and
// cluster cache controllers, the workload cluster clients) have no Goofy counterpart and keep
// their shipped values.
var providerClientFlags = map[string]clientFlags{
	ProviderGoofy: {qps: "kube-api-qps", burst: "kube-api-burst", clusterConcurrency: "goofycluster-concurrency", machineConcurrency: "goofymachine-concurrency"},
	ProviderCAPD:  {qps: "kube-api-qps", burst: "kube-api-burst", clusterConcurrency: "devcluster-concurrency", machineConcurrency: "devmachine-concurrency"},
}

// ClientSettingsUsed is what a provider ran with. A value is the one asked for or, where none was,
// the provider's shipped default as its --help states it ("?" when it states none).
type ClientSettingsUsed struct {
	QPS                string `json:"qps"`
	Burst              string `json:"burst"`
	ClusterConcurrency string `json:"clusterConcurrency"`
	MachineConcurrency string `json:"machineConcurrency"`
	// Set lists the knobs that were asked for (qps, burst, concurrency); empty means the provider
	// ran with its shipped defaults throughout.
	Set []string `json:"set,omitempty"`
	// Args are the flags the provider was given for them.
	Args []string `json:"args,omitempty"`
}

// Shipped reports whether the provider ran with its shipped client settings.
func (u ClientSettingsUsed) Shipped() bool { return len(u.Set) == 0 }

// values is the settings without their origin, to compare two runs.
func (u ClientSettingsUsed) values() [4]string {
	return [4]string{u.QPS, u.Burst, u.ClusterConcurrency, u.MachineConcurrency}
}

func (u ClientSettingsUsed) String() string {
	origin := "shipped defaults"
	if !u.Shipped() {
		origin = "set: " + strings.Join(u.Set, ", ") + "; the rest shipped"
		if len(u.Set) == 3 {
			origin = "all set"
		}
	}
	return fmt.Sprintf("QPS %s, burst %s, concurrency %s clusters / %s machines (%s)", u.QPS, u.Burst, u.ClusterConcurrency, u.MachineConcurrency, origin)
}

// resolve returns the provider's flags for the settings and what it runs with; binary's --help
// supplies the shipped defaults.
func (s ClientSettings) resolve(provider, binary string) ([]string, ClientSettingsUsed, error) {
	f, ok := providerClientFlags[provider]
	if !ok {
		return nil, ClientSettingsUsed{}, fmt.Errorf("unknown provider %q", provider)
	}
	if s.QPS < 0 || s.Burst < 0 || s.Concurrency < 0 {
		return nil, ClientSettingsUsed{}, fmt.Errorf("client settings must not be negative: %+v", s)
	}
	out, _ := exec.Command(binary, "--help").CombinedOutput()
	defaults := flagDefaults(string(out))
	var used ClientSettingsUsed
	pick := func(flag string, set bool, value string) string {
		if !set {
			if d, ok := defaults[flag]; ok {
				return d
			}
			return "?"
		}
		used.Args = append(used.Args, "--"+flag+"="+value)
		return value
	}
	used.QPS = pick(f.qps, s.QPS > 0, strconv.FormatFloat(s.QPS, 'f', -1, 64))
	used.Burst = pick(f.burst, s.Burst > 0, strconv.Itoa(s.Burst))
	used.ClusterConcurrency = pick(f.clusterConcurrency, s.Concurrency > 0, strconv.Itoa(s.Concurrency))
	used.MachineConcurrency = pick(f.machineConcurrency, s.Concurrency > 0, strconv.Itoa(s.Concurrency))
	for knob, set := range map[string]bool{"qps": s.QPS > 0, "burst": s.Burst > 0, "concurrency": s.Concurrency > 0} {
		if set {
			used.Set = append(used.Set, knob)
		}
	}
	sort.Strings(used.Set)
	return used.Args, used, nil
}

// pflagDefault matches a line of pflag's usage text: "  --name type   usage (default value)".
var pflagDefault = regexp.MustCompile(`^\s+(?:-\w, )?--([\w-]+)\b.*\(default "?([^")]*)"?\)\s*$`)

// flagDefaults reads the default of every flag from pflag's --help output.
func flagDefaults(help string) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(help, "\n") {
		if m := pflagDefault.FindStringSubmatch(line); m != nil {
			out[m[1]] = m[2]
		}
	}
	return out
}
