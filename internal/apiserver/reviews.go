package apiserver

import (
	"fmt"
	"net/http"
	"slices"
	"sync"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/handlers/negotiation"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/authz"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// The review APIs kube-apiserver answers without storing anything: create-only resources whose
// response is the request with its status filled in, by the cluster's authorizer (internal/authz)
// or from the request's user. They are what `kubectl auth can-i` (SelfSubjectAccessReview,
// SelfSubjectRulesReview with --list) and `kubectl auth whoami` (SelfSubjectReview) send.

var (
	selfSubjectAccessReviews  = authorizationv1.SchemeGroupVersion.WithResource("selfsubjectaccessreviews")
	selfSubjectRulesReviews   = authorizationv1.SchemeGroupVersion.WithResource("selfsubjectrulesreviews")
	subjectAccessReviews      = authorizationv1.SchemeGroupVersion.WithResource("subjectaccessreviews")
	localSubjectAccessReviews = authorizationv1.SchemeGroupVersion.WithResource("localsubjectaccessreviews")
	selfSubjectReviews        = authenticationv1.SchemeGroupVersion.WithResource("selfsubjectreviews")
)

// reviewResources are the review APIs as discovery lists them.
var reviewResources = []store.ResourceInfo{
	review(selfSubjectReviews, "SelfSubjectReview", false),
	review(localSubjectAccessReviews, "LocalSubjectAccessReview", true),
	review(selfSubjectAccessReviews, "SelfSubjectAccessReview", false),
	review(selfSubjectRulesReviews, "SelfSubjectRulesReview", false),
	review(subjectAccessReviews, "SubjectAccessReview", false),
}

func review(gvr schema.GroupVersionResource, kind string, namespaced bool) store.ResourceInfo {
	return store.ResourceInfo{GVR: gvr, Kind: kind, Singular: gvr.Resource[:len(gvr.Resource)-1], Namespaced: namespaced, Verbs: []string{"create"}}
}

// servedResources are the store's resources, the review APIs, the APIServices and the resource
// metrics API.
func servedResources() []store.ResourceInfo {
	return slices.Concat(store.Resources(), reviewResources, apiServiceResources, metricsResources)
}

var reviewCodecs = sync.OnceValue(func() runtime.NegotiatedSerializer {
	s := runtime.NewScheme()
	utilruntime.Must(authorizationv1.AddToScheme(s))
	utilruntime.Must(authenticationv1.AddToScheme(s))
	metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
	return serializer.NewCodecFactory(s).WithoutConversion()
})

// isReview reports whether gvr is one of the review APIs.
func isReview(gvr schema.GroupVersionResource) bool {
	switch gvr {
	case selfSubjectAccessReviews, selfSubjectRulesReviews, subjectAccessReviews, localSubjectAccessReviews, selfSubjectReviews:
		return true
	}
	return false
}

// serveReview answers a POST of a review; every other verb is 405, as upstream (the resources
// only create).
func (h *handler) serveReview(rq *reqScope) {
	if rq.ri.Namespaced && rq.ns == "" {
		h.writeError(rq.w, rq.r, notFound())
		return
	}
	if rq.verb != "create" || rq.name != "" || rq.sub != "" {
		h.writeError(rq.w, rq.r, apierrors.NewMethodNotSupported(rq.gr(), rq.verb))
		return
	}
	u, ok := apirequest.UserFrom(rq.r.Context())
	if !ok {
		u = &user.DefaultInfo{Name: user.Anonymous, Groups: []string{user.AllUnauthenticated}}
	}
	var obj runtime.Object
	switch rq.gvr {
	case selfSubjectAccessReviews:
		obj = &authorizationv1.SelfSubjectAccessReview{}
	case selfSubjectRulesReviews:
		obj = &authorizationv1.SelfSubjectRulesReview{}
	case subjectAccessReviews:
		obj = &authorizationv1.SubjectAccessReview{}
	case localSubjectAccessReviews:
		obj = &authorizationv1.LocalSubjectAccessReview{}
	case selfSubjectReviews:
		obj = &authenticationv1.SelfSubjectReview{}
	}
	if err := h.decodeReview(rq, obj); err != nil {
		h.writeError(rq.w, rq.r, err)
		return
	}
	var err error
	switch o := obj.(type) {
	case *authorizationv1.SelfSubjectAccessReview:
		err = h.accessReview(rq, u, o.Spec.ResourceAttributes, o.Spec.NonResourceAttributes, nil, &o.Status)
	case *authorizationv1.SubjectAccessReview:
		err = h.accessReview(rq, subjectOf(o.Spec), o.Spec.ResourceAttributes, o.Spec.NonResourceAttributes, subjectErrors(o.Spec), &o.Status)
	case *authorizationv1.LocalSubjectAccessReview:
		err = h.localAccessReview(rq, o)
	case *authorizationv1.SelfSubjectRulesReview:
		h.rulesReview(rq, u, o)
	case *authenticationv1.SelfSubjectReview:
		o.Status.UserInfo = authenticationv1.UserInfo{Username: u.GetName(), UID: u.GetUID(), Groups: u.GetGroups()}
		for k, v := range u.GetExtra() {
			if o.Status.UserInfo.Extra == nil {
				o.Status.UserInfo.Extra = map[string]authenticationv1.ExtraValue{}
			}
			o.Status.UserInfo.Extra[k] = v
		}
	}
	if err != nil {
		h.writeError(rq.w, rq.r, err)
		return
	}
	obj.GetObjectKind().SetGroupVersionKind(rq.gvr.GroupVersion().WithKind(rq.ri.Kind))
	h.writeWith(rq, http.StatusCreated, obj, reviewCodecs(), rq.gvr.GroupVersion())
}

func kindOf(gvr schema.GroupVersionResource) string {
	for _, ri := range reviewResources {
		if ri.GVR == gvr {
			return ri.Kind
		}
	}
	return ""
}

// decodeReview decodes the request body into obj, which must be of the path's kind.
func (h *handler) decodeReview(rq *reqScope, obj runtime.Object) error {
	info, err := negotiation.NegotiateInputSerializer(rq.r, false, reviewCodecs())
	if err != nil {
		return err
	}
	body, err := h.readBody(rq.r)
	if err != nil {
		return err
	}
	gvk := rq.gvr.GroupVersion().WithKind(kindOf(rq.gvr))
	got, _, err := info.Serializer.Decode(body, &gvk, obj)
	if err != nil {
		return apierrors.NewBadRequest(err.Error())
	}
	if got != obj {
		return apierrors.NewBadRequest("the body is not a " + gvk.Kind)
	}
	return nil
}

// attributesOf turns a review's spec into the authorizer's attributes, as upstream's
// authorizationutil does.
func attributesOf(u user.Info, res *authorizationv1.ResourceAttributes, nonRes *authorizationv1.NonResourceAttributes) authorizer.AttributesRecord {
	if res != nil {
		return authorizer.AttributesRecord{
			User: u, Verb: res.Verb, Namespace: res.Namespace, APIGroup: res.Group, APIVersion: res.Version,
			Resource: res.Resource, Subresource: res.Subresource, Name: res.Name, ResourceRequest: true,
		}
	}
	return authorizer.AttributesRecord{User: u, Verb: nonRes.Verb, Path: nonRes.Path}
}

// specErrors are upstream's validation errors of an access review's attributes.
func specErrors(res *authorizationv1.ResourceAttributes, nonRes *authorizationv1.NonResourceAttributes) field.ErrorList {
	spec := field.NewPath("spec")
	var errs field.ErrorList
	if res != nil && nonRes != nil {
		errs = append(errs, field.Invalid(spec.Child("nonResourceAttributes"), nonRes, "cannot be specified in combination with resourceAttributes"))
	}
	if res == nil && nonRes == nil {
		errs = append(errs, field.Invalid(spec.Child("resourceAttributes"), nonRes, "exactly one of nonResourceAttributes or resourceAttributes must be specified"))
	}
	if res != nil {
		errs = append(errs, selectorErrors(res, spec.Child("resourceAttributes"))...)
	}
	return errs
}

// selectorErrors validate the field and label selectors of resource attributes as kube-apiserver
// does (1.31+): rawSelector or requirements, not both, and well-formed requirements (unknown
// operators are allowed, for newer clients). The decision ignores them: RBAC grants by verb,
// resource and name only, and a selector that does not parse only narrows what a request asks.
func selectorErrors(res *authorizationv1.ResourceAttributes, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	either := func(p *field.Path, raw string, requirements int) {
		if raw != "" && requirements > 0 {
			errs = append(errs, field.Invalid(p.Child("rawSelector"), raw, "may not specified at the same time as requirements"))
		}
		if raw == "" && requirements == 0 {
			errs = append(errs, field.Required(p.Child("requirements"), fmt.Sprintf("when %s is specified, requirements or rawSelector is required", p)))
		}
	}
	if sel := res.FieldSelector; sel != nil {
		p := path.Child("fieldSelector")
		either(p, sel.RawSelector, len(sel.Requirements))
		opts := metav1validation.FieldSelectorValidationOptions{AllowUnknownOperatorInRequirement: true}
		for i, r := range sel.Requirements {
			errs = append(errs, metav1validation.ValidateFieldSelectorRequirement(r, opts, p.Child("requirements").Index(i))...)
		}
	}
	if sel := res.LabelSelector; sel != nil {
		p := path.Child("labelSelector")
		either(p, sel.RawSelector, len(sel.Requirements))
		opts := metav1validation.LabelSelectorValidationOptions{AllowUnknownOperatorInRequirement: true}
		for i, r := range sel.Requirements {
			errs = append(errs, metav1validation.ValidateLabelSelectorRequirement(r, opts, p.Child("requirements").Index(i))...)
		}
	}
	return errs
}

// subjectErrors are the errors of a SubjectAccessReview's subject.
func subjectErrors(spec authorizationv1.SubjectAccessReviewSpec) field.ErrorList {
	if spec.User == "" && len(spec.Groups) == 0 {
		return field.ErrorList{field.Invalid(field.NewPath("spec", "user"), spec.User, "at least one of user or group must be specified")}
	}
	return nil
}

func subjectOf(spec authorizationv1.SubjectAccessReviewSpec) user.Info {
	u := &user.DefaultInfo{Name: spec.User, UID: spec.UID, Groups: spec.Groups}
	for k, v := range spec.Extra {
		if u.Extra == nil {
			u.Extra = map[string][]string{}
		}
		u.Extra[k] = v
	}
	return u
}

// accessReview decides the review's attributes for u into status.
func (h *handler) accessReview(rq *reqScope, u user.Info, res *authorizationv1.ResourceAttributes, nonRes *authorizationv1.NonResourceAttributes, extra field.ErrorList, status *authorizationv1.SubjectAccessReviewStatus) error {
	if errs := append(specErrors(res, nonRes), extra...); len(errs) > 0 {
		return apierrors.NewInvalid(schema.GroupKind{Group: authorizationv1.GroupName, Kind: kindOf(rq.gvr)}, "", errs)
	}
	decision, reason, err := authz.Authorize(rq.r.Context(), h.c, attributesOf(u, res, nonRes))
	*status = authorizationv1.SubjectAccessReviewStatus{
		Allowed: decision == authorizer.DecisionAllow,
		Denied:  decision == authorizer.DecisionDeny,
		Reason:  reason,
	}
	if err != nil {
		status.EvaluationError = err.Error()
	}
	return nil
}

// localAccessReview is a SubjectAccessReview confined to the path's namespace.
func (h *handler) localAccessReview(rq *reqScope, o *authorizationv1.LocalSubjectAccessReview) error {
	if o.Namespace == "" {
		o.Namespace = rq.ns
	}
	if o.Namespace != rq.ns {
		return apierrors.NewBadRequest("the namespace of the provided object does not match the namespace sent on the request")
	}
	extra := subjectErrors(o.Spec)
	if o.Spec.NonResourceAttributes != nil {
		extra = append(extra, field.Invalid(field.NewPath("spec", "nonResourceAttributes"), o.Spec.NonResourceAttributes, "disallowed on this kind of request"))
	}
	if res := o.Spec.ResourceAttributes; res != nil && res.Namespace != o.Namespace {
		return apierrors.NewBadRequest("spec.resourceAttributes.namespace must match metadata.namespace")
	}
	return h.accessReview(rq, subjectOf(o.Spec), o.Spec.ResourceAttributes, o.Spec.NonResourceAttributes, extra, &o.Status)
}

// rulesReview lists what u may do in the spec's namespace.
func (h *handler) rulesReview(rq *reqScope, u user.Info, o *authorizationv1.SelfSubjectRulesReview) {
	res, nonRes, incomplete, err := authz.For(h.c).RulesFor(rq.r.Context(), u, o.Spec.Namespace)
	o.Status = authorizationv1.SubjectRulesReviewStatus{
		ResourceRules:    []authorizationv1.ResourceRule{},
		NonResourceRules: []authorizationv1.NonResourceRule{},
		Incomplete:       incomplete,
	}
	for _, r := range res {
		o.Status.ResourceRules = append(o.Status.ResourceRules, authorizationv1.ResourceRule{
			Verbs: r.GetVerbs(), APIGroups: r.GetAPIGroups(), Resources: r.GetResources(), ResourceNames: r.GetResourceNames(),
		})
	}
	for _, r := range nonRes {
		o.Status.NonResourceRules = append(o.Status.NonResourceRules, authorizationv1.NonResourceRule{Verbs: r.GetVerbs(), NonResourceURLs: r.GetNonResourceURLs()})
	}
	if err != nil {
		o.Status.EvaluationError = err.Error()
	}
}
