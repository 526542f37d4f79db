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
	flavor := strings.Join(append(docs, string(mhc)), "\n---\n")
	return os.WriteFile(filepath.Join(dir, "cluster-template-md-remediation.yaml"), []byte(flavor), 0o644)
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
