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
)

// CAPIVersion is the Cluster API release the harness builds and runs; keep in step with go.mod.
const CAPIVersion = "v1.14.2"

// Binaries locates everything the plane runs.
type Binaries struct {
	// Assets holds etcd, kube-apiserver, kubectl and plane-controllers (hack/envtest.sh).
	Assets string
	// PlaneControllers runs kube-controller-manager's garbage collector and namespace controller
	// (hack/plane-controllers; normally inside Assets).
	PlaneControllers string
	// CAPI holds cluster-api-manager, kubeadm-bootstrap-manager, kubeadm-control-plane-manager and
	// clusterctl (hack/capi-managers.sh).
	CAPI string
	// CAPIModule is the source of sigs.k8s.io/cluster-api (CRDs and webhook manifests).
	CAPIModule string
	// Goofy is the Goofy manager binary.
	Goofy string
}

// Kubectl returns the kubectl binary's path.
func (b Binaries) Kubectl() string { return filepath.Join(b.Assets, "kubectl") }

// Clusterctl returns the clusterctl binary's path.
func (b Binaries) Clusterctl() string { return filepath.Join(b.CAPI, "clusterctl") }

func (b Binaries) check(needGoofy bool) error {
	need := []string{
		filepath.Join(b.Assets, "etcd"), filepath.Join(b.Assets, "kube-apiserver"), b.PlaneControllers,
		filepath.Join(b.CAPI, "cluster-api-manager"), filepath.Join(b.CAPI, "kubeadm-bootstrap-manager"),
		filepath.Join(b.CAPI, "kubeadm-control-plane-manager"),
	}
	if needGoofy {
		need = append(need, b.Goofy)
	}
	for _, f := range need {
		if _, err := lookBinary(filepath.Dir(f), filepath.Base(f)); err != nil {
			return missing(f)
		}
	}
	if _, err := os.Stat(filepath.Join(b.CAPIModule, "core", "config", "crd", "bases")); err != nil {
		return missing("sigs.k8s.io/cluster-api module source at " + b.CAPIModule)
	}
	return nil
}

// cacheDir is where hack/*.sh keep their builds.
func cacheDir() string { return testenv.CacheDir() }

// DefaultBinaries returns where the build scripts put the binaries, without building anything:
// KUBEBUILDER_ASSETS (else the envtest cache), the CAPI cache, the CAPI module in the module cache
// and <repoRoot>/bin/goofy-e2e-manager. Environment overrides: GOOFY_CAPI_BIN_DIR, GOOFY_MANAGER,
// GOOFY_MANAGER_PREBUILT (PrebuiltManagerEnv).
func DefaultBinaries(repoRoot string) Binaries {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		assets = testenv.EnvtestDir()
	}
	controllers := filepath.Join(assets, "plane-controllers")
	if _, err := os.Stat(controllers); err != nil {
		// KUBEBUILDER_ASSETS may point elsewhere; the harness's own build lands in the cache.
		controllers = filepath.Join(testenv.EnvtestDir(), "plane-controllers")
	}
	capi := os.Getenv("GOOFY_CAPI_BIN_DIR")
	if capi == "" {
		capi = filepath.Join(cacheDir(), "capi", CAPIVersion)
	}
	goofy := os.Getenv("GOOFY_MANAGER")
	if prebuilt := os.Getenv(PrebuiltManagerEnv); prebuilt != "" {
		goofy = prebuilt
	}
	if goofy == "" {
		goofy = filepath.Join(repoRoot, "bin", "goofy-e2e-manager")
	}
	return Binaries{Assets: assets, PlaneControllers: controllers, CAPI: capi, CAPIModule: capiModuleDir(), Goofy: goofy}
}

// capiModuleDir finds the CAPI module in the module cache without the network.
func capiModuleDir() string {
	modCache := os.Getenv("GOMODCACHE")
	if modCache == "" {
		out, err := exec.Command("go", "env", "GOMODCACHE").Output()
		if err == nil {
			modCache = strings.TrimSpace(string(out))
		}
	}
	return filepath.Join(modCache, "sigs.k8s.io", "cluster-api@"+CAPIVersion)
}

// EnsureBinaries builds whatever is missing, showing the build scripts' progress on w: the envtest
// binaries including plane-controllers (hack/envtest.sh), the CAPI managers and clusterctl
// (hack/capi-managers.sh), and the Goofy manager from repoRoot (always rebuilt; Go's build cache
// makes that quick when nothing changed).
func EnsureBinaries(ctx context.Context, repoRoot string, w io.Writer) (Binaries, error) {
	// An empty KUBEBUILDER_ASSETS makes the script build into (and report) its cache, plane-controllers included.
	env := []string{"KUBEBUILDER_ASSETS=", "ENVTEST_BINARIES=kube-apiserver kubectl etcd etcdctl plane-controllers"}
	assets, err := runScript(ctx, repoRoot, w, env, "hack/envtest.sh")
	if err != nil {
		return Binaries{}, err
	}
	capi, err := runScript(ctx, repoRoot, w, nil, "hack/capi-managers.sh")
	if err != nil {
		return Binaries{}, err
	}
	// The CRDs and webhook manifests come from the module source.
	if _, err := runIn(ctx, repoRoot, w, nil, "go", "mod", "download", "sigs.k8s.io/cluster-api@"+CAPIVersion); err != nil {
		return Binaries{}, err
	}
	b := DefaultBinaries(repoRoot)
	b.Assets, b.CAPI = assets, capi
	if _, err := os.Stat(filepath.Join(assets, "plane-controllers")); err == nil {
		b.PlaneControllers = filepath.Join(assets, "plane-controllers")
	}
	if err := BuildGoofy(ctx, repoRoot, b.Goofy, w); err != nil {
		return Binaries{}, err
	}
	return b, b.check(true)
}

// PrebuiltManagerEnv names a Goofy manager binary built once for a whole run (make test-all builds
// it with `make build`): every plane of the run runs it, and BuildGoofy builds nothing.
const PrebuiltManagerEnv = "GOOFY_MANAGER_PREBUILT"

// BuildGoofy builds the Goofy manager (the repository's main package) into out, unless the run
// brings one (PrebuiltManagerEnv).
func BuildGoofy(ctx context.Context, repoRoot, out string, w io.Writer) error {
	if prebuilt := os.Getenv(PrebuiltManagerEnv); prebuilt != "" {
		if _, err := os.Stat(prebuilt); err != nil {
			return fmt.Errorf("%s: %w", PrebuiltManagerEnv, err)
		}
		if out != prebuilt {
			return fmt.Errorf("%s is %s, but the Goofy manager is wanted at %s", PrebuiltManagerEnv, prebuilt, out)
		}
		fmt.Fprintf(w, "[build] goofy manager: %s, built for the whole run\n", prebuilt)
		return nil
	}
	fmt.Fprintf(w, "[build] goofy manager -> %s\n", out)
	start := time.Now()
	// The version the manager reports, as `make build` sets it: VERSION and the commit.
	ldflags := ""
	if v, err := os.ReadFile(filepath.Join(repoRoot, "VERSION")); err == nil {
		ldflags = "-X sigs.k8s.io/cluster-api/version.gitVersion=" + strings.TrimSpace(string(v))
		if commit, err := runIn(ctx, repoRoot, io.Discard, nil, "git", "rev-parse", "HEAD"); err == nil {
			ldflags += " -X sigs.k8s.io/cluster-api/version.gitCommit=" + strings.TrimSpace(commit)
		}
	}
	// Built beside out and renamed over it: a plane of another test process may be running the
	// binary at out, and the rename leaves its file intact.
	tmp := fmt.Sprintf("%s.%d.tmp", out, os.Getpid())
	if _, err := runIn(ctx, repoRoot, w, nil, "go", "build", "-ldflags", ldflags, "-o", tmp, "."); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, out); err != nil {
		os.Remove(tmp)
		return err
	}
	fmt.Fprintf(w, "[build] goofy manager built in %s\n", time.Since(start).Round(time.Second))
	return nil
}

// Check reports a missing binary (IsMissingBinary) or module source; the Goofy manager only when needGoofy.
func (b Binaries) Check(needGoofy bool) error { return b.check(needGoofy) }

// runScript runs a build script and returns the last line of its stdout (the directory it built into).
func runScript(ctx context.Context, repoRoot string, w io.Writer, env []string, script string) (string, error) {
	out, err := runIn(ctx, repoRoot, w, env, filepath.Join(repoRoot, script))
	if err != nil {
		return "", err
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return strings.TrimSpace(lines[len(lines)-1]), nil
}

func runIn(ctx context.Context, dir string, w io.Writer, env []string, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out strings.Builder
	cmd.Stdout = &out
	cmd.Stderr = w
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
	}
	return out.String(), nil
}
