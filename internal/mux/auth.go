package mux

import (
	"fmt"
	"net/http"
	"slices"
	"strings"

	"encoding/json"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"
)

// Groups and users allowed to use a workload cluster's API. Every identity must come with a client
// certificate that chains to this cluster's CA (checked in the TLS handshake); among those, the
// admin groups and the control-plane components' own identities are authorized.
var (
	adminGroups     = []string{"system:masters", "kubeadm:cluster-admins"}
	componentUsers  = []string{"system:kube-controller-manager", "system:kube-scheduler", "system:kube-proxy", "kube-apiserver-kubelet-client"}
	nodeUserPrefix  = "system:node:"
	nodesGroup      = "system:nodes"
	unauthenticated = "Unauthorized"
)

// authenticate turns the verified client certificate into the request's user (CN = name,
// O = groups) and answers 401/403 Statuses as kube-apiserver does. The health endpoints are open,
// like kube-apiserver's, so probes work without credentials.
func authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isPublicPath(r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 {
			writeStatus(w, &metav1.Status{
				Status: metav1.StatusFailure, Message: unauthenticated, Reason: metav1.StatusReasonUnauthorized, Code: http.StatusUnauthorized,
			})
			return
		}
		leaf := r.TLS.VerifiedChains[0][0]
		u := &user.DefaultInfo{Name: leaf.Subject.CommonName, Groups: append(slices.Clone(leaf.Subject.Organization), user.AllAuthenticated)}
		if !authorized(u) {
			err := apierrors.NewForbidden(schema.GroupResource{}, "", fmt.Errorf("user %q (groups %q) is not allowed by this simulated cluster", u.Name, u.Groups))
			writeStatus(w, &err.ErrStatus)
			return
		}
		next.ServeHTTP(w, r.WithContext(request.WithUser(r.Context(), u)))
	})
}

func authorized(u user.Info) bool {
	for _, g := range u.GetGroups() {
		if slices.Contains(adminGroups, g) {
			return true
		}
	}
	if slices.Contains(componentUsers, u.GetName()) {
		return true
	}
	return strings.HasPrefix(u.GetName(), nodeUserPrefix) && slices.Contains(u.GetGroups(), nodesGroup)
}

func isPublicPath(p string) bool {
	switch p {
	case "/healthz", "/livez", "/readyz", "/version":
		return true
	}
	return false
}

func writeStatus(w http.ResponseWriter, s *metav1.Status) {
	s.Kind, s.APIVersion = "Status", "v1"
	data, _ := json.Marshal(s)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(int(s.Code))
	_, _ = w.Write(data)
}
