package harness

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/testenv"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// GoofyVersion is the version `make release-manifests` publishes: the repository's VERSION file.
var GoofyVersion = func() string {
	v, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "VERSION"))
	if err != nil {
		panic(fmt.Sprintf("harness: reading VERSION: %v", err))
	}
	return strings.TrimSpace(string(v))
}()

// ClusterctlRepository is a set of clusterctl local repositories and the config file naming them:
// Goofy's from `make release-manifests`, and CAPI's core, kubeadm bootstrap and kubeadm control
// plane built with kustomize from the CAPI module's config/default, as their releases are.
type ClusterctlRepository struct {
	Dir    string
	Config string
	// Log receives clusterctl's progress (its stderr) when set.
	Log io.Writer
}

// BuildClusterctlRepository writes the repositories under dir. It needs kustomize, which
// `make release-manifests` builds into the tools cache.
func BuildClusterctlRepository(ctx context.Context, repoRoot, capiModule, dir string, w io.Writer) (*ClusterctlRepository, error) {
	if _, err := runIn(ctx, repoRoot, w, nil, "make", "-s", "release-manifests", "RELEASE_DIR="+dir); err != nil {
		return nil, err
	}
	kustomize := filepath.Join(cacheDir(), "tools", "kustomize")
	metadata, err := os.ReadFile(filepath.Join(capiModule, "metadata.yaml"))
	if err != nil {
		return nil, err
	}
	type provider struct{ name, typ, repo, component, file string }
	capi := []provider{
		{"cluster-api", "CoreProvider", "cluster-api", "core", "core-components.yaml"},
		{"kubeadm", "BootstrapProvider", "bootstrap-kubeadm", "bootstrap/kubeadm", "bootstrap-components.yaml"},
		{"kubeadm", "ControlPlaneProvider", "control-plane-kubeadm", "controlplane/kubeadm", "control-plane-components.yaml"},
	}
	var cfg strings.Builder
	cfg.WriteString("providers:\n")
	for _, p := range capi {
		vdir := filepath.Join(dir, p.repo, CAPIVersion)
		if err := os.MkdirAll(vdir, 0o755); err != nil {
			return nil, err
		}
		out, err := runIn(ctx, repoRoot, w, nil, kustomize, "build", filepath.Join(capiModule, p.component, "config", "default"))
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(vdir, p.file), []byte(out), 0o644); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(vdir, "metadata.yaml"), metadata, 0o644); err != nil {
			return nil, err
		}
		fmt.Fprintf(&cfg, "- name: %s\n  type: %s\n  url: %s\n", p.name, p.typ, filepath.Join(vdir, p.file))
	}
	fmt.Fprintf(&cfg, "- name: goofy\n  type: InfrastructureProvider\n  url: %s\n",
		filepath.Join(dir, "infrastructure-goofy", GoofyVersion, "infrastructure-components.yaml"))
	// cert-manager's controllers cannot be fetched here; its CRDs are installed by the caller, which
	// is all clusterctl checks (it creates a test Issuer and Certificate).
	cfg.WriteString("cert-manager:\n  externallyProvisioned: \"true\"\n")
	r := &ClusterctlRepository{Dir: dir, Config: filepath.Join(dir, "clusterctl.yaml")}
	return r, os.WriteFile(r.Config, []byte(cfg.String()), 0o644)
}

// Clusterctl runs the clusterctl binary with the repository's config and extra environment
// (template variables), and returns stdout; stderr is in the error.
func (r *ClusterctlRepository) Clusterctl(ctx context.Context, binary string, env []string, args ...string) (string, error) {
	args = append(args, "--config", r.Config)
	cmd := exec.CommandContext(ctx, binary, args...)
	// Own config dir, so overrides and caches of the user's clusterctl are not used or touched.
	cmd.Env = append(os.Environ(), "XDG_CONFIG_HOME="+filepath.Join(r.Dir, "xdg"), "CLUSTERCTL_DISABLE_VERSIONCHECK=true")
	cmd.Env = append(cmd.Env, env...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if r.Log != nil {
		cmd.Stderr = io.MultiWriter(&stderr, r.Log)
	}
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("clusterctl %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// CertManagerVersion is the cert-manager release whose CRDs InstallCertManagerCRDs installs (the
// one clusterctl v1.14 installs by default).
const CertManagerVersion = "v1.21.1"

// InstallCertManagerCRDs installs cert-manager's CRDs from the github.com/cert-manager/cert-manager
// Go module (deploy/crds), downloading the module through the Go toolchain when needed.
func (p *Plane) InstallCertManagerCRDs(ctx context.Context, w io.Writer) error {
	out, err := runIn(ctx, p.opts.RepoRoot, w, nil, "go", "mod", "download", "-json", "github.com/cert-manager/cert-manager@"+CertManagerVersion)
	if err != nil {
		return err
	}
	dir := ""
	for line := range strings.SplitSeq(out, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), `"Dir": "`); ok {
			dir = strings.TrimSuffix(v, `",`)
		}
	}
	if dir == "" {
		return fmt.Errorf("go mod download did not report the cert-manager module directory")
	}
	files, err := filepath.Glob(filepath.Join(dir, "deploy", "crds", "*.yaml"))
	if err != nil {
		return err
	}
	crds, err := readCRDs(files...)
	if err != nil {
		return err
	}
	p.progress("installing %d cert-manager CRDs (%s)", len(crds), CertManagerVersion)
	_, err = envtest.InstallCRDs(p.Config, envtest.CRDInstallOptions{CRDs: crds, MaxTime: time.Minute})
	return err
}
