// Package image tests the Docker-free image build (hack/tools/imagebuild, `make image`) by reading
// the tarball it writes with nothing but archive/tar and encoding/json, i.e. as `docker load` would.
package image

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/testenv"
)

// dockerManifest is one entry of a docker-save tarball's manifest.json.
type dockerManifest struct {
	Config   string
	RepoTags []string
	Layers   []string
}

// imageConfig is the part of the OCI image config the test checks.
type imageConfig struct {
	OS           string `json:"os"`
	Architecture string `json:"architecture"`
	Config       struct {
		Entrypoint []string          `json:"Entrypoint"`
		User       string            `json:"User"`
		Labels     map[string]string `json:"Labels"`
	} `json:"config"`
	RootFS struct {
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
}

func buildImage(t *testing.T, binary, out string) ([]byte, error) {
	cmd := exec.Command("go", "-C", filepath.Join(testenv.RepoRoot(), "hack", "tools"), "run", "./imagebuild",
		"--binary", binary, "--out", out, "--tag", "cluster-api-provider-goofy:test",
		"--label", "org.opencontainers.image.version=v9.8.7", "--label", "org.opencontainers.image.revision=abc123")
	return cmd.CombinedOutput()
}

func TestImageTarball(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "hello")
	build := exec.Command("go", "build", "-trimpath", "-o", bin, "./testdata/hello")
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	out, err := build.CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), string(out))

	tarPath := filepath.Join(dir, "image.tar")
	out, err = buildImage(t, bin, tarPath)
	g.Expect(err).NotTo(HaveOccurred(), string(out))

	files := readTar(g, tarPath)
	var manifests []dockerManifest
	g.Expect(json.Unmarshal(files["manifest.json"], &manifests)).To(Succeed())
	g.Expect(manifests).To(HaveLen(1))
	m := manifests[0]
	g.Expect(m.RepoTags).To(ConsistOf(ContainSubstring("cluster-api-provider-goofy:test")))
	g.Expect(m.Layers).To(HaveLen(1))

	var cfg imageConfig
	g.Expect(json.Unmarshal(files[m.Config], &cfg)).To(Succeed())
	g.Expect(cfg.OS).To(Equal("linux"))
	g.Expect(cfg.Config.Entrypoint).To(Equal([]string{"/manager"}))
	g.Expect(cfg.Config.User).To(Equal("65532:65532"), "the manager must run as the non-root user")
	g.Expect(cfg.RootFS.DiffIDs).To(HaveLen(1))
	g.Expect(cfg.Config.Labels).To(Equal(map[string]string{
		"org.opencontainers.image.version": "v9.8.7", "org.opencontainers.image.revision": "abc123"}), "the OCI labels given")

	// The layer holds the binary, executable, byte for byte, and a passwd entry for the user.
	layer := readTarBytes(g, files[m.Layers[0]])
	want, err := os.ReadFile(bin)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(layer).To(HaveKey("manager"))
	g.Expect(bytes.Equal(layer["manager"].data, want)).To(BeTrue(), "the layer's /manager differs from the binary")
	g.Expect(layer["manager"].mode & 0o111).NotTo(BeZero())
	g.Expect(string(layer["etc/passwd"].data)).To(ContainSubstring("nonroot:x:65532:65532:"))
	g.Expect(layer).To(HaveKey("tmp/"))
}

func TestImageRefusesNonELF(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	script := filepath.Join(dir, "manager")
	g.Expect(os.WriteFile(script, []byte("#!/bin/sh\necho hi\n"), 0o755)).To(Succeed())
	out, err := buildImage(t, script, filepath.Join(dir, "image.tar"))
	g.Expect(err).To(HaveOccurred())
	g.Expect(string(out)).To(ContainSubstring("not an ELF binary"))
	_, statErr := os.Stat(filepath.Join(dir, "image.tar"))
	g.Expect(os.IsNotExist(statErr)).To(BeTrue(), "no tarball for a refused binary")
}

type entry struct {
	mode int64
	data []byte
}

func readTar(g Gomega, path string) map[string][]byte {
	data, err := os.ReadFile(path)
	g.Expect(err).NotTo(HaveOccurred())
	out := map[string][]byte{}
	for name, e := range readTarBytes(g, data) {
		out[name] = e.data
	}
	return out
}

// readTarBytes reads a tar stream, gunzipping it first when it is compressed (layers are).
func readTarBytes(g Gomega, data []byte) map[string]entry {
	r := io.Reader(bytes.NewReader(data))
	if len(data) > 2 && data[0] == 0x1f && data[1] == 0x8b {
		zr, err := gzip.NewReader(bytes.NewReader(data))
		g.Expect(err).NotTo(HaveOccurred())
		r = zr
	}
	tr := tar.NewReader(r)
	out := map[string]entry{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		g.Expect(err).NotTo(HaveOccurred())
		body, err := io.ReadAll(tr)
		g.Expect(err).NotTo(HaveOccurred())
		out[strings.TrimPrefix(h.Name, "/")] = entry{mode: h.Mode, data: body}
	}
}
