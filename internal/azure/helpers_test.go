package azure

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"
	azfake "github.com/Azure/azure-sdk-for-go/sdk/azcore/fake"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	computefake "github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7/fake"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
	networkfake "github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7/fake"
)

const (
	testSub = "00000000-0000-0000-0000-000000000001"
	testRG  = "Goofy-RG"
	testUID = "uid-1234"
)

// fakeAzure holds the SDK's fake servers for the two SDK modules the package uses. Tests set the
// fake methods they need; an unset one answers with an error.
type fakeAzure struct {
	compute computefake.ServerFactory
	network networkfake.ServerFactory
}

// routeTransport sends each request to the fake of the SDK module that owns it. Scale-set NICs
// are network resources under a Microsoft.Compute path, so the path decides, not the namespace alone.
type routeTransport struct {
	compute, network policy.Transporter

	mu    sync.Mutex
	hosts map[string]bool
	calls map[string]int // requests (pages included) by SDK method, e.g. "InterfacesClient.Get"
}

func (t *routeTransport) Do(req *http.Request) (*http.Response, error) {
	t.mu.Lock()
	if t.hosts == nil {
		t.hosts, t.calls = map[string]bool{}, map[string]int{}
	}
	t.hosts[req.URL.Host] = true
	if method, ok := req.Context().Value(runtime.CtxAPINameKey{}).(string); ok {
		t.calls[method]++
	}
	t.mu.Unlock()
	// Like a real transport, refuse a request whose context has ended. The SDK fakes must not see
	// a context that ends while they answer: their dispatch goroutine then may send on a closed
	// channel and panic (armnetwork/v7 v7.2.0 fake, dispatchToMethodFake). They answer at once, so
	// detaching the cancellation loses nothing.
	if err := req.Context().Err(); err != nil {
		return nil, err
	}
	req = req.WithContext(context.WithoutCancel(req.Context()))
	p := strings.ToLower(req.URL.Path)
	if strings.Contains(p, "/providers/microsoft.network/") || strings.Contains(p, "/networkinterfaces") {
		return t.network.Do(req)
	}
	return t.compute.Do(req)
}

func (t *routeTransport) seenHosts() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for h := range t.hosts {
		out = append(out, h)
	}
	return out
}

// requests returns the requests each SDK method sent since the last call (methods without any
// left out), and starts counting again.
func (t *routeTransport) requests() map[string]int {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := maps.Clone(t.calls)
	clear(t.calls)
	return out
}

// nicRequests keeps the network-interface methods of calls.
func nicRequests(calls map[string]int) map[string]int {
	out := map[string]int{}
	for m, n := range calls {
		if strings.HasPrefix(m, "InterfacesClient.") {
			out[m] = n
		}
	}
	return out
}

func (f *fakeAzure) transport() *routeTransport {
	return &routeTransport{
		compute: computefake.NewServerFactoryTransport(&f.compute),
		network: networkfake.NewServerFactoryTransport(&f.network),
	}
}

// rawResponse is a canned answer the flaky transport returns before the fakes see the request.
type rawResponse struct {
	status int
	header map[string]string
	body   string
}

// flakyTransport answers the first requests whose path ends in suffix with canned raw responses
// (which the SDK's retry policy sees, unlike fake errors) and then delegates.
type flakyTransport struct {
	next   policy.Transporter
	suffix string

	mu      sync.Mutex
	pending []rawResponse
	calls   int // requests matching suffix, canned or not
}

func (t *flakyTransport) Do(req *http.Request) (*http.Response, error) {
	if !strings.HasSuffix(strings.ToLower(req.URL.Path), strings.ToLower(t.suffix)) {
		return t.next.Do(req)
	}
	t.mu.Lock()
	t.calls++
	var canned *rawResponse
	if len(t.pending) > 0 {
		canned = &t.pending[0]
		t.pending = t.pending[1:]
	}
	t.mu.Unlock()
	if canned == nil {
		return t.next.Do(req)
	}
	h := http.Header{"Content-Type": []string{"application/json"}}
	for k, v := range canned.header {
		h.Set(k, v)
	}
	return &http.Response{
		StatusCode: canned.status, Status: fmt.Sprintf("%d %s", canned.status, http.StatusText(canned.status)),
		Header: h, Body: io.NopCloser(strings.NewReader(canned.body)), Request: req, ContentLength: int64(len(canned.body)),
	}, nil
}

func (t *flakyTransport) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.calls
}

// fastRetry keeps the SDK's retries in milliseconds.
func fastRetry() policy.RetryOptions {
	return policy.RetryOptions{MaxRetries: 3, RetryDelay: time.Millisecond, MaxRetryDelay: 10 * time.Millisecond}
}

// syncBuffer is a log sink that concurrent NIC lookups may write to.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

type testEnv struct {
	cloud *Cloud
	logs  *syncBuffer
	route *routeTransport
}

// newTestCloud builds a Cloud whose real SDK clients talk to the fakes through tr (nil: the router).
func newTestCloud(t *testing.T, f *fakeAzure, mutate func(*Config), wrap func(policy.Transporter) policy.Transporter) testEnv {
	t.Helper()
	logs := &syncBuffer{}
	route := f.transport()
	var tr policy.Transporter = route
	if wrap != nil {
		tr = wrap(route)
	}
	cfg := Config{
		SubscriptionID: testSub,
		ResourceGroup:  testRG,
		ClusterUID:     testUID,
		Credential:     &azfake.TokenCredential{},
		ClientOptions:  &arm.ClientOptions{ClientOptions: policy.ClientOptions{Transport: tr, Retry: fastRetry()}},
		Logger:         slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if mutate != nil {
		mutate(&cfg)
	}
	c, err := NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("NewWithConfig: %v", err)
	}
	return testEnv{cloud: c, logs: logs, route: route}
}

// ---- ARM objects ----

func vmID(name string) string {
	return fmt.Sprintf("/subscriptions/%s/resourceGroups/%s/providers/Microsoft.Compute/virtualMachines/%s", testSub, testRG, name)
}

func nicID(name string) string {
	return fmt.Sprintf("/subscriptions/%s/resourceGroups/%s/providers/Microsoft.Network/networkInterfaces/%s", testSub, testRG, name)
}

func ssVMID(ss, instance string) string {
	return fmt.Sprintf("/subscriptions/%s/resourceGroups/%s/providers/Microsoft.Compute/virtualMachineScaleSets/%s/virtualMachines/%s", testSub, testRG, ss, instance)
}

func tags(kv ...string) map[string]*string {
	m := map[string]*string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = to.Ptr(kv[i+1])
	}
	return m
}

func nicRefs(primary string, others ...string) *armcompute.NetworkProfile {
	np := &armcompute.NetworkProfile{NetworkInterfaces: []*armcompute.NetworkInterfaceReference{}}
	for _, o := range others {
		np.NetworkInterfaces = append(np.NetworkInterfaces, &armcompute.NetworkInterfaceReference{ID: to.Ptr(o),
			Properties: &armcompute.NetworkInterfaceReferenceProperties{Primary: to.Ptr(false)}})
	}
	np.NetworkInterfaces = append(np.NetworkInterfaces, &armcompute.NetworkInterfaceReference{ID: to.Ptr(primary),
		Properties: &armcompute.NetworkInterfaceReferenceProperties{Primary: to.Ptr(true)}})
	return np
}

func vm(name, role, zone string) *armcompute.VirtualMachine {
	v := &armcompute.VirtualMachine{
		ID:   to.Ptr(vmID(name)),
		Name: to.Ptr(name),
		Tags: tags(DefaultUIDTagKey, testUID, DefaultRoleTagKey, role),
		Properties: &armcompute.VirtualMachineProperties{
			NetworkProfile: nicRefs(nicID(name + "-nic")),
			OSProfile:      &armcompute.OSProfile{ComputerName: to.Ptr(strings.ToUpper(name))},
		},
	}
	if zone != "" {
		v.Zones = []*string{to.Ptr(zone)}
	}
	return v
}

// nic builds a NIC whose first IP configuration is primary; extra IPs become secondary configurations.
func nic(id, primaryIP string, extra ...string) armnetwork.Interface {
	configs := []*armnetwork.InterfaceIPConfiguration{}
	for _, ip := range extra {
		configs = append(configs, &armnetwork.InterfaceIPConfiguration{Properties: &armnetwork.InterfaceIPConfigurationPropertiesFormat{
			Primary: to.Ptr(false), PrivateIPAddress: to.Ptr(ip)}})
	}
	configs = append(configs, &armnetwork.InterfaceIPConfiguration{Properties: &armnetwork.InterfaceIPConfigurationPropertiesFormat{
		Primary: to.Ptr(true), PrivateIPAddress: to.Ptr(primaryIP)}})
	return armnetwork.Interface{ID: to.Ptr(id), Properties: &armnetwork.InterfacePropertiesFormat{IPConfigurations: configs}}
}

// serveVMs makes the VM list answer with the given pages.
func (f *fakeAzure) serveVMs(pages ...[]*armcompute.VirtualMachine) {
	f.compute.VirtualMachinesServer.NewListPager = func(rg string, _ *armcompute.VirtualMachinesClientListOptions) (resp azfake.PagerResponder[armcompute.VirtualMachinesClientListResponse]) {
		if len(pages) == 0 {
			pages = append(pages, nil) // one empty page, as ARM answers an empty group
		}
		for _, p := range pages {
			resp.AddPage(http.StatusOK, armcompute.VirtualMachinesClientListResponse{VirtualMachineListResult: armcompute.VirtualMachineListResult{Value: p}}, nil)
		}
		return resp
	}
}

// serveScaleSets makes the scale-set list answer with one page.
func (f *fakeAzure) serveScaleSets(sets ...*armcompute.VirtualMachineScaleSet) {
	f.compute.VirtualMachineScaleSetsServer.NewListPager = func(rg string, _ *armcompute.VirtualMachineScaleSetsClientListOptions) (resp azfake.PagerResponder[armcompute.VirtualMachineScaleSetsClientListResponse]) {
		resp.AddPage(http.StatusOK, armcompute.VirtualMachineScaleSetsClientListResponse{VirtualMachineScaleSetListResult: armcompute.VirtualMachineScaleSetListResult{Value: sets}}, nil)
		return resp
	}
}

// nicPageSize is how many NICs the fakes' NIC listings put on one page.
const nicPageSize = 20

// serveNICs answers NIC reads (standalone and scale-set) from a map keyed by NIC name (scale-set
// NICs by "<set>/<instance ID>/<name>"); absent names answer 404. It also answers the listings of a
// resource group's NICs (the entries whose ID is in that group) and of a scale set's NICs (its
// entries, with the ID and properties.virtualMachine.id ARM gives them), nicPageSize to a page.
func (f *fakeAzure) serveNICs(nics map[string]armnetwork.Interface) {
	f.network.InterfacesServer.NewListPager = func(rg string, _ *armnetwork.InterfacesClientListOptions) (resp azfake.PagerResponder[armnetwork.InterfacesClientListResponse]) {
		var list []*armnetwork.Interface
		for _, key := range slices.Sorted(maps.Keys(nics)) {
			n := nics[key]
			id, err := arm.ParseResourceID(deref(n.ID))
			if strings.Contains(key, "/") || err != nil || !strings.EqualFold(id.ResourceGroupName, rg) {
				continue
			}
			list = append(list, &n)
		}
		addNICPages(&resp, list, func(r armnetwork.InterfaceListResult) armnetwork.InterfacesClientListResponse {
			return armnetwork.InterfacesClientListResponse{InterfaceListResult: r}
		})
		return resp
	}
	f.network.InterfacesServer.NewListVirtualMachineScaleSetNetworkInterfacesPager = func(rg, ss string, _ *armnetwork.InterfacesClientListVirtualMachineScaleSetNetworkInterfacesOptions) (resp azfake.PagerResponder[armnetwork.InterfacesClientListVirtualMachineScaleSetNetworkInterfacesResponse]) {
		var list []*armnetwork.Interface
		for _, key := range slices.Sorted(maps.Keys(nics)) {
			parts := strings.Split(key, "/")
			if len(parts) != 3 || parts[0] != ss {
				continue
			}
			n := nics[key]
			props := armnetwork.InterfacePropertiesFormat{}
			if n.Properties != nil {
				props = *n.Properties
			}
			props.VirtualMachine = &armnetwork.SubResource{ID: to.Ptr(ssVMID(ss, parts[1]))}
			n.ID, n.Properties = to.Ptr(ssVMID(ss, parts[1])+"/networkInterfaces/"+parts[2]), &props
			list = append(list, &n)
		}
		addNICPages(&resp, list, func(r armnetwork.InterfaceListResult) armnetwork.InterfacesClientListVirtualMachineScaleSetNetworkInterfacesResponse {
			return armnetwork.InterfacesClientListVirtualMachineScaleSetNetworkInterfacesResponse{InterfaceListResult: r}
		})
		return resp
	}
	f.network.InterfacesServer.Get = func(_ context.Context, rg, name string, _ *armnetwork.InterfacesClientGetOptions) (resp azfake.Responder[armnetwork.InterfacesClientGetResponse], errResp azfake.ErrorResponder) {
		n, ok := nics[name]
		if !ok {
			errResp.SetResponseError(http.StatusNotFound, "NotFound")
			return
		}
		resp.SetResponse(http.StatusOK, armnetwork.InterfacesClientGetResponse{Interface: n}, nil)
		return
	}
	f.network.InterfacesServer.GetVirtualMachineScaleSetNetworkInterface = func(_ context.Context, rg, ss, instance, name string, _ *armnetwork.InterfacesClientGetVirtualMachineScaleSetNetworkInterfaceOptions) (resp azfake.Responder[armnetwork.InterfacesClientGetVirtualMachineScaleSetNetworkInterfaceResponse], errResp azfake.ErrorResponder) {
		n, ok := nics[ss+"/"+instance+"/"+name]
		if !ok {
			errResp.SetResponseError(http.StatusNotFound, "NotFound")
			return
		}
		resp.SetResponse(http.StatusOK, armnetwork.InterfacesClientGetVirtualMachineScaleSetNetworkInterfaceResponse{Interface: n}, nil)
		return
	}
}

// addNICPages answers a NIC listing with list, nicPageSize NICs to a page (one empty page for none).
func addNICPages[T any](resp *azfake.PagerResponder[T], list []*armnetwork.Interface, page func(armnetwork.InterfaceListResult) T) {
	if len(list) == 0 {
		resp.AddPage(http.StatusOK, page(armnetwork.InterfaceListResult{}), nil)
	}
	for nics := range slices.Chunk(list, nicPageSize) {
		resp.AddPage(http.StatusOK, page(armnetwork.InterfaceListResult{Value: nics}), nil)
	}
}

// serveLoadBalancers answers the load-balancer list with the given pages.
func (f *fakeAzure) serveLoadBalancers(pages ...[]*armnetwork.LoadBalancer) {
	f.network.LoadBalancersServer.NewListPager = func(rg string, _ *armnetwork.LoadBalancersClientListOptions) (resp azfake.PagerResponder[armnetwork.LoadBalancersClientListResponse]) {
		if len(pages) == 0 {
			pages = append(pages, nil)
		}
		for _, p := range pages {
			resp.AddPage(http.StatusOK, armnetwork.LoadBalancersClientListResponse{LoadBalancerListResult: armnetwork.LoadBalancerListResult{Value: p}}, nil)
		}
		return resp
	}
}

func internalLB(name, uid, privateIP string) *armnetwork.LoadBalancer {
	return &armnetwork.LoadBalancer{
		Name: to.Ptr(name), Tags: tags(DefaultUIDTagKey, uid),
		Properties: &armnetwork.LoadBalancerPropertiesFormat{FrontendIPConfigurations: []*armnetwork.FrontendIPConfiguration{
			{Properties: &armnetwork.FrontendIPConfigurationPropertiesFormat{PrivateIPAddress: to.Ptr(privateIP)}},
		}},
	}
}

func publicLB(name, uid, publicIPID string) *armnetwork.LoadBalancer {
	return &armnetwork.LoadBalancer{
		Name: to.Ptr(name), Tags: tags(DefaultUIDTagKey, uid),
		Properties: &armnetwork.LoadBalancerPropertiesFormat{FrontendIPConfigurations: []*armnetwork.FrontendIPConfiguration{
			{Properties: &armnetwork.FrontendIPConfigurationPropertiesFormat{PublicIPAddress: &armnetwork.PublicIPAddress{ID: to.Ptr(publicIPID)}}},
		}},
	}
}

// ---- IMDS ----

// imdsServer is an httptest IMDS. Each request takes the next scripted answer; when the script
// is used up it serves doc.
type imdsServer struct {
	*httptest.Server

	mu       sync.Mutex
	script   []func(http.ResponseWriter, *http.Request)
	doc      any
	requests int
	bad      []string // requests that broke the IMDS protocol
}

func newIMDSServer(t *testing.T, doc any) *imdsServer {
	t.Helper()
	s := &imdsServer{doc: doc}
	s.Server = httptest.NewServer(http.HandlerFunc(s.handle))
	t.Cleanup(s.Close)
	return s
}

func (s *imdsServer) handle(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.requests++
	if r.Header.Get("Metadata") != "true" {
		s.bad = append(s.bad, "missing Metadata: true header")
	}
	if r.URL.Path != "/metadata/instance" || r.URL.Query().Get("api-version") != "2021-02-01" || r.URL.Query().Get("format") != "json" {
		s.bad = append(s.bad, "unexpected URL "+r.URL.String())
	}
	var step func(http.ResponseWriter, *http.Request)
	if len(s.script) > 0 {
		step, s.script = s.script[0], s.script[1:]
	}
	doc := s.doc
	s.mu.Unlock()
	if step != nil {
		step(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(doc)
}

func (s *imdsServer) then(steps ...func(http.ResponseWriter, *http.Request)) *imdsServer {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.script = append(s.script, steps...)
	return s
}

func (s *imdsServer) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests
}

func (s *imdsServer) protocolErrors() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.bad...)
}

func status(code int, header ...string) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, _ *http.Request) {
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.WriteHeader(code)
		_, _ = w.Write([]byte(`{"error":"scripted"}`))
	}
}

// hangUp closes the connection without an answer, as a not-yet-ready IMDS may.
func hangUp(w http.ResponseWriter, _ *http.Request) {
	conn, _, err := w.(http.Hijacker).Hijack()
	if err == nil {
		_ = conn.Close()
	}
}

// testIMDS returns a client for s with millisecond retries.
func testIMDS(s *imdsServer, opts ...IMDSOption) *IMDSClient {
	base := []IMDSOption{WithIMDSEndpoint(s.URL), WithIMDSRetry(IMDSRetry{MaxAttempts: 5, InitialDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond, AttemptTimeout: 5 * time.Second})}
	return NewIMDSClient(append(base, opts...)...)
}

type tag struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// imdsDoc builds an instance document as IMDS 2021-02-01 writes it.
func imdsDoc(resourceID, computerName, zone string, tagList []tag, ips ...string) map[string]any {
	addrs := []map[string]string{}
	for _, ip := range ips {
		addrs = append(addrs, map[string]string{"privateIpAddress": ip, "publicIpAddress": ""})
	}
	return map[string]any{
		"compute": map[string]any{
			"azEnvironment":     "AzurePublicCloud",
			"location":          "westeurope",
			"name":              "vm-name",
			"resourceGroupName": testRG,
			"resourceId":        resourceID,
			"subscriptionId":    testSub,
			"zone":              zone,
			"osProfile":         map[string]string{"computerName": computerName},
			"tagsList":          tagList,
			"tags":              "ignored:by-the-client",
		},
		"network": map[string]any{"interface": []any{
			map[string]any{"ipv4": map[string]any{"ipAddress": addrs, "subnet": []any{}}, "macAddress": "000D3A000000"},
		}},
	}
}

func clusterTags(role string) []tag {
	return []tag{{DefaultUIDTagKey, testUID}, {DefaultRoleTagKey, role}, {DefaultInitSecretHashTagKey, "sha256:abc"}}
}

// responseStatus extracts the ARM status code of an error, 0 if none.
func responseStatus(err error) int {
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		return re.StatusCode
	}
	return 0
}
