package apiserver

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// TestDumpOpenAPI regenerates the embedded OpenAPI documents from a real kube-apiserver
// (`go generate ./internal/apiserver`). It only runs when GOOFY_DUMP_OPENAPI=1, because it
// rewrites files in the source tree.
func TestDumpOpenAPI(t *testing.T) {
	if os.Getenv("GOOFY_DUMP_OPENAPI") != "1" {
		t.Skip("set GOOFY_DUMP_OPENAPI=1 to regenerate the embedded OpenAPI documents")
	}
	assets := envtestAssets("kube-apiserver")
	if assets == "" {
		t.Fatal("kube-apiserver binary not found; run hack/envtest.sh or set KUBEBUILDER_ASSETS")
	}
	// Generous start timeout: this runs on shared, busy CI machines.
	env := &envtest.Environment{BinaryAssetsDirectory: assets, ControlPlaneStartTimeout: 5 * time.Minute}
	cfg, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Stop() }()

	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rc := dc.RESTClient()
	get := func(path string) []byte {
		c, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		data, err := rc.Get().AbsPath(path).SetHeader("Accept", "application/json").Do(c).Raw()
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		return data
	}
	write := func(name string, data []byte) {
		// Re-indent compactly so the stored bytes do not depend on the server's formatting.
		var v any
		if err := json.Unmarshal(data, &v); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		compact, _ := json.Marshal(v)
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		_, _ = zw.Write(compact)
		_ = zw.Close()
		if err := os.WriteFile(filepath.FromSlash(name), buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s (%d bytes)", name, buf.Len())
	}

	var index struct {
		Paths map[string]struct {
			ServerRelativeURL string `json:"serverRelativeURL"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(get("/openapi/v3"), &index); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(openAPIDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range servedGVPaths() {
		if _, ok := index.Paths[p]; !ok {
			t.Fatalf("real kube-apiserver does not serve %s", p)
		}
		write(openAPIFile(p), get("/openapi/v3/"+p))
	}
	write(openAPIV2File, get("/openapi/v2"))
}
