package apiserver

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metainternalversionscheme "k8s.io/apimachinery/pkg/apis/meta/internalversion/scheme"
	metainternalversionvalidation "k8s.io/apimachinery/pkg/apis/meta/internalversion/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/endpoints/handlers/negotiation"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/kinds"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// reqScope is one resource request, routed.
type reqScope struct {
	w    http.ResponseWriter
	r    *http.Request
	ri   store.ResourceInfo
	gvr  schema.GroupVersionResource
	ns   string // "" for cluster-scoped resources and all-namespace lists
	name string
	sub  string
	verb string
	// custom: a resource a CustomResourceDefinition defines in this cluster (printer: its columns).
	custom  bool
	printer kinds.Printer
	// unknownFields lists a custom resource's fields its schema does not declare (nil: none).
	unknownFields func(runtime.Object) []string
	scale         *kinds.Scale // the scale subresource's mapping, nil without one
}

func (rq *reqScope) gr() schema.GroupResource { return rq.gvr.GroupResource() }

// codecs encode and decode the resource's objects: typed built-in kinds in JSON, YAML and
// protobuf; custom resources in JSON and YAML.
func (rq *reqScope) codecs() runtime.NegotiatedSerializer {
	if rq.custom {
		return getServing().custom
	}
	return getServing().objects
}

// serveResource answers a request for a resource, or returns the watch it opened.
func (h *handler) serveResource(w http.ResponseWriter, r *http.Request, info *apirequest.RequestInfo) *watchStream {
	if changesRBAC(info.APIGroup, info.Verb) {
		w = &rbacWrite{ResponseWriter: w, r: r, c: h.c, clusterRoles: info.Resource == "clusterroles"}
	}
	gvr := schema.GroupVersionResource{Group: info.APIGroup, Version: info.APIVersion, Resource: info.Resource}
	ri, ok := getServing().disc.byGVR[gvr]
	custom := false
	var printer kinds.Printer
	var unknown func(runtime.Object) []string
	var scale *kinds.Scale
	if ok {
		if s, found := kinds.For(gvr); found {
			printer, scale = s.Printer(), s.Scale()
		}
	} else if info.APIPrefix == "apis" {
		var s kinds.Strategy
		if ri, s, ok = h.c.CustomResource(gvr); ok {
			custom, printer, scale = true, s.Printer(), s.Scale()
			if u, isU := s.(interface{ UnknownFields(runtime.Object) []string }); isU {
				unknown = u.UnknownFields
			}
		}
	}
	if ok && isNodeProxy(info) {
		h.serveNodeProxy(w, r, info)
		return nil
	}
	if !ok || len(info.Parts) > 3 || (info.APIPrefix == "api" && info.APIGroup != "") {
		h.writeError(w, r, notFound())
		return nil
	}
	rq := &reqScope{w: w, r: r, ri: ri, gvr: gvr, ns: info.Namespace, verb: info.Verb, custom: custom, printer: printer, unknownFields: unknown, scale: scale}
	// The name comes from the path only: RequestInfo also fills it from a metadata.name field
	// selector, which must stay a list.
	if len(info.Parts) >= 2 {
		rq.name = info.Parts[1]
	}
	if len(info.Parts) == 3 {
		rq.sub = info.Parts[2]
	}
	switch {
	case gvr.Resource == "namespaces":
		rq.ns = "" // /api/v1/namespaces/<name> parses the name as a namespace too
	case !ri.Namespaced && rq.ns != "":
		h.writeError(w, r, notFound())
		return nil
	case ri.Namespaced && rq.ns == "" && rq.name != "":
		h.writeError(w, r, notFound())
		return nil
	}

	if isReview(gvr) {
		h.serveReview(rq)
		return nil
	}
	if rq.sub != "" {
		h.serveSubresource(rq)
		return nil
	}
	if rq.verb == "proxy" || rq.verb == "" {
		h.writeError(w, r, apierrors.NewMethodNotSupported(rq.gr(), r.Method))
		return nil
	}
	if !slices.Contains(ri.Verbs, rq.verb) {
		h.writeError(w, r, apierrors.NewMethodNotSupported(rq.gr(), rq.verb))
		return nil
	}
	// A namespaced resource's cluster-wide path only lists and watches; an item path cannot be
	// created on; a collection path cannot be updated or patched.
	if (ri.Namespaced && rq.ns == "" && rq.verb != "list" && rq.verb != "watch") ||
		(rq.verb == "create" && rq.name != "") || ((rq.verb == "update" || rq.verb == "patch") && rq.name == "") {
		h.writeError(w, r, apierrors.NewMethodNotSupported(rq.gr(), rq.verb))
		return nil
	}
	switch {
	case isMetrics(gvr):
		h.serveMetrics(rq)
		return nil
	case gvr == apiServicesGVR:
		h.serveAPIServices(rq)
		return nil
	}

	switch rq.verb {
	case "get":
		h.serveGet(rq)
	case "list", "watch":
		return h.serveList(rq)
	case "create":
		h.serveCreate(rq)
	case "update":
		h.serveUpdate(rq)
	case "patch":
		h.servePatch(rq)
	case "delete":
		h.serveDelete(rq)
	case "deletecollection":
		h.serveDeleteCollection(rq)
	default:
		h.writeError(w, r, apierrors.NewMethodNotSupported(rq.gr(), rq.verb))
	}
	return nil
}

func (h *handler) serveGet(rq *reqScope) {
	// "At least as new as" a resourceVersion: wait for it a little, then 504 (upstream's answer).
	if err := h.c.WaitForResourceVersion(rq.r.URL.Query().Get("resourceVersion")); err != nil {
		h.writeError(rq.w, rq.r, err)
		return
	}
	if h.serveGetEncoded(rq) {
		return
	}
	obj, err := h.c.Get(rq.gvr, rq.ns, rq.name)
	if err != nil {
		h.writeError(rq.w, rq.r, err)
		return
	}
	h.writeObject(rq, http.StatusOK, obj)
}

// serveGetEncoded answers a GET of the object itself (no Table or metadata conversion) from the
// store's serialization cache: no copy of the object, no encoding when it has not changed since
// the last GET, and the bytes go straight to the connection. It reports false, having written
// nothing, when the request needs the general path.
func (h *handler) serveGetEncoded(rq *reqScope) bool {
	mt, info, err := negotiation.NegotiateOutputMediaType(rq.r, rq.codecs(), restrictions{transforms: true})
	if err != nil || mt.Convert != nil {
		return false
	}
	format := info.MediaType
	if info.Serializer == info.PrettySerializer {
		format += ";pretty"
	}
	gvk := rq.gvr.GroupVersion().WithKind(rq.ri.Kind)
	data, err := h.c.GetEncoded(rq.gvr, rq.ns, rq.name, format, encodeShared(info.Serializer, gvk))
	switch {
	case err != nil:
		// Usually a 404: written with the serializer negotiated above rather than negotiated again.
		if status := responsewriters.ErrorToAPIStatus(err); status.Code >= 500 || !directStatus(status) || !writeStatusWith(rq.w, status, info) {
			h.writeError(rq.w, rq.r, err)
		}
	case len(data) > gzipThresholdBytes:
		// Large enough that upstream would gzip it for clients that ask: let its writer decide.
		responsewriters.SerializeObject(info.MediaType, encodedBytes(data), rq.w, rq.r, http.StatusOK, nil)
	default:
		hdr := rq.w.Header()
		hdr.Set("Content-Type", info.MediaType)
		hdr.Set("Content-Length", strconv.Itoa(len(data)))
		rq.w.WriteHeader(http.StatusOK)
		_, _ = rq.w.Write(data)
	}
	return true
}

// encodeShared encodes a stored object, which other readers share, with ser: unlike a version
// encoder (runtime.WithVersionEncoder sets the object's TypeMeta while encoding) it never writes
// to the object.
func encodeShared(ser runtime.Encoder, gvk schema.GroupVersionKind) store.EncodeFunc {
	return func(obj runtime.Object, w *bytes.Buffer) error {
		if obj.GetObjectKind().GroupVersionKind() != gvk {
			// Encode a copy that carries the kind rather than setting it on the shared object.
			obj = obj.DeepCopyObject()
			obj.GetObjectKind().SetGroupVersionKind(gvk)
		}
		return ser.Encode(obj, w)
	}
}

// gzipThresholdBytes is the response size from which upstream's response writer gzips for
// clients that accept it.
const gzipThresholdBytes = 128 << 10

// encodedBytes is an Encoder for an object already encoded.
type encodedBytes []byte

func (e encodedBytes) Encode(_ runtime.Object, w io.Writer) error {
	_, err := w.Write(e)
	return err
}
func (encodedBytes) Identifier() runtime.Identifier { return "encoded-bytes" }

// decodeQuery fills a meta.k8s.io options object from the query string like the real server.
func decodeQuery(r *http.Request, into runtime.Object) error {
	if err := metainternalversionscheme.ParameterCodec.DecodeParameters(r.URL.Query(), metav1.SchemeGroupVersion, into); err != nil {
		return apierrors.NewBadRequest(err.Error())
	}
	return nil
}

func invalidOptions(kind string, errs field.ErrorList) error {
	return apierrors.NewInvalid(schema.GroupKind{Group: metav1.GroupName, Kind: kind}, "", errs)
}

// listOptions parses and validates list/watch query parameters.
func (h *handler) listOptions(rq *reqScope) (store.ListOptions, bool, error) {
	var lo metainternalversion.ListOptions
	if err := decodeQuery(rq.r, &lo); err != nil {
		return store.ListOptions{}, false, err
	}
	if rq.verb == "watch" {
		lo.Watch = true // the /watch/ path prefix
	}
	if errs := metainternalversionvalidation.ValidateListOptions(&lo, true); len(errs) > 0 {
		return store.ListOptions{}, false, invalidOptions("ListOptions", errs)
	}
	if rq.name != "" {
		// /watch/.../<name>: a watch of one object.
		sel := fields.OneTermEqualSelector("metadata.name", rq.name)
		if lo.FieldSelector != nil && !lo.FieldSelector.Empty() {
			sel = fields.AndSelectors(lo.FieldSelector, sel)
		}
		lo.FieldSelector = sel
	}
	return store.ListOptions{
		LabelSelector:        lo.LabelSelector,
		FieldSelector:        lo.FieldSelector,
		Limit:                lo.Limit,
		Continue:             lo.Continue,
		ResourceVersion:      lo.ResourceVersion,
		ResourceVersionMatch: lo.ResourceVersionMatch,
		SendInitialEvents:    lo.SendInitialEvents,
		AllowWatchBookmarks:  lo.AllowWatchBookmarks,
		TimeoutSeconds:       lo.TimeoutSeconds,
	}, lo.Watch, nil
}

// serveList answers a list, or opens a watch (?watch=true, /watch/ paths) and returns it.
func (h *handler) serveList(rq *reqScope) *watchStream {
	opts, isWatch, err := h.listOptions(rq)
	if err != nil {
		h.writeError(rq.w, rq.r, err)
		return nil
	}
	if isWatch {
		return h.openWatch(rq, opts)
	}
	opts.ShareItems = true // the list is only encoded
	list, err := h.c.List(rq.gvr, rq.ns, opts)
	if err != nil {
		h.writeError(rq.w, rq.r, err)
		return nil
	}
	// Like upstream: an empty list has "items": [], not null.
	if meta.LenList(list) == 0 {
		_ = meta.SetList(list, []runtime.Object{})
	}
	h.writeObject(rq, http.StatusOK, list)
	return nil
}

func fieldValidation(directive string) string {
	if directive == "" {
		return metav1.FieldValidationWarn
	}
	return directive
}

func (h *handler) serveCreate(rq *reqScope) {
	opts := &metav1.CreateOptions{}
	if err := decodeQuery(rq.r, opts); err != nil {
		h.writeError(rq.w, rq.r, err)
		return
	}
	if errs := metav1validation.ValidateCreateOptions(opts); len(errs) > 0 {
		h.writeError(rq.w, rq.r, invalidOptions("CreateOptions", errs))
		return
	}
	directive := fieldValidation(opts.FieldValidation)
	obj, err := h.decodeObject(rq, directive)
	if err != nil {
		h.writeError(rq.w, rq.r, err)
		return
	}
	if err := h.checkGrant(rq, obj); err != nil {
		h.writeError(rq.w, rq.r, err)
		return
	}
	out, err := h.c.Create(rq.gvr, rq.ns, obj, store.CreateOptions{
		DryRun: len(opts.DryRun) > 0, FieldManager: opts.FieldManager, FieldValidation: directive,
	})
	if err != nil {
		h.writeError(rq.w, rq.r, err)
		return
	}
	h.writeObject(rq, http.StatusCreated, out)
}

func (h *handler) serveUpdate(rq *reqScope) {
	opts := &metav1.UpdateOptions{}
	if err := decodeQuery(rq.r, opts); err != nil {
		h.writeError(rq.w, rq.r, err)
		return
	}
	if errs := metav1validation.ValidateUpdateOptions(opts); len(errs) > 0 {
		h.writeError(rq.w, rq.r, invalidOptions("UpdateOptions", errs))
		return
	}
	directive := fieldValidation(opts.FieldValidation)
	obj, err := h.decodeObject(rq, directive)
	if err != nil {
		h.writeError(rq.w, rq.r, err)
		return
	}
	out, err := h.c.Update(rq.gvr, rq.ns, obj, store.UpdateOptions{
		DryRun: len(opts.DryRun) > 0, FieldManager: opts.FieldManager, Subresource: rq.sub, FieldValidation: directive,
		ValidateObject: h.writeValidators(rq),
	})
	if err != nil {
		h.writeError(rq.w, rq.r, err)
		return
	}
	h.writeObject(rq, http.StatusOK, out)
}

func (h *handler) servePatch(rq *reqScope) {
	pt, err := patchType(rq.r)
	if err != nil {
		h.writeError(rq.w, rq.r, err)
		return
	}
	opts := &metav1.PatchOptions{}
	if err := decodeQuery(rq.r, opts); err != nil {
		h.writeError(rq.w, rq.r, err)
		return
	}
	if errs := metav1validation.ValidatePatchOptions(opts, pt); len(errs) > 0 {
		h.writeError(rq.w, rq.r, invalidOptions("PatchOptions", errs))
		return
	}
	body, err := h.readBody(rq.r)
	if err != nil {
		h.writeError(rq.w, rq.r, err)
		return
	}
	popts := store.PatchOptions{
		DryRun: len(opts.DryRun) > 0, FieldManager: opts.FieldManager, Force: opts.Force != nil && *opts.Force,
		Subresource: rq.sub, FieldValidation: fieldValidation(opts.FieldValidation),
		ValidateObject: h.writeValidators(rq),
	}
	res, err := h.c.PatchObject(rq.gvr, rq.ns, rq.name, pt, body, popts)
	if err != nil {
		h.writeError(rq.w, rq.r, err)
		return
	}
	addWarnings(rq.w, res.Warnings)
	code := http.StatusOK
	if res.Created {
		code = http.StatusCreated // apply created it
	}
	h.writeObject(rq, code, res.Object)
}

// deleteOptions reads DeleteOptions from the body when there is one, else from the query, and
// validates them, as upstream.
func (h *handler) deleteOptions(rq *reqScope) (store.DeleteOptions, error) {
	opts := &metav1.DeleteOptions{}
	body, err := h.readBody(rq.r)
	if err != nil {
		return store.DeleteOptions{}, err
	}
	if len(body) > 0 {
		sv := getServing()
		info, err := negotiation.NegotiateInputSerializer(rq.r, false, sv.meta)
		if err != nil {
			return store.DeleteOptions{}, err
		}
		defaultGVK := metav1.SchemeGroupVersion.WithKind("DeleteOptions")
		obj, _, err := sv.meta.DecoderToVersion(info.Serializer, defaultGVK.GroupVersion()).Decode(body, &defaultGVK, opts)
		if err != nil {
			return store.DeleteOptions{}, apierrors.NewBadRequest(err.Error())
		}
		if obj != opts {
			return store.DeleteOptions{}, apierrors.NewBadRequest("decoded object cannot be converted to DeleteOptions")
		}
	} else if err := decodeQuery(rq.r, opts); err != nil {
		return store.DeleteOptions{}, err
	}
	if errs := metav1validation.ValidateDeleteOptions(opts); len(errs) > 0 {
		return store.DeleteOptions{}, invalidOptions("DeleteOptions", errs)
	}
	// orphanDependents is the deprecated spelling of the policy; the API server still honours it.
	policy := opts.PropagationPolicy
	//lint:ignore SA1019 still accepted upstream
	orphan := opts.OrphanDependents
	if policy == nil && orphan != nil {
		p := metav1.DeletePropagationBackground
		if *orphan {
			p = metav1.DeletePropagationOrphan
		}
		policy = &p
	}
	return store.DeleteOptions{
		DryRun: len(opts.DryRun) > 0, Preconditions: opts.Preconditions,
		GracePeriodSeconds: opts.GracePeriodSeconds, PropagationPolicy: policy,
	}, nil
}

func (h *handler) serveDelete(rq *reqScope) {
	opts, err := h.deleteOptions(rq)
	if err != nil {
		h.writeError(rq.w, rq.r, err)
		return
	}
	out, err := h.c.Delete(rq.gvr, rq.ns, rq.name, opts)
	if err != nil {
		h.writeError(rq.w, rq.r, err)
		return
	}
	if out == nil {
		out = &metav1.Status{Status: metav1.StatusSuccess, Code: http.StatusOK,
			Details: &metav1.StatusDetails{Name: rq.name, Group: rq.gvr.Group, Kind: rq.gvr.Resource}}
	}
	h.writeObject(rq, http.StatusOK, out)
}

func (h *handler) serveDeleteCollection(rq *reqScope) {
	lo, _, err := h.listOptions(rq)
	if err != nil {
		h.writeError(rq.w, rq.r, err)
		return
	}
	opts, err := h.deleteOptions(rq)
	if err != nil {
		h.writeError(rq.w, rq.r, err)
		return
	}
	out, err := h.c.DeleteCollection(rq.gvr, rq.ns, lo, opts)
	if err != nil {
		h.writeError(rq.w, rq.r, err)
		return
	}
	if out == nil {
		out = &metav1.Status{Status: metav1.StatusSuccess, Code: http.StatusOK}
	}
	h.writeObject(rq, http.StatusOK, out)
}

// writeObject encodes a store object in the negotiated media type, converting it to a Table
// or PartialObjectMetadata(List) when the client asks for that.
func (h *handler) writeObject(rq *reqScope, code int, obj runtime.Object) {
	h.writeWith(rq, code, obj, rq.codecs(), rq.gvr.GroupVersion())
}

func (h *handler) writeWith(rq *reqScope, code int, obj runtime.Object, ns runtime.NegotiatedSerializer, gv schema.GroupVersion) {
	sv := getServing()
	mt, info, err := negotiation.NegotiateOutputMediaType(rq.r, ns, restrictions{transforms: true})
	if err != nil {
		h.writeError(rq.w, rq.r, err)
		return
	}
	if mt.Convert != nil {
		if _, isStatus := obj.(*metav1.Status); !isStatus {
			out, err := h.transform(rq, obj, *mt.Convert)
			if err != nil {
				h.writeError(rq.w, rq.r, err)
				return
			}
			metaInfo, ok := runtime.SerializerInfoForMediaType(sv.meta.SupportedMediaTypes(), info.MediaType)
			if !ok {
				h.writeError(rq.w, rq.r, negotiation.NewNotAcceptableError([]string{"application/json"}))
				return
			}
			ser := metaInfo.Serializer
			if info.Serializer == info.PrettySerializer && metaInfo.PrettySerializer != nil {
				ser = metaInfo.PrettySerializer
			}
			enc := sv.meta.EncoderForVersion(ser, mt.Convert.GroupVersion())
			responsewriters.SerializeObject(info.MediaType, enc, rq.w, rq.r, code, out)
			return
		}
	}
	responsewriters.SerializeObject(info.MediaType, ns.EncoderForVersion(info.Serializer, gv), rq.w, rq.r, code, obj)
}

// transform converts a response to the meta.k8s.io representation the client asked for.
func (h *handler) transform(rq *reqScope, obj runtime.Object, target schema.GroupVersionKind) (runtime.Object, error) {
	isList := meta.IsListType(obj)
	switch target.Kind {
	case "PartialObjectMetadata":
		if isList {
			return nil, negotiation.NewNotAcceptableConversionError("PartialObjectMetadata", []string{"PartialObjectMetadataList"})
		}
		return partialMetadata(obj, target.GroupVersion())
	case "PartialObjectMetadataList":
		if !isList {
			return nil, negotiation.NewNotAcceptableConversionError("PartialObjectMetadataList", []string{"PartialObjectMetadata"})
		}
		return partialMetadataList(obj, target.GroupVersion())
	case "Table":
		opts, err := tableOptions(rq.r)
		if err != nil {
			return nil, err
		}
		return toTable(rq, obj, opts, target.GroupVersion(), false)
	}
	return nil, negotiation.NewNotAcceptableError([]string{"application/json"})
}

func partialMetadata(obj runtime.Object, gv schema.GroupVersion) (*metav1.PartialObjectMetadata, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	p := meta.AsPartialObjectMetadata(m)
	p.SetGroupVersionKind(gv.WithKind("PartialObjectMetadata"))
	return p, nil
}

func partialMetadataList(obj runtime.Object, gv schema.GroupVersion) (*metav1.PartialObjectMetadataList, error) {
	out := &metav1.PartialObjectMetadataList{Items: []metav1.PartialObjectMetadata{}}
	if li, err := meta.ListAccessor(obj); err == nil {
		out.ResourceVersion = li.GetResourceVersion()
		out.Continue = li.GetContinue()
		out.RemainingItemCount = li.GetRemainingItemCount()
	}
	err := meta.EachListItem(obj, func(item runtime.Object) error {
		p, err := partialMetadata(item, gv)
		if err != nil {
			return err
		}
		out.Items = append(out.Items, *p)
		return nil
	})
	if err != nil {
		return nil, err
	}
	out.SetGroupVersionKind(gv.WithKind("PartialObjectMetadataList"))
	return out, nil
}

// badRequestf is a 400 with a formatted message.
func badRequestf(format string, args ...any) error {
	return apierrors.NewBadRequest(fmt.Sprintf(format, args...))
}

// ensureNamespace applies upstream's rule for the namespace in a body versus the URL.
func ensureNamespace(rq *reqScope, obj metav1.Object) error {
	return rest.EnsureObjectNamespaceMatchesRequestNamespace(rest.ExpectedNamespaceForScope(rq.ns, rq.ri.Namespaced), obj)
}
