// Package apiserver serves one simulated workload cluster's store over HTTP the way a real
// kube-apiserver does: discovery, OpenAPI, the REST verbs with their query parameters, watch
// streaming, subresources, JSON/YAML/protobuf and Table/PartialObjectMetadata content types,
// and metav1.Status errors. Authentication and TLS are the caller's (the mux's) business.
package apiserver

import (
	"bytes"
	"fmt"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	utilversion "k8s.io/apimachinery/pkg/util/version"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/apiserver/pkg/endpoints/handlers/negotiation"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// DefaultMaxRequestBodyBytes is the real API server's limit on request bodies (3 MiB).
const DefaultMaxRequestBodyBytes = 3 * 1024 * 1024

// Options tune a cluster's handler. The zero value is usable.
type Options struct {
	// PortForward, when set, serves `pods/<name>/portforward` (GET/POST with an upgrade). The
	// request context carries the parsed *request.RequestInfo (namespace, name). When nil the
	// subresource answers 404.
	PortForward http.Handler
	// Logger receives request errors (V(0)) and a line per request (V(5)). Zero discards.
	Logger logr.Logger
	// MaxRequestBodyBytes bounds request bodies; 0 means DefaultMaxRequestBodyBytes.
	MaxRequestBodyBytes int64
	// Now is the clock of the simulated resource metrics (metrics.go); nil means time.Now. Tests
	// set it to read consecutive metrics windows without waiting for them.
	Now func() time.Time
}

type handler struct {
	c        *store.Cluster
	opts     Options
	log      logr.Logger
	infoFact *apirequest.RequestInfoFactory
	// custom is the discovery of a cluster with CRDs, built when they change.
	custom atomic.Pointer[customDiscovery]
	// customOpenAPI is the OpenAPI service of a cluster with CRDs, built when they change.
	customOpenAPI atomic.Pointer[customOpenAPI]
}

// NewHandler returns the kube-apiserver HTTP surface of one workload cluster's store.
func NewHandler(c *store.Cluster, opts Options) http.Handler {
	if opts.MaxRequestBodyBytes <= 0 {
		opts.MaxRequestBodyBytes = DefaultMaxRequestBodyBytes
	}
	getServing() // build shared codecs and discovery now rather than under the first request
	return &handler{
		c:    c,
		opts: opts,
		log:  opts.Logger.WithValues("cluster", c.Name()),
		infoFact: &apirequest.RequestInfoFactory{
			APIPrefixes:          sets.NewString("api", "apis"),
			GrouplessAPIPrefixes: sets.NewString("api"),
		},
	}
}

// rootPaths is what GET / lists, like a real server (only the paths we serve).
func (h *handler) rootPaths() []string {
	paths := []string{"/api", "/api/v1", "/apis", "/healthz", "/livez", "/openapi/v2", "/openapi/v3", "/openapi/v3/", "/readyz", "/version"}
	for _, g := range h.discovery().groups {
		paths = append(paths, "/apis/"+g.Name)
		for _, v := range g.Versions {
			paths = append(paths, "/apis/"+v.GroupVersion)
		}
	}
	return paths
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer h.recoverPanic(w, r)
	if stream := h.route(w, r); stream != nil {
		// A watch streams from here, once the frames that routed it have returned: its goroutine
		// waits for events for the watch's life, on a stack small enough for the runtime to keep
		// at 8 KiB (with them, 16 KiB).
		stream.run()
	}
}

// recoverPanic answers 500 for a panic of the handler, as kube-apiserver's WithPanicRecovery.
func (h *handler) recoverPanic(w http.ResponseWriter, r *http.Request) {
	p := recover()
	if p == nil {
		return
	}
	if p == http.ErrAbortHandler {
		panic(p)
	}
	buf := make([]byte, 16<<10)
	buf = buf[:runtime.Stack(buf, false)]
	h.log.Error(fmt.Errorf("panic: %v", p), "Recovered from panic serving request", "method", r.Method, "path", r.URL.Path, "stack", string(buf))
	h.writeError(w, r, apierrors.NewInternalError(fmt.Errorf("internal error serving %s %s", r.Method, r.URL.Path)))
}

// route answers the request, or returns the watch it opened, for ServeHTTP to stream.
func (h *handler) route(w http.ResponseWriter, r *http.Request) *watchStream {
	if h.log.V(5).Enabled() {
		user := ""
		if u, ok := apirequest.UserFrom(r.Context()); ok {
			user = u.GetName()
		}
		h.log.V(5).Info("Request", "method", r.Method, "uri", r.URL.RequestURI(), "user", user)
	}

	path := r.URL.Path
	switch {
	case path == "/":
		if !h.readOnly(w, r) {
			return nil
		}
		responsewriters.WriteRawJSON(http.StatusOK, metav1.RootPaths{Paths: h.rootPaths()}, w)
		return nil
	case path == "/healthz" || path == "/livez" || path == "/readyz" ||
		strings.HasPrefix(path, "/healthz/") || strings.HasPrefix(path, "/livez/") || strings.HasPrefix(path, "/readyz/"):
		if !h.readOnly(w, r) {
			return nil
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("ok"))
		return nil
	case path == "/version" || path == "/version/":
		if !h.readOnly(w, r) {
			return nil
		}
		responsewriters.WriteRawJSON(http.StatusOK, versionInfo(h.c.KubernetesVersion()), w)
		return nil
	case path == "/api" || path == "/api/":
		if h.readOnly(w, r) {
			h.serveGroupDiscovery(w, r, true)
		}
		return nil
	case path == "/apis" || path == "/apis/":
		if h.readOnly(w, r) {
			h.serveGroupDiscovery(w, r, false)
		}
		return nil
	case path == "/openapi/v2" || path == "/openapi/v3" || strings.HasPrefix(path, "/openapi/v3/"):
		if h.readOnly(w, r) {
			h.serveOpenAPI(w, r)
		}
		return nil
	}

	info, err := h.requestInfo(r)
	if err != nil {
		h.writeError(w, r, notFound())
		return nil
	}
	if !info.IsResourceRequest {
		parts := splitPath(path)
		if len(parts) >= 2 && len(parts) <= 3 && (parts[0] == "api" || parts[0] == "apis") {
			if !h.readOnly(w, r) {
				return nil
			}
			if h.serveDiscoveryPath(w, r, parts) {
				return nil
			}
		}
		h.writeError(w, r, notFound())
		return nil
	}
	return h.serveResource(w, r, info)
}

// readOnly answers 405 for anything but GET/HEAD on the non-resource paths.
// requestInfo is the request's RequestInfo as the filter chain in front of the handler parsed it
// (the mux's, as kube-apiserver's WithRequestInfo), parsed here only when the handler serves alone.
func (h *handler) requestInfo(r *http.Request) (*apirequest.RequestInfo, error) {
	if info, ok := apirequest.RequestInfoFrom(r.Context()); ok {
		return info, nil
	}
	return h.infoFact.NewRequestInfo(r)
}

func (h *handler) readOnly(w http.ResponseWriter, r *http.Request) bool {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return true
	}
	h.writeError(w, r, apierrors.NewMethodNotSupported(schema.GroupResource{}, strings.ToLower(r.Method)))
	return false
}

// notFound is the Status a real server returns for a path it does not serve.
func notFound() error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusNotFound,
		Reason:  metav1.StatusReasonNotFound,
		Message: "the server could not find the requested resource",
		Details: &metav1.StatusDetails{},
	}}
}

// writeError writes err as a metav1.Status in the negotiated content type (JSON when the client
// accepts nothing we can produce). Errors that are not API errors become 500s.
func (h *handler) writeError(w http.ResponseWriter, r *http.Request, err error) {
	status := responsewriters.ErrorToAPIStatus(err)
	code := int(status.Code)
	if !writeStatusDirect(w, r, status) {
		responsewriters.ErrorNegotiated(err, getServing().meta, metav1.Unversioned, w, r)
	}
	if code >= 500 {
		h.log.Error(err, "Request failed", "method", r.Method, "uri", r.URL.RequestURI(), "code", code)
	}
}

// writeStatusDirect writes a small Status as upstream's ErrorNegotiated does, straight through the
// negotiated serializer rather than the versioning codec, tracing and deferred writer that a
// general response needs: controllers probe for absent objects all the time, and a 404 should
// cost what a GET costs. It reports false for what it leaves to ErrorNegotiated (pretty output,
// Retry-After, 204, anything it cannot negotiate).
func writeStatusDirect(w http.ResponseWriter, r *http.Request, status *metav1.Status) bool {
	if !directStatus(status) {
		return false
	}
	_, info, err := negotiation.NegotiateOutputMediaType(r, getServing().meta, negotiation.DefaultEndpointRestrictions)
	if err != nil {
		return false
	}
	return writeStatusWith(w, status, info)
}

// directStatus reports whether writeStatusWith may write status.
func directStatus(status *metav1.Status) bool {
	return status.Code != http.StatusNoContent && (status.Details == nil || status.Details.RetryAfterSeconds == 0)
}

// writeStatusWith writes status with a serializer negotiated for the request already (a GET
// negotiated it for the object it did not find), unless that is the pretty one.
func writeStatusWith(w http.ResponseWriter, status *metav1.Status, info kruntime.SerializerInfo) bool {
	if info.Serializer == info.PrettySerializer {
		return false
	}
	out := *status
	out.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Status"}
	var buf bytes.Buffer
	if err := info.Serializer.Encode(&out, &buf); err != nil {
		return false
	}
	hdr := w.Header()
	hdr.Set("Content-Type", info.MediaType)
	hdr.Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(int(status.Code))
	_, _ = w.Write(buf.Bytes())
	return true
}

// versionInfo renders /version for the cluster's Kubernetes version, e.g. "v1.36.3".
func versionInfo(v string) version.Info {
	info := version.Info{
		GitVersion:   v,
		GitTreeState: "clean",
		BuildDate:    "1970-01-01T00:00:00Z",
		GoVersion:    runtime.Version(),
		Compiler:     runtime.Compiler,
		Platform:     runtime.GOOS + "/" + runtime.GOARCH,
	}
	if sv, err := utilversion.ParseGeneric(v); err == nil {
		info.Major = fmt.Sprint(sv.Major())
		info.Minor = fmt.Sprint(sv.Minor())
		info.EmulationMajor, info.EmulationMinor = info.Major, info.Minor
		info.MinCompatibilityMajor = info.Major
		info.MinCompatibilityMinor = fmt.Sprint(max(int(sv.Minor())-1, 0))
	}
	return info
}

// restrictions decide which media type transforms an endpoint accepts (mirrors upstream's
// RequestScope): Table only in JSON/YAML, PartialObjectMetadata(List) anywhere.
type restrictions struct{ transforms bool }

func (rs restrictions) AllowsMediaTypeTransform(mimeType, mimeSubType string, gvk *schema.GroupVersionKind) bool {
	if gvk == nil {
		return true
	}
	if !rs.transforms || (gvk.Group != metav1.GroupName) || (gvk.Version != "v1" && gvk.Version != "v1beta1") {
		return false
	}
	switch gvk.Kind {
	case "Table":
		return mimeType == "application" && (mimeSubType == "json" || mimeSubType == "yaml")
	case "PartialObjectMetadata", "PartialObjectMetadataList":
		return true
	}
	return false
}
func (restrictions) AllowsServerVersion(string) bool  { return false }
func (restrictions) AllowsStreamSchema(s string) bool { return s == "watch" }

var _ negotiation.EndpointRestrictions = restrictions{}
