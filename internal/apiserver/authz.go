package apiserver

import (
	"errors"
	"net/http"
	"sync/atomic"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilversion "k8s.io/apimachinery/pkg/util/version"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/filters"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/authz"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// rbacWrite tells the cluster's authorizer of a successful write of an RBAC object once the store
// committed it and before the response goes out, so that the client's next request is decided
// by the new policy (the authorizer's watch would see it a moment later). After a ClusterRole's
// write it also runs the clusterrole-aggregation controller's part, so the client reads the
// aggregated roles as they would be once the controller reacted.
type rbacWrite struct {
	http.ResponseWriter
	r            *http.Request
	c            *store.Cluster
	clusterRoles bool
	done         bool
}

func (w *rbacWrite) WriteHeader(code int) {
	if !w.done {
		w.done = true
		if code < http.StatusBadRequest {
			if w.clusterRoles {
				_ = authz.AggregateClusterRoles(w.r.Context(), w.c) // a failure leaves the stored rules; authorization aggregates anyway
			}
			authz.Changed(w.c)
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *rbacWrite) Write(b []byte) (int, error) {
	if !w.done {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

func (w *rbacWrite) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// changesRBAC reports whether a request may change RBAC objects.
func changesRBAC(group, verb string) bool {
	if group != rbacv1.GroupName {
		return false
	}
	switch verb {
	case "create", "update", "patch", "delete", "deletecollection":
		return true
	}
	return false
}

// checkGrant is RBAC's escalation check (authz.CheckGrant) for a create of obj, a Role,
// ClusterRole or binding, before the store runs, as upstream's RBAC storage checks a create
// (updates and patches: grantValidator). A handler serving without authentication in
// front of it (no user on the request) checks nothing.
func (h *handler) checkGrant(rq *reqScope, obj runtime.Object) error {
	if rq.gvr.Group != rbacv1.GroupName {
		return nil
	}
	u, ok := apirequest.UserFrom(rq.r.Context())
	if !ok || authz.Privileged(u) {
		return nil
	}
	return authz.CheckGrant(rq.r.Context(), h.c, u, rq.ns, obj)
}

// grantValidator is RBAC's escalation check (authz.CheckGrantUpdate) for an update or patch of
// a Role, ClusterRole or binding, as the store's ValidateObject: the store runs it on the object
// it is about to store, inside its optimistic write, and again whenever the write is prepared
// again because the object changed meanwhile, as kube-apiserver's RBAC storage checks inside
// GuaranteedUpdate. So a concurrent write can never make the stored object another than the
// one judged. Nil (nothing to check) for other groups, and without a user or for a privileged one.
func (h *handler) grantValidator(rq *reqScope) store.ValidateObjectFunc {
	if rq.gvr.Group != rbacv1.GroupName {
		return nil
	}
	u, ok := apirequest.UserFrom(rq.r.Context())
	if !ok || authz.Privileged(u) {
		return nil
	}
	ctx, ns := rq.r.Context(), rq.ns
	return func(obj, old client.Object) error {
		if err := authz.CheckGrantUpdate(ctx, h.c, u, ns, obj, old); err != nil {
			return err
		}
		if hook := afterGrantJudged.Load(); hook != nil {
			(*hook)()
		}
		return nil
	}
}

// afterGrantJudged, set by tests only, runs after an update's escalation check allowed the
// object and before the store commits it: a test writes the object there, as a concurrent
// client could.
var afterGrantJudged atomic.Pointer[func()]

// createVerb is a request's attributes with the verb create.
type createVerb struct{ authorizer.Attributes }

func (createVerb) GetVerb() string { return "create" }

// checkPortForwardCreate: since 1.35 (feature gate AuthorizePodWebsocketUpgradeCreatePermission,
// beta and on), kube-apiserver's pods/portforward REST authorizes a GET, the WebSocket upgrade
// kubectl uses, a second time as create, so that get alone (which read-only roles grant) does
// not open a tunnel. Clusters of older versions allow get alone, as theirs did.
func (h *handler) checkPortForwardCreate(rq *reqScope) error {
	if rq.verb != "get" {
		return nil
	}
	if v, err := utilversion.ParseGeneric(h.c.KubernetesVersion()); err == nil && !v.AtLeast(utilversion.MajorMinor(1, 35)) {
		return nil
	}
	u, ok := apirequest.UserFrom(rq.r.Context())
	if !ok || authz.Privileged(u) {
		return nil // no authentication in front of the handler: nothing is authorized
	}
	attrs, err := filters.GetAuthorizerAttributes(rq.r.Context())
	if err != nil {
		return err
	}
	decision, reason, err := authz.Authorize(rq.r.Context(), h.c, createVerb{attrs})
	if err != nil {
		return err
	}
	if decision != authorizer.DecisionAllow {
		return apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, rq.name, errors.New(reason))
	}
	return nil
}
