package azure

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

const selfVMID = "/subscriptions/" + testSub + "/resourceGroups/" + testRG + "/providers/Microsoft.Compute/virtualMachines/cp-0"

func TestIMDSReadsTheInstanceDocument(t *testing.T) {
	g := NewWithT(t)
	srv := newIMDSServer(t, imdsDoc(selfVMID, "CP-0", "2", []tag{{"Goofy-UID", testUID}, {"env", "a:b;c"}}, "10.0.0.4", "10.0.0.5"))
	c := testIMDS(srv)
	ctx := context.Background()

	g.Expect(c.Tags(ctx)).To(Equal(map[string]string{"Goofy-UID": testUID, "env": "a:b;c"}))
	g.Expect(c.ProviderID(ctx)).To(Equal("azure:///subscriptions/" + testSub + "/resourceGroups/goofy-rg/providers/Microsoft.Compute/virtualMachines/cp-0"))
	g.Expect(c.Name(ctx)).To(Equal("cp-0"))
	g.Expect(c.SubscriptionID(ctx)).To(Equal(testSub))
	g.Expect(c.ResourceGroup(ctx)).To(Equal(testRG))
	g.Expect(c.Location(ctx)).To(Equal("westeurope"))
	g.Expect(c.Zone(ctx)).To(Equal("2"))
	g.Expect(c.AzEnvironment(ctx)).To(Equal("AzurePublicCloud"))
	g.Expect(c.PrivateIPs(ctx)).To(Equal([]string{"10.0.0.4", "10.0.0.5"}))
	g.Expect(srv.protocolErrors()).To(BeEmpty(), "Metadata header, path, api-version and format")
	g.Expect(srv.count()).To(Equal(1), "all answers come from one cached document")
}

func TestIMDSDefaultClientBypassesProxies(t *testing.T) {
	g := NewWithT(t)
	c := NewIMDSClient()
	tr, ok := c.httpClient.Transport.(*http.Transport)
	g.Expect(ok).To(BeTrue())
	g.Expect(tr.Proxy).To(BeNil(), "IMDS must never be reached through HTTP(S)_PROXY")
	g.Expect(c.endpoint).To(Equal(DefaultIMDSEndpoint))
}

func TestIMDSEndpointFromEnvironment(t *testing.T) {
	g := NewWithT(t)
	srv := newIMDSServer(t, imdsDoc(selfVMID, "cp-0", "", clusterTags("worker"), "10.0.0.4"))
	t.Setenv(EnvIMDSEndpoint, srv.URL+"/")
	g.Expect(NewIMDSClient().Name(context.Background())).To(Equal("cp-0"))
	g.Expect(NewIMDSClient(WithIMDSEndpoint("http://127.0.0.1:1")).endpoint).To(Equal("http://127.0.0.1:1"), "an explicit option wins")
}

func TestIMDSRetriesTransientAnswers(t *testing.T) {
	doc := imdsDoc(selfVMID, "cp-0", "", clusterTags("worker"), "10.0.0.4")
	for name, step := range map[string]func(http.ResponseWriter, *http.Request){
		"404 (not ready)":               status(http.StatusNotFound),
		"410 (gone, during boot)":       status(http.StatusGone),
		"429 with a long Retry-After":   status(http.StatusTooManyRequests, "Retry-After", "30"),
		"500":                           status(http.StatusInternalServerError),
		"503":                           status(http.StatusServiceUnavailable),
		"connection closed (IMDS down)": hangUp,
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			srv := newIMDSServer(t, doc).then(step, step)
			g.Expect(testIMDS(srv).Tags(context.Background())).To(HaveKeyWithValue(DefaultUIDTagKey, testUID))
			g.Expect(srv.count()).To(Equal(3))
		})
	}
}

func TestIMDSGivesUpAfterMaxAttempts(t *testing.T) {
	g := NewWithT(t)
	srv := newIMDSServer(t, nil)
	for range 10 {
		srv.then(status(http.StatusInternalServerError))
	}
	_, err := testIMDS(srv).Tags(context.Background())
	g.Expect(err).To(MatchError(ContainSubstring("500 Internal Server Error")))
	g.Expect(err).To(MatchError(ContainSubstring("gave up after 5 attempts")))
	g.Expect(srv.count()).To(Equal(5))
}

func TestIMDSDoesNotRetryPermanentAnswers(t *testing.T) {
	for name, tc := range map[string]struct {
		step func(http.ResponseWriter, *http.Request)
		want string
	}{
		"400 (bad request)": {status(http.StatusBadRequest), "400 Bad Request"},
		"403":               {status(http.StatusForbidden), "403 Forbidden"},
		"non-JSON":          {func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("<html>hello</html>")) }, "not an instance document"},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			srv := newIMDSServer(t, imdsDoc(selfVMID, "cp-0", "", nil, "10.0.0.4")).then(tc.step)
			_, err := testIMDS(srv).Tags(context.Background())
			g.Expect(err).To(MatchError(ContainSubstring(tc.want)))
			g.Expect(srv.count()).To(Equal(1))
		})
	}
}

func TestIMDSServerDown(t *testing.T) {
	g := NewWithT(t)
	srv := newIMDSServer(t, nil)
	srv.Close()
	_, err := testIMDS(srv).Tags(context.Background())
	g.Expect(err).To(MatchError(ContainSubstring("request to " + srv.URL + " failed")))
}

func TestIMDSMissingFields(t *testing.T) {
	ctx := context.Background()
	t.Run("no compute section", func(t *testing.T) {
		g := NewWithT(t)
		c := testIMDS(newIMDSServer(t, map[string]any{}))
		_, err := c.Tags(ctx)
		g.Expect(err).To(MatchError(ContainSubstring("no compute section")))
		_, err = c.PrivateIPs(ctx)
		g.Expect(err).To(MatchError(ContainSubstring("no network interface")))
	})
	t.Run("empty compute section", func(t *testing.T) {
		g := NewWithT(t)
		c := testIMDS(newIMDSServer(t, map[string]any{"compute": map[string]any{}, "network": map[string]any{"interface": []any{}}}))
		g.Expect(c.Tags(ctx)).To(BeEmpty(), "no tags is not an error")
		for what, call := range map[string]func(context.Context) (string, error){
			"compute.resourceId": c.ProviderID, "compute.subscriptionId": c.SubscriptionID,
			"compute.resourceGroupName": c.ResourceGroup, "compute.osProfile.computerName": c.Name, "compute.location": c.Location,
		} {
			_, err := call(ctx)
			g.Expect(err).To(MatchError(ContainSubstring("no "+what)), what)
		}
		g.Expect(c.Zone(ctx)).To(BeEmpty())
		_, err := c.PrivateIPs(ctx)
		g.Expect(err).To(MatchError(ContainSubstring("no network interface")))
	})
	t.Run("malformed resource ID", func(t *testing.T) {
		g := NewWithT(t)
		c := testIMDS(newIMDSServer(t, imdsDoc("/subscriptions/x/resourceGroups//providers/a/b/c", "n", "", nil)))
		_, err := c.ProviderID(ctx)
		g.Expect(err).To(MatchError(ContainSubstring("not an ARM resource ID")))
		_, err = c.PrivateIPs(ctx)
		g.Expect(err).To(MatchError(ContainSubstring("no private IPv4 address")))
	})
}

func TestIMDSHonoursTheContext(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := newIMDSServer(t, nil)
	for range 10 {
		srv.then(func(w http.ResponseWriter, r *http.Request) {
			cancel() // the caller gives up while IMDS keeps failing
			status(http.StatusServiceUnavailable)(w, r)
		})
	}
	c := testIMDS(srv, WithIMDSRetry(IMDSRetry{MaxAttempts: 10, InitialDelay: time.Hour, MaxDelay: time.Hour}))
	_, err := c.Tags(ctx)
	g.Expect(err).To(MatchError(context.Canceled))
	g.Expect(srv.count()).To(Equal(1), "no retry after the context ended, and no hour-long wait")

	_, err = c.Tags(ctx)
	g.Expect(err).To(MatchError(context.Canceled))
	g.Expect(srv.count()).To(Equal(1), "a cancelled context makes no request")
}

func TestIMDSCacheTTLAndConcurrency(t *testing.T) {
	g := NewWithT(t)
	srv := newIMDSServer(t, imdsDoc(selfVMID, "cp-0", "", clusterTags("worker"), "10.0.0.4"))
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var clock sync.Mutex
	c := testIMDS(srv, WithIMDSCacheTTL(time.Minute))
	c.now = func() time.Time { clock.Lock(); defer clock.Unlock(); return now }

	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			_, err := c.Tags(context.Background())
			g.Expect(err).NotTo(HaveOccurred())
		})
	}
	wg.Wait()
	g.Expect(srv.count()).To(Equal(1), "concurrent callers share one request")

	clock.Lock()
	now = now.Add(59 * time.Second)
	clock.Unlock()
	_, _ = c.Name(context.Background())
	g.Expect(srv.count()).To(Equal(1), "still fresh")

	clock.Lock()
	now = now.Add(2 * time.Second)
	clock.Unlock()
	_, _ = c.Name(context.Background())
	g.Expect(srv.count()).To(Equal(2), "refetched after the TTL")

	// A failed refresh is not cached: the next call asks again.
	srv.then(status(http.StatusBadRequest))
	clock.Lock()
	now = now.Add(2 * time.Minute)
	clock.Unlock()
	_, err := c.Name(context.Background())
	g.Expect(err).To(HaveOccurred())
	g.Expect(c.Name(context.Background())).To(Equal("cp-0"))
	g.Expect(srv.count()).To(Equal(4))
}

func TestIMDSNoCache(t *testing.T) {
	g := NewWithT(t)
	srv := newIMDSServer(t, imdsDoc(selfVMID, "cp-0", "", nil, "10.0.0.4"))
	c := testIMDS(srv, WithIMDSCacheTTL(0))
	for range 3 {
		_, err := c.Name(context.Background())
		g.Expect(err).NotTo(HaveOccurred())
	}
	g.Expect(srv.count()).To(Equal(3))
}

func TestIMDSErrorMentionsBody(t *testing.T) {
	g := NewWithT(t)
	srv := newIMDSServer(t, nil).then(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(strings.Repeat("x", 500)))
	})
	_, err := testIMDS(srv).Tags(context.Background())
	g.Expect(err).To(MatchError(ContainSubstring(`xxx..."`)), "long bodies are shortened")
}
