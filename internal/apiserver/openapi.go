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

	"k8s.io/apiextensions-apiserver/pkg/controller/openapi/builder"
	"k8s.io/kube-openapi/pkg/cached"
	openapiv2 "k8s.io/kube-openapi/pkg/handler"
	"k8s.io/kube-openapi/pkg/handler3"
	"k8s.io/kube-openapi/pkg/spec3"
	"k8s.io/kube-openapi/pkg/validation/spec"
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
	// builtinV3 and builtinV2 are the embedded documents, parsed on first use and shared by every
	// cluster's OpenAPI service.
	builtinV3 map[string]cached.Value[*spec3.OpenAPI]
	builtinV2 cached.Value[*spec.Swagger]
)

// loadBuiltinOpenAPI prepares the lazily parsed embedded documents once.
func loadBuiltinOpenAPI() {
	builtinV3 = map[string]cached.Value[*spec3.OpenAPI]{}
	for _, gvPath := range servedGVPaths() {
		file := openAPIFile(gvPath)
		if _, err := openAPIFiles.Open(file); err != nil {
			continue
		}
		builtinV3[gvPath] = cached.Once(cached.Func(func() (*spec3.OpenAPI, string, error) {
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
	if _, err := openAPIFiles.Open(openAPIV2File); err == nil {
		builtinV2 = cached.Once(cached.Func(func() (*spec.Swagger, string, error) {
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
	}
}

// openAPIHandler registers upstream's OpenAPI v2/v3 handlers (ETags, hashes in the index,
// JSON and protobuf) over the served group-versions, for clusters without CRDs. Documents are
// parsed lazily, on the first request for each, and shared by every cluster.
func openAPIHandler() http.Handler {
	openAPIOnce.Do(func() {
		loadBuiltinOpenAPI()
		openAPIMux = newOpenAPIMux(nil, builtinV2)
	})
	return openAPIMux
}

// newOpenAPIMux serves the built-in documents plus custom group-versions' (v3) and the v2
// document given.
func newOpenAPIMux(custom map[string]cached.Value[*spec3.OpenAPI], v2doc cached.Value[*spec.Swagger]) *http.ServeMux {
	mux := http.NewServeMux()
	v3 := handler3.NewOpenAPIService()
	for gvPath, doc := range builtinV3 {
		v3.UpdateGroupVersionLazy(gvPath, doc)
	}
	for gvPath, doc := range custom {
		v3.UpdateGroupVersionLazy(gvPath, doc)
	}
	_ = v3.RegisterOpenAPIV3VersionedService("/openapi/v3", prefixMux{mux})
	if v2doc != nil {
		openapiv2.NewOpenAPIServiceLazy(v2doc).RegisterOpenAPIVersionedService("/openapi/v2", mux)
	}
	return mux
}

// customOpenAPI is the OpenAPI service of a cluster whose CRDs define resources.
type customOpenAPI struct {
	generation uint64
	mux        *http.ServeMux
}

// openAPIDocs is what a CRD-defined version publishes (kinds' custom resource strategies).
type openAPIDocs interface {
	OpenAPIV3() (*spec3.OpenAPI, error)
	OpenAPIV2() (*spec.Swagger, error)
}

// openAPI returns the cluster's OpenAPI service: the shared one while no CRD defines a resource,
// else one that adds the custom group-versions' documents (built by apiextensions-apiserver's
// builder, merged per group-version as upstream merges them) and merges them into v2. It is
// rebuilt when the CRDs change; documents are still built only when asked for.
func (h *handler) openAPI() http.Handler {
	shared := openAPIHandler()
	gen := h.c.CustomResourcesGeneration()
	if gen == 0 {
		return shared
	}
	if cur := h.customOpenAPI.Load(); cur != nil && cur.generation == gen {
		return cur.mux
	}
	infos, gen := h.c.CustomResources()
	byGV := map[string][]openAPIDocs{}
	var all []openAPIDocs
	for _, ri := range infos {
		_, s, ok := h.c.CustomResource(ri.GVR)
		docs, isDocs := s.(openAPIDocs)
		if !ok || !isDocs {
			continue
		}
		p := "apis/" + ri.GVR.Group + "/" + ri.GVR.Version
		byGV[p] = append(byGV[p], docs)
		all = append(all, docs)
	}
	custom := map[string]cached.Value[*spec3.OpenAPI]{}
	for gvPath, docs := range byGV {
		custom[gvPath] = cached.Once(cached.Func(func() (*spec3.OpenAPI, string, error) {
			var specs []*spec3.OpenAPI
			for _, d := range docs {
				doc, err := d.OpenAPIV3()
				if err != nil {
					return nil, "", err
				}
				specs = append(specs, doc)
			}
			merged, err := builder.MergeSpecsV3(specs...)
			if err != nil {
				return nil, "", err
			}
			return merged, fmt.Sprintf("%s-%d", gvPath, gen), nil
		}))
	}
	var v2 cached.Value[*spec.Swagger]
	if builtinV2 != nil {
		v2 = cached.Once(cached.Func(func() (*spec.Swagger, string, error) {
			static, _, err := builtinV2.Get()
			if err != nil {
				return nil, "", err
			}
			var specs []*spec.Swagger
			for _, d := range all {
				doc, err := d.OpenAPIV2()
				if err != nil {
					return nil, "", err
				}
				specs = append(specs, doc)
			}
			merged, err := builder.MergeSpecs(static, specs...)
			if err != nil {
				return nil, "", err
			}
			return merged, fmt.Sprintf("v2-%d", gen), nil
		}))
	}
	mux := newOpenAPIMux(custom, v2)
	h.customOpenAPI.Store(&customOpenAPI{generation: gen, mux: mux})
	return mux
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
	for _, ri := range servedResources() {
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
func (h *handler) serveOpenAPI(w http.ResponseWriter, r *http.Request) {
	h.openAPI().ServeHTTP(w, r)
}

// prefixMux adapts http.ServeMux to kube-openapi's PathHandlerByGroupVersion.
type prefixMux struct{ *http.ServeMux }

func (m prefixMux) HandlePrefix(path string, h http.Handler) {
	m.Handle(strings.TrimSuffix(path, "/")+"/", h)
}
