package apiserver

import (
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apiserver/pkg/endpoints/handlers/negotiation"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// readBody reads the request body up to the configured limit; larger bodies are a 413 like
// upstream's.
func (h *handler) readBody(r *http.Request) ([]byte, error) {
	limit := h.opts.MaxRequestBodyBytes
	tooLarge := apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("limit is %d", limit))
	if r.ContentLength > limit {
		return nil, tooLarge
	}
	if r.Body == nil {
		return nil, nil
	}
	data, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("reading request body: %v", err))
	}
	if int64(len(data)) > limit {
		return nil, tooLarge
	}
	return data, nil
}

// addWarnings sends field-validation findings as HTTP Warning headers (what client-go turns into
// "Warning: ..." lines in kubectl).
func addWarnings(w http.ResponseWriter, msgs []string) {
	for _, m := range msgs {
		if v, err := utilnet.NewWarningHeader(299, "-", m); err == nil {
			w.Header().Add("Warning", v)
		}
	}
}

func errorStrings(errs []error) []string {
	out := make([]string, 0, len(errs))
	for _, e := range errs {
		out = append(out, e.Error())
	}
	return out
}

// decodeObject decodes a create/update body into the resource's typed object, applying the
// field validation directive (unknown or duplicate fields: 400 in Strict, warnings in Warn) and
// checking the kind, name and namespace against the URL.
func (h *handler) decodeObject(rq *reqScope, directive string) (runtime.Object, error) {
	info, err := negotiation.NegotiateInputSerializer(rq.r, false, rq.codecs())
	if err != nil {
		return nil, err
	}
	body, err := h.readBody(rq.r)
	if err != nil {
		return nil, err
	}
	gvk := rq.gvr.GroupVersion().WithKind(rq.ri.Kind)
	var into runtime.Object = &unstructured.Unstructured{}
	if !rq.custom {
		if into, err = store.Scheme().New(gvk); err != nil {
			return nil, apierrors.NewInternalError(err)
		}
	}
	dec := info.Serializer
	if directive != metav1.FieldValidationIgnore && !rq.custom {
		dec = info.StrictSerializer
	}
	obj, got, err := dec.Decode(body, &gvk, into)
	if err == nil && rq.custom && directive != metav1.FieldValidationIgnore {
		err = strictCustomResource(rq, body, info.MediaType, obj)
	}
	if err != nil {
		strictErr, isStrict := runtime.AsStrictDecodingError(err)
		switch {
		case isStrict && obj != nil && directive == metav1.FieldValidationWarn:
			addWarnings(rq.w, errorStrings(strictErr.Errors()))
		case got != nil && got.Kind != "":
			return nil, badRequestf("%s in version %q cannot be handled as a %s: %v", got.Kind, got.Version, gvk.Kind, err)
		default:
			return nil, badRequestf("the object provided is unrecognized (must be of type %s): %v (%s)", gvk.Kind, err, summarize(body, 30))
		}
	}
	if got.GroupVersion() != gvk.GroupVersion() {
		return nil, badRequestf("the API version in the data (%s) does not match the expected API version (%v)", got.GroupVersion(), gvk.GroupVersion())
	}
	if got.Kind != gvk.Kind || obj != into {
		return nil, badRequestf("the kind in the data (%s) does not match the expected kind (%s)", got.Kind, gvk.Kind)
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	if rq.name != "" && m.GetName() != rq.name {
		return nil, badRequestf("the name of the object (%s) does not match the name on the URL (%s)", m.GetName(), rq.name)
	}
	if err := ensureNamespace(rq, m); err != nil {
		return nil, err
	}
	return obj, nil
}

// summarize shortens a body for an error message, as upstream does.
func summarize(data []byte, n int) string {
	s := strings.TrimSpace(string(data))
	if len(s) > n {
		s = s[:n] + " ..."
	}
	return s
}

var patchTypes = []string{
	string(types.JSONPatchType), string(types.MergePatchType),
	string(types.StrategicMergePatchType), string(types.ApplyYAMLPatchType),
}

// patchType maps the Content-Type of a PATCH to a patch type; anything else is a 415.
func patchType(r *http.Request) (types.PatchType, error) {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err == nil {
		for _, t := range patchTypes {
			if mt == t {
				return types.PatchType(t), nil
			}
		}
	}
	return "", negotiation.NewUnsupportedMediaTypeError(patchTypes)
}

// strictCustomResource finds what strict decoding finds in a custom resource, as kube-apiserver
// does: duplicate fields, and fields the CRD's schema does not declare (which defaulting
// prunes).
func strictCustomResource(rq *reqScope, body []byte, mediaType string, obj runtime.Object) error {
	var errs []error
	js := body
	if mediaType != runtime.ContentTypeJSON {
		var err error
		if js, err = yaml.YAMLToJSON(body); err != nil {
			return nil // the lenient decode read it already
		}
	}
	strictErrs, _ := kjson.UnmarshalStrict(js, &map[string]any{})
	errs = append(errs, strictErrs...)
	if rq.unknownFields != nil {
		for _, path := range rq.unknownFields(obj) {
			errs = append(errs, fmt.Errorf("unknown field %q", path))
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return runtime.NewStrictDecodingError(errs)
}
