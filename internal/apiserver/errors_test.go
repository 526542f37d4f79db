package apiserver

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/endpoints/handlers/negotiation"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
)

const cmPath = "/api/v1/namespaces/default/configmaps"

// TestErrorStatuses checks every error class answers a metav1.Status with upstream's code and
// reason.
func TestErrorStatuses(t *testing.T) {
	env := newTestEnv(t, Options{})
	js := "application/json"
	okCM := `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"exists"}}`
	if code, _, body := env.do(t, http.MethodPost, cmPath, js, "", okCM); code != http.StatusCreated {
		t.Fatalf("seed create: %d %s", code, body)
	}
	big := `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"big"},"data":{"x":"` + strings.Repeat("a", 4<<20) + `"}}`

	cases := []struct {
		name, method, path, ctype, accept, body string
		code                                    int
		reason                                  metav1.StatusReason
	}{
		{"malformed body", "POST", cmPath, js, "", `{"apiVersion":"v1","kind":"ConfigMap",`, 400, metav1.StatusReasonBadRequest},
		{"kind mismatch", "POST", cmPath, js, "", `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"x"}}`, 400, metav1.StatusReasonBadRequest},
		{"version mismatch", "POST", cmPath, js, "", `{"apiVersion":"apps/v1","kind":"ConfigMap","metadata":{"name":"x"}}`, 400, metav1.StatusReasonBadRequest},
		{"namespace mismatch", "POST", cmPath, js, "", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x","namespace":"kube-system"}}`, 400, metav1.StatusReasonBadRequest},
		{"name mismatch on update", "PUT", cmPath + "/exists", js, "", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"other"}}`, 400, metav1.StatusReasonBadRequest},
		{"unknown field strict", "POST", cmPath + "?fieldValidation=Strict", js, "", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"},"bogus":1}`, 400, metav1.StatusReasonBadRequest},
		{"duplicate field strict", "POST", cmPath + "?fieldValidation=Strict", js, "", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"},"data":{},"data":{}}`, 400, metav1.StatusReasonBadRequest},
		{"unknown field strict patch", "PATCH", cmPath + "/exists?fieldValidation=Strict", "application/merge-patch+json", "", `{"bogus":1}`, 422, metav1.StatusReasonInvalid},
		{"unknown field strict smp", "PATCH", cmPath + "/exists?fieldValidation=Strict", "application/strategic-merge-patch+json", "", `{"data":{"$patch":"replace","a":"b"},"bogus":1}`, 422, metav1.StatusReasonInvalid},
		// Upstream applies the patch before it looks for unknown fields, so a bad directive is a 400.
		{"bad smp directive", "PATCH", cmPath + "/exists?fieldValidation=Strict", "application/strategic-merge-patch+json", "", `{"data":{"a":"b"},"$patch":"merge","bogus":1}`, 400, metav1.StatusReasonBadRequest},
		{"unknown field strict json patch", "PATCH", cmPath + "/exists?fieldValidation=Strict", "application/json-patch+json", "", `[{"op":"add","path":"/bogus","value":1}]`, 422, metav1.StatusReasonInvalid},
		{"bad fieldValidation", "POST", cmPath + "?fieldValidation=Maybe", js, "", okCM, 422, metav1.StatusReasonInvalid},
		{"invalid name", "POST", cmPath, js, "", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"Not_Valid"}}`, 422, metav1.StatusReasonInvalid},
		{"apply without fieldManager", "PATCH", cmPath + "/exists", "application/apply-patch+yaml", "", "data: {a: b}", 422, metav1.StatusReasonInvalid},
		{"not found", "GET", cmPath + "/missing", "", "", "", 404, metav1.StatusReasonNotFound},
		{"unknown resource", "GET", "/api/v1/widgets", "", "", "", 404, metav1.StatusReasonNotFound},
		{"unknown group", "GET", "/apis/nope.io/v1/widgets", "", "", "", 404, metav1.StatusReasonNotFound},
		{"cluster-scoped in namespace", "GET", "/api/v1/namespaces/default/nodes", "", "", "", 404, metav1.StatusReasonNotFound},
		{"unknown subresource", "GET", cmPath + "/exists/status", "", "", "", 404, metav1.StatusReasonNotFound},
		{"update collection", "PUT", cmPath, js, "", okCM, 405, metav1.StatusReasonMethodNotAllowed},
		{"post to item", "POST", cmPath + "/exists", js, "", okCM, 405, metav1.StatusReasonMethodNotAllowed},
		{"deletecollection of namespaces", "DELETE", "/api/v1/namespaces", "", "", "", 405, metav1.StatusReasonMethodNotAllowed},
		{"options", "OPTIONS", cmPath, "", "", "", 405, metav1.StatusReasonMethodNotAllowed},
		{"create on cluster-wide path", "POST", "/api/v1/configmaps", js, "", okCM, 405, metav1.StatusReasonMethodNotAllowed},
		{"unsupported accept", "GET", cmPath, "", "text/html", "", 406, metav1.StatusReasonNotAcceptable},
		{"table as protobuf", "GET", cmPath, "", "application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io", "", 406, metav1.StatusReasonNotAcceptable},
		{"already exists", "POST", cmPath, js, "", okCM, 409, metav1.StatusReasonAlreadyExists},
		{"conflict", "PUT", cmPath + "/exists", js, "", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"exists","resourceVersion":"1"}}`, 409, metav1.StatusReasonConflict},
		{"gone continue", "GET", cmPath + "?limit=1&continue=garbage", "", "", "", 400, metav1.StatusReasonBadRequest},
		{"too large", "POST", cmPath, js, "", big, 413, metav1.StatusReasonRequestEntityTooLarge},
		{"unsupported content type", "POST", cmPath, "text/plain", "", okCM, 415, metav1.StatusReasonUnsupportedMediaType},
		{"unsupported patch type", "PATCH", cmPath + "/exists", "application/json", "", `{}`, 415, metav1.StatusReasonUnsupportedMediaType},
		{"bad limit", "GET", cmPath + "?limit=abc", "", "", "", 400, metav1.StatusReasonBadRequest},
		{"bad label selector", "GET", cmPath + "?labelSelector=a%20in%20(", "", "", "", 400, metav1.StatusReasonBadRequest},
		{"unsupported field selector", "GET", cmPath + "?fieldSelector=spec.nope%3Dx", "", "", "", 400, metav1.StatusReasonBadRequest},
		{"bad delete options", "DELETE", cmPath + "/exists", js, "", `{"kind":"Pod","apiVersion":"v1"}`, 400, metav1.StatusReasonBadRequest},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			code, hdr, body := env.do(t, tc.method, tc.path, tc.ctype, tc.accept, tc.body)
			g.Expect(code).To(Equal(tc.code), body)
			g.Expect(hdr.Get("Content-Type")).To(HavePrefix("application/json"))
			var st metav1.Status
			g.Expect(json.Unmarshal([]byte(body), &st)).To(Succeed(), body)
			g.Expect(st.Kind).To(Equal("Status"))
			g.Expect(st.Status).To(Equal(metav1.StatusFailure))
			g.Expect(st.Code).To(BeEquivalentTo(tc.code))
			g.Expect(st.Reason).To(Equal(tc.reason), body)
		})
	}
}

func TestFieldValidationWarnAndIgnore(t *testing.T) {
	g := NewWithT(t)
	env := newTestEnv(t, Options{})
	body := func(name string) string {
		return `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"` + name + `"},"bogus":1,"data":{"a":"1"}}`
	}
	// Upstream's default directive is Warn: the object is created and a warning returned.
	code, hdr, _ := env.do(t, "POST", cmPath, "application/json", "", body("dflt"))
	g.Expect(code).To(Equal(http.StatusCreated))
	g.Expect(hdr.Values("Warning")).To(ContainElement(ContainSubstring(`unknown field \"bogus\"`)))

	code, hdr, _ = env.do(t, "POST", cmPath+"?fieldValidation=Warn", "application/json", "", body("warn"))
	g.Expect(code).To(Equal(http.StatusCreated))
	g.Expect(hdr.Values("Warning")).To(HaveLen(1))

	code, hdr, _ = env.do(t, "POST", cmPath+"?fieldValidation=Ignore", "application/json", "", body("ignore"))
	g.Expect(code).To(Equal(http.StatusCreated))
	g.Expect(hdr.Values("Warning")).To(BeEmpty())

	code, hdr, _ = env.do(t, "PATCH", cmPath+"/warn?fieldValidation=Warn", "application/merge-patch+json", "", `{"data":{"b":"2"},"nope":true}`)
	g.Expect(code).To(Equal(http.StatusOK))
	g.Expect(hdr.Values("Warning")).To(ContainElement(ContainSubstring(`unknown field \"nope\"`)))

	// Strategic-merge directives are not unknown fields.
	code, hdr, _ = env.do(t, "PATCH", cmPath+"/warn?fieldValidation=Strict", "application/strategic-merge-patch+json", "",
		`{"metadata":{"$deleteFromPrimitiveList/finalizers":["x"]},"data":{"$patch":"replace","c":"3"}}`)
	g.Expect(code).To(Equal(http.StatusOK))
	g.Expect(hdr.Values("Warning")).To(BeEmpty())
}

// TestRecoverPanics proves a panicking handler path becomes a 500 Status, not a dropped
// connection.
func TestRecoverPanics(t *testing.T) {
	g := NewWithT(t)
	env := newTestEnv(t, Options{PortForward: http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom") })})
	code, _, body := env.do(t, "POST", "/api/v1/namespaces/default/pods/p/portforward", "", "", "")
	g.Expect(code).To(Equal(http.StatusInternalServerError))
	g.Expect(body).To(ContainSubstring(`"reason":"InternalError"`))
}

// TestPortForwardHook checks pods/<name>/portforward reaches Options.PortForward with the parsed
// request info, and is a 404 Status without a hook.
func TestPortForwardHook(t *testing.T) {
	g := NewWithT(t)
	var got *apirequest.RequestInfo
	hook := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, _ = apirequest.RequestInfoFrom(r.Context())
		w.WriteHeader(http.StatusSwitchingProtocols)
	})
	env := newTestEnv(t, Options{PortForward: hook})
	code, _, _ := env.do(t, "POST", "/api/v1/namespaces/kube-system/pods/etcd-cp-0/portforward?ports=2379", "", "", "")
	g.Expect(code).To(Equal(http.StatusSwitchingProtocols))
	g.Expect(got).NotTo(BeNil())
	g.Expect(got.Namespace).To(Equal("kube-system"))
	g.Expect(got.Name).To(Equal("etcd-cp-0"))
	g.Expect(got.Subresource).To(Equal("portforward"))

	code, _, _ = env.do(t, "DELETE", "/api/v1/namespaces/kube-system/pods/etcd-cp-0/portforward", "", "", "")
	g.Expect(code).To(Equal(http.StatusMethodNotAllowed))

	plain := newTestEnv(t, Options{})
	code, _, body := plain.do(t, "POST", "/api/v1/namespaces/kube-system/pods/etcd-cp-0/portforward", "", "", "")
	g.Expect(code).To(Equal(http.StatusNotFound))
	g.Expect(body).To(ContainSubstring(`"kind":"Status"`))
}

// TestWatchPathPrefix uses the legacy /watch/ path for one object; timeoutSeconds ends the
// stream, so the whole response can be read.
func TestWatchPathPrefix(t *testing.T) {
	g := NewWithT(t)
	env := newTestEnv(t, Options{})
	code, _, _ := env.do(t, "POST", cmPath, "application/json", "", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"one"}}`)
	g.Expect(code).To(Equal(http.StatusCreated))
	_, _, _ = env.do(t, "POST", cmPath, "application/json", "", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"two"}}`)
	code, hdr, body := env.do(t, "GET", "/api/v1/watch/namespaces/default/configmaps/one?timeoutSeconds=1&resourceVersion=0", "", "", "")
	g.Expect(code).To(Equal(http.StatusOK))
	g.Expect(hdr.Get("Content-Type")).To(Equal("application/json"))
	lines := strings.Split(strings.TrimSpace(body), "\n")
	g.Expect(lines).To(HaveLen(1), body)
	var ev metav1.WatchEvent
	g.Expect(json.Unmarshal([]byte(lines[0]), &ev)).To(Succeed())
	g.Expect(ev.Type).To(Equal("ADDED"))
	g.Expect(string(ev.Object.Raw)).To(ContainSubstring(`"name":"one"`))
	g.Expect(string(ev.Object.Raw)).To(ContainSubstring(`"kind":"ConfigMap"`))
}

// The direct Status writer answers byte for byte what upstream's ErrorNegotiated answers, in
// every media type a client asks for.
func TestStatusDirectMatchesErrorNegotiated(t *testing.T) {
	g := NewWithT(t)
	errs := []error{
		apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, "missing"),
		apierrors.NewConflict(schema.GroupResource{Group: "apps", Resource: "deployments"}, "d", errors.New("changed")),
		apierrors.NewInvalid(schema.GroupKind{Kind: "ConfigMap"}, "c", field.ErrorList{field.Invalid(field.NewPath("data"), "x", "bad")}),
		errors.New("not an API error"),
	}
	for _, accept := range []string{"application/json", "application/vnd.kubernetes.protobuf", "application/yaml", "*/*", ""} {
		for _, err := range errs {
			req := httptest.NewRequest("GET", "/api/v1/namespaces/default/configmaps/missing", nil)
			if accept != "" {
				req.Header.Set("Accept", accept)
			}
			direct, upstream, afterGET := httptest.NewRecorder(), httptest.NewRecorder(), httptest.NewRecorder()
			g.Expect(writeStatusDirect(direct, req, responsewriters.ErrorToAPIStatus(err))).To(BeTrue(), accept)
			responsewriters.ErrorNegotiated(err, getServing().meta, metav1.Unversioned, upstream, req)
			// As a GET writes its 404, with the serializer it negotiated for the object.
			_, info, nerr := negotiation.NegotiateOutputMediaType(req, getServing().objects, restrictions{transforms: true})
			g.Expect(nerr).NotTo(HaveOccurred())
			g.Expect(writeStatusWith(afterGET, responsewriters.ErrorToAPIStatus(err), info)).To(BeTrue(), accept)
			for _, got := range []*httptest.ResponseRecorder{direct, afterGET} {
				g.Expect(got.Code).To(Equal(upstream.Code), "%s %v", accept, err)
				g.Expect(got.Header().Get("Content-Type")).To(Equal(upstream.Header().Get("Content-Type")), "%s %v", accept, err)
				g.Expect(got.Body.String()).To(Equal(upstream.Body.String()), "%s %v", accept, err)
			}
		}
	}
}
