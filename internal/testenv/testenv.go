// Package testenv finds the envtest binaries built by hack/envtest.sh, for tests that need a real
// kube-apiserver, etcd, kubectl or etcdctl, and measures what a test input costs (Allocated).
package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
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

// RepoRoot returns the repository root, found from this source file's location.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}
