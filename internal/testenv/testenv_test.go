package testenv

import (
	"os"
	"path/filepath"
	"testing"
)

// RepoRoot finds the repository whether the test binary was built with -trimpath (the Makefile's
// and CI's default: no absolute source paths) or without it.
func TestRepoRoot(t *testing.T) {
	root := RepoRoot()
	if !isModuleRoot(root) {
		t.Fatalf("RepoRoot() = %q: no go.mod of %s there", root, module)
	}
	if _, err := os.Stat(filepath.Join(root, "internal", "testenv", "testenv.go")); err != nil {
		t.Fatalf("RepoRoot() = %q is not this repository: %v", root, err)
	}
	if isModuleRoot(filepath.Join(root, "test", "helm")) {
		t.Fatalf("test/helm's go.mod is another module's and must not count")
	}
}
