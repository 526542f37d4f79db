package azure

import (
	"context"
	"fmt"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
)

// APIServerPort is the port the cluster's load balancer forwards to the kube-apiservers.
const APIServerPort = "6443"

// frontend is what the services need to know about the cluster's load balancer.
type frontend struct {
	lbName    string
	publicIP  string // empty for an internal load balancer
	privateIP string
}

// GetLoadBalancerEndpoint returns the cluster's API endpoint: the public frontend IP of the
// load balancer tagged with the cluster UID if it has one, else its private frontend IP, and port
// 6443. It is an error when no or several load balancers carry the tag, or when the public IP has
// no address yet (falling back to the private IP would hand out an address outsiders cannot reach).
func (c *Cloud) GetLoadBalancerEndpoint(ctx context.Context) (host, port string, err error) {
	fe, err := c.loadBalancerFrontend(ctx)
	if err != nil {
		return "", "", err
	}
	if fe.publicIP != "" {
		return fe.publicIP, APIServerPort, nil
	}
	return fe.privateIP, APIServerPort, nil
}

// loadBalancerFrontend finds the cluster's one load balancer and resolves its frontend IPs.
func (c *Cloud) loadBalancerFrontend(ctx context.Context) (frontend, error) {
	var matches []*armnetwork.LoadBalancer
	pager := c.loadBalancers.NewListPager(c.resourceGroup, nil)
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return frontend{}, fmt.Errorf("azure: listing load balancers in resource group %s: %w", c.resourceGroup, err)
		}
		for _, lb := range page.Value {
			if lb == nil {
				continue
			}
			if uid, ok := tagValue(lb.Tags, c.tags.UID); ok && uid == c.uid {
				matches = append(matches, lb)
			}
		}
	}
	switch len(matches) {
	case 0:
		return frontend{}, fmt.Errorf("azure: no load balancer in resource group %s is tagged %s=%s", c.resourceGroup, c.tags.UID, c.uid)
	case 1:
	default:
		names := make([]string, 0, len(matches))
		for _, lb := range matches {
			names = append(names, deref(lb.Name))
		}
		return frontend{}, fmt.Errorf("azure: %d load balancers in resource group %s are tagged %s=%s (%s); want exactly one",
			len(matches), c.resourceGroup, c.tags.UID, c.uid, strings.Join(names, ", "))
	}

	lb := matches[0]
	fe := frontend{lbName: deref(lb.Name)}
	if lb.Properties == nil {
		return frontend{}, fmt.Errorf("azure: load balancer %s has no properties", fe.lbName)
	}
	var publicRef *armnetwork.PublicIPAddress
	for _, fic := range lb.Properties.FrontendIPConfigurations {
		if fic == nil || fic.Properties == nil {
			continue
		}
		if p := fic.Properties.PublicIPAddress; p != nil && publicRef == nil {
			publicRef = p
		}
		if ip := deref(fic.Properties.PrivateIPAddress); ip != "" && fe.privateIP == "" {
			fe.privateIP = ip
		}
	}
	if publicRef != nil {
		ip, err := c.publicAddress(ctx, fe.lbName, publicRef)
		if err != nil {
			return frontend{}, err
		}
		fe.publicIP = ip
	}
	if fe.publicIP == "" && fe.privateIP == "" {
		return frontend{}, fmt.Errorf("azure: load balancer %s has no frontend IP address", fe.lbName)
	}
	return fe, nil
}

// publicAddress resolves a frontend's public IP resource to its address. The load balancer only
// references the resource, so it is read (it may live in another resource group).
func (c *Cloud) publicAddress(ctx context.Context, lbName string, ref *armnetwork.PublicIPAddress) (string, error) {
	if ref.Properties != nil && deref(ref.Properties.IPAddress) != "" {
		return *ref.Properties.IPAddress, nil
	}
	if deref(ref.ID) == "" {
		return "", fmt.Errorf("azure: load balancer %s has a public frontend without a public IP ID", lbName)
	}
	id, err := arm.ParseResourceID(*ref.ID)
	if err != nil {
		return "", fmt.Errorf("azure: load balancer %s: bad public IP ID %q: %w", lbName, *ref.ID, err)
	}
	resp, err := c.publicIPs.Get(ctx, id.ResourceGroupName, id.Name, nil)
	if err != nil {
		return "", fmt.Errorf("azure: reading public IP %s of load balancer %s: %w", id.Name, lbName, err)
	}
	if resp.Properties == nil || deref(resp.Properties.IPAddress) == "" {
		return "", fmt.Errorf("azure: public IP %s of load balancer %s has no address (yet)", id.Name, lbName)
	}
	return *resp.Properties.IPAddress, nil
}
