package azure

import (
	"context"
	"net/http"
	"testing"

	azfake "github.com/Azure/azure-sdk-for-go/sdk/azcore/fake"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
	. "github.com/onsi/gomega"
)

const pipID = "/subscriptions/" + testSub + "/resourceGroups/Public-IPs/providers/Microsoft.Network/publicIPAddresses/api-pip"

// servePublicIPs answers public IP reads from a map keyed by "resourceGroup/name".
func (f *fakeAzure) servePublicIPs(ips map[string]*string) {
	f.network.PublicIPAddressesServer.Get = func(_ context.Context, rg, name string, _ *armnetwork.PublicIPAddressesClientGetOptions) (resp azfake.Responder[armnetwork.PublicIPAddressesClientGetResponse], errResp azfake.ErrorResponder) {
		ip, ok := ips[rg+"/"+name]
		if !ok {
			errResp.SetResponseError(http.StatusNotFound, "ResourceNotFound")
			return
		}
		resp.SetResponse(http.StatusOK, armnetwork.PublicIPAddressesClientGetResponse{PublicIPAddress: armnetwork.PublicIPAddress{
			Name: to.Ptr(name), Properties: &armnetwork.PublicIPAddressPropertiesFormat{IPAddress: ip}}}, nil)
		return
	}
}

func TestGetLoadBalancerEndpoint(t *testing.T) {
	both := publicLB("api-lb", testUID, pipID)
	both.Properties.FrontendIPConfigurations = append(both.Properties.FrontendIPConfigurations,
		&armnetwork.FrontendIPConfiguration{Properties: &armnetwork.FrontendIPConfigurationPropertiesFormat{PrivateIPAddress: to.Ptr("10.0.0.100")}})
	caseTagged := internalLB("api-lb", testUID, "10.0.0.200")
	caseTagged.Tags = tags("GOOFY-UID", testUID)
	embedded := publicLB("api-lb", testUID, pipID)
	embedded.Properties.FrontendIPConfigurations[0].Properties.PublicIPAddress.Properties = &armnetwork.PublicIPAddressPropertiesFormat{IPAddress: to.Ptr("198.51.100.9")}
	oddFrontends := internalLB("api-lb", testUID, "10.0.0.50")
	oddFrontends.Properties.FrontendIPConfigurations = append([]*armnetwork.FrontendIPConfiguration{nil, {}}, oddFrontends.Properties.FrontendIPConfigurations...)

	for name, tc := range map[string]struct {
		pages [][]*armnetwork.LoadBalancer
		want  string
	}{
		"public frontend":                      {pages: [][]*armnetwork.LoadBalancer{{publicLB("api-lb", testUID, pipID)}}, want: "203.0.113.7"},
		"public wins over private":             {pages: [][]*armnetwork.LoadBalancer{{both}}, want: "203.0.113.7"},
		"internal only":                        {pages: [][]*armnetwork.LoadBalancer{{internalLB("api-lb", testUID, "10.0.0.100")}}, want: "10.0.0.100"},
		"on page two, among others' balancers": {pages: [][]*armnetwork.LoadBalancer{{nil, internalLB("other", "someone-else", "10.9.0.1"), {Name: to.Ptr("untagged")}}, {caseTagged}}, want: "10.0.0.200"},
		"address already in the frontend":      {pages: [][]*armnetwork.LoadBalancer{{embedded}}, want: "198.51.100.9"},
		"nil frontends are skipped":            {pages: [][]*armnetwork.LoadBalancer{{oddFrontends}}, want: "10.0.0.50"},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			f := &fakeAzure{}
			f.serveLoadBalancers(tc.pages...)
			f.servePublicIPs(map[string]*string{"Public-IPs/api-pip": to.Ptr("203.0.113.7")})
			env := newTestCloud(t, f, nil, nil)
			host, port, err := env.cloud.GetLoadBalancerEndpoint(context.Background())
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(host).To(Equal(tc.want))
			g.Expect(port).To(Equal("6443"))
		})
	}
}

func TestGetLoadBalancerEndpointErrors(t *testing.T) {
	noFrontends := internalLB("api-lb", testUID, "")
	noProps := &armnetwork.LoadBalancer{Name: to.Ptr("api-lb"), Tags: tags(DefaultUIDTagKey, testUID)}
	badPIP := publicLB("api-lb", testUID, "garbage")
	noPIPID := publicLB("api-lb", testUID, "")
	noPIPID.Properties.FrontendIPConfigurations[0].Properties.PublicIPAddress.ID = nil

	for name, tc := range map[string]struct {
		pages  [][]*armnetwork.LoadBalancer
		ips    map[string]*string
		want   string
		status int
	}{
		"no load balancer":           {pages: [][]*armnetwork.LoadBalancer{{internalLB("other", "someone-else", "10.0.0.1")}}, want: "no load balancer in resource group Goofy-RG is tagged goofy-uid=uid-1234"},
		"no load balancer at all":    {want: "no load balancer in resource group"},
		"several load balancers":     {pages: [][]*armnetwork.LoadBalancer{{internalLB("lb-a", testUID, "10.0.0.1")}, {internalLB("lb-b", testUID, "10.0.0.2")}}, want: "2 load balancers in resource group Goofy-RG are tagged goofy-uid=uid-1234 (lb-a, lb-b); want exactly one"},
		"public IP without address":  {pages: [][]*armnetwork.LoadBalancer{{publicLB("api-lb", testUID, pipID)}}, ips: map[string]*string{"Public-IPs/api-pip": nil}, want: "public IP api-pip of load balancer api-lb has no address (yet)"},
		"public IP empty address":    {pages: [][]*armnetwork.LoadBalancer{{publicLB("api-lb", testUID, pipID)}}, ips: map[string]*string{"Public-IPs/api-pip": to.Ptr("")}, want: "has no address (yet)"},
		"public IP gone":             {pages: [][]*armnetwork.LoadBalancer{{publicLB("api-lb", testUID, pipID)}}, want: "reading public IP api-pip of load balancer api-lb", status: 404},
		"bad public IP ID":           {pages: [][]*armnetwork.LoadBalancer{{badPIP}}, want: `bad public IP ID "garbage"`},
		"public frontend without ID": {pages: [][]*armnetwork.LoadBalancer{{noPIPID}}, want: "public frontend without a public IP ID"},
		"no frontend IP":             {pages: [][]*armnetwork.LoadBalancer{{noFrontends}}, want: "load balancer api-lb has no frontend IP address"},
		"no properties":              {pages: [][]*armnetwork.LoadBalancer{{noProps}}, want: "load balancer api-lb has no properties"},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			f := &fakeAzure{}
			f.serveLoadBalancers(tc.pages...)
			f.servePublicIPs(tc.ips)
			env := newTestCloud(t, f, nil, nil)
			host, port, err := env.cloud.GetLoadBalancerEndpoint(context.Background())
			g.Expect(err).To(MatchError(ContainSubstring(tc.want)))
			g.Expect(host).To(BeEmpty())
			g.Expect(port).To(BeEmpty())
			g.Expect(responseStatus(err)).To(Equal(tc.status))
		})
	}
}

func TestGetLoadBalancerEndpointARMFailures(t *testing.T) {
	t.Run("pager error on page two", func(t *testing.T) {
		g := NewWithT(t)
		f := &fakeAzure{}
		f.network.LoadBalancersServer.NewListPager = func(string, *armnetwork.LoadBalancersClientListOptions) (resp azfake.PagerResponder[armnetwork.LoadBalancersClientListResponse]) {
			resp.AddPage(http.StatusOK, armnetwork.LoadBalancersClientListResponse{LoadBalancerListResult: armnetwork.LoadBalancerListResult{
				Value: []*armnetwork.LoadBalancer{internalLB("api-lb", testUID, "10.0.0.1")}}}, nil)
			resp.AddResponseError(http.StatusForbidden, "AuthorizationFailed")
			return resp
		}
		env := newTestCloud(t, f, nil, nil)
		_, _, err := env.cloud.GetLoadBalancerEndpoint(context.Background())
		g.Expect(err).To(MatchError(ContainSubstring("listing load balancers in resource group Goofy-RG")))
		g.Expect(responseStatus(err)).To(Equal(403))
	})
	t.Run("429 and 5xx are retried", func(t *testing.T) {
		g := NewWithT(t)
		f := &fakeAzure{}
		f.serveLoadBalancers([]*armnetwork.LoadBalancer{internalLB("api-lb", testUID, "10.0.0.1")})
		var flaky *flakyTransport
		env := newTestCloud(t, f, nil, func(next policy.Transporter) policy.Transporter {
			flaky = &flakyTransport{next: next, suffix: "/providers/Microsoft.Network/loadBalancers", pending: []rawResponse{
				{status: 429, header: map[string]string{"retry-after-ms": "2"}}, {status: 502},
			}}
			return flaky
		})
		host, _, err := env.cloud.GetLoadBalancerEndpoint(context.Background())
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(host).To(Equal("10.0.0.1"))
		g.Expect(flaky.count()).To(Equal(3))
	})
	t.Run("credential failure", func(t *testing.T) {
		g := NewWithT(t)
		f := &fakeAzure{}
		f.serveLoadBalancers([]*armnetwork.LoadBalancer{internalLB("api-lb", testUID, "10.0.0.1")})
		cred := &azfake.TokenCredential{}
		cred.SetError(errString("no managed identity on this VM"))
		env := newTestCloud(t, f, func(c *Config) { c.Credential = cred }, nil)
		_, _, err := env.cloud.GetLoadBalancerEndpoint(context.Background())
		g.Expect(err).To(MatchError(ContainSubstring("no managed identity on this VM")))
	})
}

type errString string

func (e errString) Error() string { return string(e) }
