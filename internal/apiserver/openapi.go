package apiserver

import (
	"compress/gzip"
	"embed"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"strings"
	"sync"

	"k8s.io/kube-openapi/pkg/cached"
	openapiv2 "k8s.io/kube-openapi/pkg/handler"
	"k8s.io/kube-openapi/pkg/handler3"
	"k8s.io/kube-openapi/pkg/spec3"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// The OpenAPI documents are the real kube-apiserver's (same version as the client libraries),
// dumped by TestDumpOpenAPI (see openapi_dump_test.go) and stored gzipped. Serving the genuine
// documents is what makes `kubectl apply` find fieldValidation support, compute strategic merge
// patches from x-kubernetes-patch-* extensions, and `kubectl explain` work.
//
//go:generate env GOOFY_DUMP_OPENAPI=1 go test -run TestDumpOpenAPI -count=1 .
//go:embed openapi
var openAPIFiles embed.FS

const openAPIDir = "openapi"

// openAPIFile names the stored document of a v3 group-version path ("apis/apps/v1").
func openAPIFile(gvPath string) string {
	return openAPIDir + "/v3_" + strings.ReplaceAll(gvPath, "/", "_") + ".json.gz"
}

const openAPIV2File = openAPIDir + "/v2.json.gz"

func gunzipFile(name string) ([]byte, error) {
	f, err := openAPIFiles.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, err
	}
	return io.ReadAll(zr)
}

var (
	openAPIOnce sync.Once
	openAPIMux  *http.ServeMux
)

// openAPIHandler registers upstream's OpenAPI v2/v3 handlers (ETags, hashes in the index,
// JSON and protobuf) over the served group-versions. Documents are parsed lazily, on the first
// request for each, and shared by every cluster.
func openAPIHandler() http.Handler {
	openAPIOnce.Do(func() {
		mux := http.NewServeMux()
		v3 := handler3.NewOpenAPIService()
		for _, gvPath := range servedGVPaths() {
			file := openAPIFile(gvPath)
			if _, err := openAPIFiles.Open(file); err != nil {
				continue
			}
			v3.UpdateGroupVersionLazy(gvPath, cached.Func(func() (*spec3.OpenAPI, string, error) {
				data, err := gunzipFile(file)
				if err != nil {
					return nil, "", err
				}
				doc := &spec3.OpenAPI{}
				if err := json.Unmarshal(data, doc); err != nil {
					return nil, "", fmt.Errorf("parsing %s: %w", file, err)
				}
				return doc, etagOf(data), nil
			}))
		}
		_ = v3.RegisterOpenAPIV3VersionedService("/openapi/v3", prefixMux{mux})
		if _, err := openAPIFiles.Open(openAPIV2File); err == nil {
			v2 := openapiv2.NewOpenAPIServiceLazy(cached.Func(func() (*spec.Swagger, string, error) {
				data, err := gunzipFile(openAPIV2File)
				if err != nil {
					return nil, "", err
				}
				doc := &spec.Swagger{}
				if err := json.Unmarshal(data, doc); err != nil {
					return nil, "", fmt.Errorf("parsing %s: %w", openAPIV2File, err)
				}
				return doc, etagOf(data), nil
			}))
			v2.RegisterOpenAPIVersionedService("/openapi/v2", mux)
		}
		openAPIMux = mux
	})
	return openAPIMux
}

// etagOf fingerprints a document for the lazy cache (the handlers hash what they render).
func etagOf(data []byte) string {
	h := fnv.New64a()
	_, _ = h.Write(data)
	return fmt.Sprintf("%X", h.Sum64())
}

// servedGVPaths lists the OpenAPI v3 paths of the group-versions we serve.
func servedGVPaths() []string {
	var out []string
	seen := map[string]bool{}
	for _, ri := range store.Resources() {
		gv := ri.GVR.GroupVersion()
		p := "api/" + gv.Version
		if gv.Group != "" {
			p = "apis/" + gv.Group + "/" + gv.Version
		}
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out
}

// serveOpenAPI answers /openapi/v2 and /openapi/v3[/...]; upstream answers 404 with a plain body
// for unknown group-versions, and so do we.
func serveOpenAPI(w http.ResponseWriter, r *http.Request) {
	openAPIHandler().ServeHTTP(w, r)
}

// prefixMux adapts http.ServeMux to kube-openapi's PathHandlerByGroupVersion.
type prefixMux struct{ *http.ServeMux }

func (m prefixMux) HandlePrefix(path string, h http.Handler) {
	m.Handle(strings.TrimSuffix(path, "/")+"/", h)
}
