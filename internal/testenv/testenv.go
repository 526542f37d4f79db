// Package testenv finds the envtest binaries built by hack/envtest.sh, for tests that need a real
// kube-apiserver, etcd, kubectl or etcdctl, and measures what a test input costs (Allocated).
package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// Default versions of the envtest binaries, as the Makefile's K8S_VERSION and ETCD_VERSION (which
// it exports, and which override these).
const (
	KubernetesVersion = "v1.36.3"
	EtcdVersion       = "v3.6.14"
)

// CacheDir is where the build scripts cache what they build: GOOFY_CACHE_DIR, else
// $XDG_CACHE_HOME/goofy, else ~/.cache/goofy, the scripts' rule (not os.UserCacheDir, which is
// ~/Library/Caches on macOS, where the scripts never look).
func CacheDir() string {
	if d := os.Getenv("GOOFY_CACHE_DIR"); d != "" {
		return d
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "goofy")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(os.TempDir(), "goofy-cache")
	}
	return filepath.Join(home, ".cache", "goofy")
}

// EnvtestDir is where hack/envtest.sh puts the binaries of K8S_VERSION and ETCD_VERSION.
func EnvtestDir() string {
	k8s, etcd := os.Getenv("K8S_VERSION"), os.Getenv("ETCD_VERSION")
	if k8s == "" {
		k8s = KubernetesVersion
	}
	if etcd == "" {
		etcd = EtcdVersion
	}
	return filepath.Join(CacheDir(), "envtest", "k8s-"+k8s+"-etcd-"+etcd)
}

// AssetsDir returns the directory holding the envtest binaries: KUBEBUILDER_ASSETS when set,
// else the cache hack/envtest.sh fills. It sets KUBEBUILDER_ASSETS so envtest finds it too.
func AssetsDir() string {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir
	}
	dir := EnvtestDir()
	_ = os.Setenv("KUBEBUILDER_ASSETS", dir)
	return dir
}

// Binary returns the path of an envtest binary (kube-apiserver, etcd, kubectl, etcdctl, ...) and
// whether it exists.
func Binary(name string) (string, bool) {
	p := filepath.Join(AssetsDir(), name)
	if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
		return p, true
	}
	if p, err := exec.LookPath(name); err == nil && os.Getenv("GOOFY_ALLOW_PATH_BINARIES") != "" {
		return p, true
	}
	return p, false
}

// HaveAPIServer reports whether kube-apiserver and etcd are available for envtest.
func HaveAPIServer() bool {
	_, a := Binary("kube-apiserver")
	_, e := Binary("etcd")
	return a && e
}

// module is the path of this repository's root module.
const module = "github.com/goofy-capi/cluster-api-provider-goofy"

// RepoRoot returns the repository root: found from this source file's location, or, in a binary
// built with -trimpath (as the Makefile and .ci/run build everything, so that clones share compiled
// packages), as the nearest directory at or above the working directory whose go.mod is this
// module's (go test runs a test in its package's directory).
func RepoRoot() string {
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
	}
	dir, err := os.Getwd()
	if err != nil {
		return "."
	}
	for d := dir; ; d = filepath.Dir(d) {
		if isModuleRoot(d) {
			return d
		}
		if filepath.Dir(d) == d {
			return dir
		}
	}
}

// isModuleRoot reports whether dir holds this module's go.mod.
func isModuleRoot(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return false
	}
	first, _, _ := strings.Cut(string(b), "\n")
	return strings.TrimSpace(first) == "module "+module
}
