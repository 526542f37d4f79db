package apiserver

import (
	"net/http"

	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/authz"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// rbacWrite tells the cluster's authorizer of a successful write of an RBAC object once the store
// committed it and before the response goes out, so that the client's next request is decided
// by the new policy (the authorizer's watch would see it a moment later).
type rbacWrite struct {
	http.ResponseWriter
	c    *store.Cluster
	done bool
}

func (w *rbacWrite) WriteHeader(code int) {
	if !w.done {
		w.done = true
		if code < http.StatusBadRequest {
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
