package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"
)

// Environment is envtest with this repository's CRDs (labelled with the CAPI contract as
// config/crd/kustomization.yaml does) and CAPI's core CRDs from the module cache.
func Environment() (*envtest.Environment, error) {
	ours, err := labelledCRDs(filepath.Join(RepoRoot(), "config", "crd"))
	if err != nil {
		return nil, err
	}
	capiDir, err := ModuleDir("sigs.k8s.io/cluster-api")
	if err != nil {
		return nil, err
	}
	return &envtest.Environment{
		BinaryAssetsDirectory: AssetsDir(),
		CRDs:                  ours,
		CRDDirectoryPaths:     []string{filepath.Join(capiDir, "core", "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
	}, nil
}

// labelledCRDs reads config/crd/bases and adds the labels config/crd/kustomization.yaml adds (the
// CAPI contract label that CAPI's external-object lookups require).
func labelledCRDs(dir string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	var kustomization struct {
		Labels []struct {
			Pairs map[string]string `json:"pairs"`
		} `json:"labels"`
	}
	data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		return nil, err
	}
	if err := yaml.Unmarshal(data, &kustomization); err != nil {
		return nil, err
	}
	files, err := filepath.Glob(filepath.Join(dir, "bases", "*.yaml"))
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("no CRDs in %s/bases: %v", dir, err)
	}
	var crds []*apiextensionsv1.CustomResourceDefinition
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(data, crd); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		for _, l := range kustomization.Labels {
			for k, v := range l.Pairs {
				if crd.Labels == nil {
					crd.Labels = map[string]string{}
				}
				crd.Labels[k] = v
			}
		}
		crds = append(crds, crd)
	}
	return crds, nil
}

// ModuleDir is the source directory of a module in the build list (module cache or replacement).
func ModuleDir(module string) (string, error) {
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", module)
	cmd.Dir = RepoRoot()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go list -m %s: %v: %s", module, err, stderr.String())
	}
	return strings.TrimSpace(string(out)), nil
}

// RunTests runs m's tests against a started Environment, whose config setup gets first, and
// returns the exit code. Without the envtest binaries the tests run without it (those that need
// it skip themselves).
func RunTests(m *testing.M, setup func(*rest.Config) error) int {
	if !HaveAPIServer() {
		fmt.Fprintf(os.Stderr, "SKIP envtest tests: kube-apiserver/etcd not found in %s (run 'make envtest')\n", AssetsDir())
		return m.Run()
	}
	env, cfg, err := startEnvironment()
	if err == nil {
		err = setup(cfg)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "starting envtest: %v\n", err)
		if env != nil {
			_ = env.Stop()
		}
		return 1
	}
	code := m.Run()
	if err := env.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "stopping envtest: %v\n", err)
	}
	return code
}

// startAttempts bounds the starts of an Environment. envtest picks its API server's port by
// binding port 0 and closing it, so a process started meanwhile (another package's test plane in
// `go test ./...`) can take the port first: the start then fails talking to a stranger
// ("unexpected EOF" installing CRDs), and a new start picks a new port.
const startAttempts = 3

// startEnvironment starts a new Environment, again after a failed start.
func startEnvironment() (*envtest.Environment, *rest.Config, error) {
	var errs []error
	for attempt := 1; attempt <= startAttempts; attempt++ {
		env, err := Environment()
		if err != nil {
			return nil, nil, err
		}
		cfg, err := env.Start()
		if err == nil {
			return env, cfg, nil
		}
		fmt.Fprintf(os.Stderr, "starting envtest (attempt %d of %d): %v\n", attempt, startAttempts, err)
		_ = env.Stop()
		errs = append(errs, err)
	}
	return nil, nil, errors.Join(errs...)
}

// Go runs f (a manager, say) until the test ends: the cleanup cancels f's context and waits up
// to 30 s for f to return, reporting its error.
func Go(t testing.TB, f func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("%s: %v", t.Name(), err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("%s: did not stop within 30s", t.Name())
		}
	})
}
