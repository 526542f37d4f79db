package capie2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"
)

// writeGeneratedFlavors writes the flavors that are one of Goofy's templates with a change into
// dir, so the e2e config can name them (${GENERATED_FLAVORS}) without a copy of the template in
// the repository.
func writeGeneratedFlavors(repoRoot, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	base, err := os.ReadFile(filepath.Join(repoRoot, "templates", "cluster-template.yaml"))
	if err != nil {
		return err
	}
	mhc, err := os.ReadFile(filepath.Join("data", "md-remediation-mhc.yaml"))
	if err != nil {
		return err
	}
	docs, err := withoutKind(string(base), "MachineHealthCheck")
	if err != nil {
		return err
	}
	flavors := map[string]string{"md-remediation": strings.Join(append(docs, string(mhc)), "\n---\n")}

	// kcp-md-taints (KCPAndMachineDeploymentRolloutSpec) and topology-taints
	// (ClusterClassRolloutSpec): the templates with the Machine taints the specs expect to find
	// on the Machines and Nodes from the start, as in CAPI's own flavors.
	topology, err := os.ReadFile(filepath.Join(repoRoot, "templates", "cluster-template-topology.yaml"))
	if err != nil {
		return err
	}
	if flavors["kcp-md-taints"], err = insertAfter(string(base),
		[2]string{"  machineTemplate:\n    spec:\n", preExistingTaints("      ")},
		[2]string{"        nodepool: ${CLUSTER_NAME}-md-0\n    spec:\n", preExistingTaints("      ")},
	); err != nil {
		return err
	}
	if flavors["topology-taints"], err = insertAfter(string(topology),
		[2]string{"      replicas: ${CONTROL_PLANE_MACHINE_COUNT:=3}\n", preExistingTaints("      ")},
		[2]string{"        replicas: ${WORKER_MACHINE_COUNT:=2}\n", preExistingTaints("        ")},
	); err != nil {
		return err
	}
	for name, content := range flavors {
		if err := os.WriteFile(filepath.Join(dir, "cluster-template-"+name+".yaml"), []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// preExistingTaints is the taints list CAPI's rollout specs look for, indented for its place.
func preExistingTaints(indent string) string {
	lines := []string{
		"taints:",
		"- key: pre-existing-on-initialization-taint",
		"  value: on-initialization-value",
		"  effect: PreferNoSchedule",
		"  propagation: OnInitialization",
		"- key: pre-existing-always-taint",
		"  value: always-value",
		"  effect: PreferNoSchedule",
		"  propagation: Always",
	}
	return indent + strings.Join(lines, "\n"+indent) + "\n"
}

// insertAfter inserts each text after the one place its anchor occurs in template.
func insertAfter(template string, inserts ...[2]string) (string, error) {
	for _, in := range inserts {
		if n := strings.Count(template, in[0]); n != 1 {
			return "", fmt.Errorf("the anchor %q occurs %d times in the template, want once", in[0], n)
		}
		template = strings.Replace(template, in[0], in[0]+in[1], 1)
	}
	return template, nil
}

// withoutKind splits a multi-document template and drops the documents of one kind.
func withoutKind(template, kind string) ([]string, error) {
	var out []string
	for _, doc := range strings.Split(template, "\n---\n") {
		var meta struct {
			Kind string `json:"kind"`
		}
		// Variables such as ${VAR:=default} are plain YAML strings, so the document parses.
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			return nil, fmt.Errorf("reading a template document: %w", err)
		}
		if meta.Kind != kind {
			out = append(out, strings.TrimSpace(doc)+"\n")
		}
	}
	return out, nil
}
