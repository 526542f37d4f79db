package mux

import (
	"encoding/json"
	"net/http"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/authz"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

const unauthenticated = "Unauthorized"

// authenticate turns the verified client certificate into the request's user (CN = name,
// O = groups; a certificate without a chain to this cluster's CA fails the handshake) and hands
// the request to kube-apiserver's impersonation and authorization filters for cluster c
// (internal/authz: system:masters pass untouched, everyone else by the cluster's RBAC).
//
// A request without a certificate is anonymous, as kubeadm's kube-apiserver (whose
// --anonymous-auth stays at its default, true) treats it: system:anonymous in
// system:unauthenticated, which the default policy lets read the health endpoints and kubeadm's
// cluster-info, and nothing else (403). A certificate that no longer chains to the cluster's CA
// (one verified against a CA since rotated) gets a 401 instead: upstream's anonymous
// authenticator only runs when no other authenticator failed. The health endpoints skip
// authorization: kube-apiserver's RBAC bootstrap reconciles system:public-info-viewer back onto
// them on every start, so no lasting policy closes them, and probes stay free.
func authenticate(c *store.Cluster, next http.Handler) http.Handler {
	authorized := authz.WithAuthorization(next, c)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isPublicPath(r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		// This frame stays on the stack of every open watch: the work is in requestUser.
		if u := requestUser(r); u != nil {
			authorized.ServeHTTP(w, r.WithContext(request.WithUser(r.Context(), u)))
			return
		}
		writeStatus(w, &metav1.Status{
			Status: metav1.StatusFailure, Message: unauthenticated, Reason: metav1.StatusReasonUnauthorized, Code: http.StatusUnauthorized,
		})
	})
}

// requestUser is the user of the request's client certificate, anonymous without one, nil (401)
// when the certificate did not verify.
func requestUser(r *http.Request) user.Info {
	switch {
	case r.TLS != nil && len(r.TLS.VerifiedChains) > 0:
		leaf := r.TLS.VerifiedChains[0][0]
		return &user.DefaultInfo{Name: leaf.Subject.CommonName, Groups: append(slices.Clone(leaf.Subject.Organization), user.AllAuthenticated)}
	case r.TLS != nil && len(r.TLS.PeerCertificates) == 0:
		return anonymous
	}
	return nil
}

// anonymous is the user of a request without credentials (k8s.io/apiserver's anonymous
// authenticator).
var anonymous user.Info = &user.DefaultInfo{Name: user.Anonymous, Groups: []string{user.AllUnauthenticated}}

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
