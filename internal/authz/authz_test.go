package authz

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"go.uber.org/goleak"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/workload"
)

func newStore(t *testing.T) *store.Cluster {
	t.Helper()
	m := store.NewManager()
	c, err := m.AddCluster("authz-"+t.Name(), store.ClusterOptions{KubernetesVersion: "v1.36.3"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.DeleteCluster("authz-" + t.Name()) })
	cl := c.Client()
	for _, obj := range workload.DefaultRBAC() {
		if err := cl.Create(context.Background(), obj); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// A system:masters request passes the chain without an allocation and without an authorizer:
// CAPI's and KCP's traffic pays nothing for authorization.
func TestPrivilegedRequestsPayNothing(t *testing.T) {
	c := newStore(t)
	served := 0
	h := WithAuthorization(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served++ }), c)
	ctx := request.WithRequestInfo(context.Background(), &request.RequestInfo{IsResourceRequest: true, Verb: "list", Resource: "pods", APIVersion: "v1"})
	ctx = request.WithUser(ctx, &user.DefaultInfo{Name: "admin", Groups: []string{"system:masters", "system:authenticated"}})
	r := httptest.NewRequest(http.MethodGet, "/api/v1/pods", nil).WithContext(ctx)
	r.Header.Set("Accept", "application/json")
	w := httptest.NewRecorder()
	if n := testing.AllocsPerRun(100, func() { h.ServeHTTP(w, r) }); n != 0 {
		t.Errorf("a system:masters request allocated %v times in the authorization chain", n)
	}
	if served != 101 {
		t.Errorf("served %d of 101 requests", served)
	}
	if _, ok := registry.Load(c); ok {
		t.Error("a system:masters request created the cluster's authorizer")
	}
}

// What a decision costs others, once the index is built: reported, and bounded loosely so a
// change that rebuilt the index per request (hundreds of µs) fails.
func TestDecisionCost(t *testing.T) {
	c := newStore(t)
	a := For(c)
	attrs := authorizer.AttributesRecord{
		User: &user.DefaultInfo{Name: "system:kube-scheduler", Groups: []string{"system:authenticated"}},
		Verb: "list", Resource: "pods", APIVersion: "v1", ResourceRequest: true,
	}
	if d, _, _ := a.Authorize(context.Background(), attrs); d != authorizer.DecisionAllow {
		t.Fatal("the scheduler may list pods")
	}
	denied := attrs
	denied.Verb, denied.Namespace, denied.Resource = "get", "default", "secrets"
	for _, tc := range []struct {
		name  string
		attrs authorizer.AttributesRecord
	}{{"allowed", attrs}, {"denied", denied}} {
		start := time.Now()
		allocs := testing.AllocsPerRun(200, func() { _, _, _ = a.Authorize(context.Background(), tc.attrs) })
		per := time.Since(start) / 201
		t.Logf("%s: %v per decision, %v allocations", tc.name, per, allocs)
		if allocs > 100 {
			t.Errorf("%s: %v allocations per decision", tc.name, allocs)
		}
	}
}

// Deleting a cluster ends its authorizer's watches and the registry forgets it: a deleted
// cluster's store is not kept, and no goroutine is left.
func TestDeletedClusterIsForgotten(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	m := store.NewManager()
	c, err := m.AddCluster("authz-deleted", store.ClusterOptions{KubernetesVersion: "v1.36.3"})
	if err != nil {
		t.Fatal(err)
	}
	attrs := authorizer.AttributesRecord{User: &user.DefaultInfo{Name: "x"}, Verb: "get", Resource: "pods", Namespace: "default", APIVersion: "v1", ResourceRequest: true}
	if d, _, _ := Authorize(context.Background(), c, attrs); d == authorizer.DecisionAllow {
		t.Fatal("x may not get pods")
	}
	if _, ok := registry.Load(c); !ok {
		t.Fatal("the authorizer is not registered")
	}
	if err := m.DeleteCluster("authz-deleted"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, ok := registry.Load(c); !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the deleted cluster's authorizer is still registered")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
