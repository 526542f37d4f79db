package apiserver

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/testenv"
)

// What one request of the fuzz target may cost (the store's fuzz target has the same budget):
// a simulated cluster shares its process with all others, so no request may allocate without
// bound or hold its cluster's lock for long. The copy-doubling seed allocates gigabytes without
// kube-apiserver's JSON patch copy limit.
const (
	fuzzAllocBudget = 64 << 20
	fuzzLockBudget  = time.Second
)

// FuzzServeHTTP throws arbitrary methods, paths, queries, content types and bodies at one
// handler. A panic (recovered into a 500 InternalError) or any other 5xx fails: bad input must
// always be answered with a 4xx Status, within the budget of memory and lock time.
func FuzzServeHTTP(f *testing.F) {
	m := store.NewManager()
	c, err := m.AddCluster("fuzz", store.ClusterOptions{KubernetesVersion: testVersion, EventHistory: 64})
	if err != nil {
		f.Fatal(err)
	}
	h := NewHandler(c, Options{MaxRequestBodyBytes: 64 << 10})
	seed := []struct{ method, path, query, ctype, accept, body string }{
		{"GET", "/api/v1/namespaces/default/configmaps", "limit=1", "", "", ""},
		{"POST", "/api/v1/namespaces/default/configmaps", "fieldValidation=Strict", "application/json", "", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"}}`},
		{"PATCH", "/api/v1/namespaces/default/configmaps/a", "", "application/strategic-merge-patch+json", "", `{"data":{"$patch":"replace"}}`},
		{"PATCH", "/api/v1/namespaces/default/configmaps/a", "fieldManager=f&force=true", "application/apply-patch+yaml", "", "apiVersion: v1\nkind: ConfigMap\ndata: {x: y}\n"},
		{"PATCH", "/apis/apps/v1/namespaces/default/deployments/d/scale", "", "application/json-patch+json", "", `[{"op":"replace","path":"/spec/replicas","value":2}]`},
		{"POST", "/api/v1/namespaces/default/pods/p/eviction", "", "application/json", "", `{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"p"}}`},
		{"GET", "/api/v1/namespaces/default/pods", "watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true", "", "application/json;as=Table;v=v1;g=meta.k8s.io", ""},
		{"DELETE", "/api/v1/namespaces/default/configmaps", "labelSelector=a%3Db", "application/vnd.kubernetes.protobuf", "", "k8s\x00\x0a\x01"},
		{"GET", "/apis", "", "", "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList", ""},
		{"PUT", "/api/v1/nodes/n/status", "", "application/yaml", "", "apiVersion: v1\nkind: Node\nmetadata: {name: n}\n"},
		{"PATCH", "/api/v1/namespaces/default/configmaps/a", "", "application/json-patch+json", "", string(copyBomb())},
		{"POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", "", "application/json", "", `{"spec":{"resourceAttributes":{"verb":"get","resource":"pods","namespace":"default"}}}`},
		{"POST", "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews", "", "application/json", "", `{"spec":{"namespace":"default"}}`},
		{"POST", "/apis/authorization.k8s.io/v1/namespaces/default/localsubjectaccessreviews", "", "application/yaml", "", "spec: {user: u, nonResourceAttributes: {verb: get, path: /}}\n"},
		{"POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", "", "application/vnd.kubernetes.protobuf", "", "k8s\x00\x0a\x01"},
		{"POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", "", "application/json", "", `{}`},
	}
	for _, s := range seed {
		f.Add(s.method, s.path, s.query, s.ctype, s.accept, []byte(s.body))
	}
	f.Fuzz(func(t *testing.T, method, path, query, ctype, accept string, body []byte) {
		if !strings.HasPrefix(path, "/") {
			path = "/" + path
		}
		u := &url.URL{Path: path, RawQuery: query}
		req, err := http.NewRequest(method, u.String(), bytes.NewReader(body))
		if err != nil {
			return // not a request net/http could deliver
		}
		// An already-cancelled context ends watches right after their headers.
		cctx, cancel := context.WithCancel(context.Background())
		cancel()
		req = req.WithContext(cctx)
		req.Header.Set("Content-Type", ctype)
		req.Header.Set("Accept", accept)
		rec := httptest.NewRecorder()
		store.TimeLockHolds(true)
		defer store.TimeLockHolds(false)
		store.LongestLockHold()
		if n := testenv.Allocated(func() { h.ServeHTTP(rec, req) }); n > fuzzAllocBudget {
			t.Fatalf("%s %s?%s allocated %d MiB, over the budget of %d MiB", method, path, query, n>>20, fuzzAllocBudget>>20)
		}
		if d := store.LongestLockHold(); d > fuzzLockBudget {
			t.Fatalf("%s %s?%s held the cluster lock for %v, over the budget of %v", method, path, query, d, fuzzLockBudget)
		}
		if rec.Code >= 500 {
			t.Fatalf("%s %s?%s (ctype %q accept %q, body %q) -> %d: %s", method, path, query, ctype, accept, body, rec.Code, rec.Body.String())
		}
	})
}
