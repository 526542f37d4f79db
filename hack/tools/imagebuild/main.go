// Command imagebuild assembles the Goofy manager's container image without a Docker engine: one
// layer holding the static manager binary at /manager, a passwd/group entry for the non-root user
// 65532 ("nonroot") and the build host's CA bundle (the Azure backend talks TLS to ARM), on an empty
// base, with the labels given (OCI annotations: source, version, revision). It writes a Docker
// archive (`docker load`/`podman load`; not an OCI image layout). go-containerregistry does the
// image format work (manifest, config, digests), so this program only decides the content.
package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

const nonRoot = 65532

func main() {
	binary := flag.String("binary", "", "static linux manager binary to put at /manager")
	out := flag.String("out", "", "image tarball to write")
	tag := flag.String("tag", "cluster-api-provider-goofy:dev", "image reference recorded in the tarball")
	caBundle := flag.String("ca-bundle", "/etc/ssl/certs/ca-certificates.crt", "CA bundle to include (skipped when absent)")
	arch := flag.String("arch", runtime.GOARCH, "image architecture (must match the binary)")
	labels := labelFlag{}
	flag.Var(labels, "label", "image label key=value (repeatable), e.g. org.opencontainers.image.version=v0.1.0")
	flag.Parse()
	if err := build(*binary, *out, *tag, *caBundle, *arch, labels); err != nil {
		fmt.Fprintln(os.Stderr, "imagebuild:", err)
		os.Exit(1)
	}
}

// labelFlag collects repeated --label key=value flags.
type labelFlag map[string]string

func (l labelFlag) String() string { return fmt.Sprint(map[string]string(l)) }

func (l labelFlag) Set(v string) error {
	key, value, ok := strings.Cut(v, "=")
	if !ok || key == "" {
		return fmt.Errorf("label %q is not key=value", v)
	}
	l[key] = value
	return nil
}

func build(binary, out, tag, caBundle, arch string, labels map[string]string) error {
	if binary == "" || out == "" {
		return errors.New("--binary and --out are required")
	}
	bin, err := os.ReadFile(binary)
	if err != nil {
		return err
	}
	if err := checkStatic(binary); err != nil {
		return err
	}
	ref, err := name.NewTag(tag)
	if err != nil {
		return fmt.Errorf("--tag: %w", err)
	}
	var ca []byte
	if caBundle != "" {
		if ca, err = os.ReadFile(caBundle); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	layerTar, err := rootfs(bin, ca)
	if err != nil {
		return err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layerTar)), nil })
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", arch
	cfg.Created = v1.Time{Time: time.Unix(0, 0).UTC()}
	cfg.Config.Entrypoint = []string{"/manager"}
	cfg.Config.User = fmt.Sprintf("%d:%d", nonRoot, nonRoot)
	cfg.Config.WorkingDir = "/"
	cfg.Config.Env = []string{"PATH=/", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"}
	if len(labels) > 0 {
		cfg.Config.Labels = labels
	}
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	if err := tarball.WriteToFile(out, ref, img); err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("wrote %s (%s, %s)\n", out, ref.String(), digest)
	return nil
}

// checkStatic refuses binaries that need a dynamic loader: the image has no libc.
func checkStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("%s is not an ELF binary: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked; build it with CGO_ENABLED=0", path)
		}
	}
	return nil
}

// rootfs returns the single layer: fixed timestamps so equal inputs give equal digests.
func rootfs(bin, ca []byte) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mtime := time.Unix(0, 0)
	dir := func(name string, uid int, mode int64) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode, Uid: uid, Gid: uid, ModTime: mtime})
	}
	file := func(name string, mode int64, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data)), ModTime: mtime}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", nonRoot, nonRoot)
	group := fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", nonRoot)
	steps := []func() error{
		func() error { return dir("etc", 0, 0o755) },
		func() error { return file("etc/passwd", 0o644, []byte(passwd)) },
		func() error { return file("etc/group", 0o644, []byte(group)) },
		func() error { return dir("home", 0, 0o755) },
		func() error { return dir("home/nonroot", nonRoot, 0o700) },
		func() error { return dir("tmp", 0, 0o1777) },
		func() error { return file("manager", 0o755, bin) },
	}
	if len(ca) > 0 {
		steps = append(steps,
			func() error { return dir("etc/ssl", 0, 0o755) },
			func() error { return dir("etc/ssl/certs", 0, 0o755) },
			func() error { return file("etc/ssl/certs/ca-certificates.crt", 0o644, ca) })
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
