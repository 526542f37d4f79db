// Package testenv finds the envtest binaries built by hack/envtest.sh, for tests that need a real
// kube-apiserver, etcd, kubectl or etcdctl.
package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
)

// Default versions; keep in step with the Makefile.
const (
	KubernetesVersion = "v1.36.3"
	EtcdVersion       = "v3.6.14"
)

// AssetsDir returns the directory holding the envtest binaries: KUBEBUILDER_ASSETS when set,
// else the cache hack/envtest.sh fills. It sets KUBEBUILDER_ASSETS so envtest finds it too.
func AssetsDir() string {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir
	}
	cache := os.Getenv("GOOFY_CACHE_DIR")
	if cache == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			return ""
		}
		cache = filepath.Join(base, "goofy")
	}
	dir := filepath.Join(cache, "envtest", "k8s-"+KubernetesVersion+"-etcd-"+EtcdVersion)
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
