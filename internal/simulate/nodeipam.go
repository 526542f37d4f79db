package simulate

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// nodeIPAM is kube-controller-manager's node IPAM controller (--allocate-node-cidrs, as kubeadm
// runs it when the cluster has a pod subnet): every Node gets a /24 of the cluster's pod subnet
// as spec.podCIDR, from which its kubelet hands out pod IPs.
type nodeIPAM struct {
	c   *cluster
	idx int
}

// defaultPodSubnet is used when kubeadm's ClusterConfiguration names none.
const defaultPodSubnet = "10.244.0.0/16"

// nodeCIDRMaskSize is kube-controller-manager's --node-cidr-mask-size for IPv4.
const nodeCIDRMaskSize = 24

// podSubnetWait is how long a new Node waits for kubeadm's ClusterConfiguration (the first
// control-plane node registers before kubeadm uploads it) before the default subnet is used.
const podSubnetWait = 10 * time.Second

func newNodeIPAM(c *cluster, idx int) *nodeIPAM { return &nodeIPAM{c: c, idx: idx} }

func (n *nodeIPAM) resources() []schema.GroupResource { return []schema.GroupResource{nodesGR} }

func (n *nodeIPAM) observe(ch store.Change) {
	if node, ok := ch.New.(*corev1.Node); ok && node.Spec.PodCIDR == "" && node.DeletionTimestamp == nil {
		n.c.enqueue(n.idx, node.Name)
	}
}

func (n *nodeIPAM) sync(ctx context.Context, key string) error {
	node, _ := n.c.cache.get(nodesGR, key).(*corev1.Node)
	if node == nil || node.Spec.PodCIDR != "" || node.DeletionTimestamp != nil {
		return nil
	}
	subnet, err := n.podSubnet(ctx)
	if err != nil {
		if time.Since(node.CreationTimestamp.Time) < podSubnetWait {
			n.c.after(time.Second, n.idx, key)
			return nil
		}
		subnet = netip.MustParsePrefix(defaultPodSubnet)
	}
	used := map[string]bool{}
	for _, other := range n.c.cache.nodes() {
		used[other.Spec.PodCIDR] = true
	}
	cidr, ok := freeNodeCIDR(subnet, used)
	if !ok {
		return nil // upstream reports CIDRNotAvailable and leaves the node without one
	}
	next := node.DeepCopy()
	next.Spec.PodCIDR = cidr
	next.Spec.PodCIDRs = []string{cidr}
	return n.c.client.Update(ctx, next)
}

// podSubnet reads networking.podSubnet (the first of a list) from kubeadm's ClusterConfiguration.
func (n *nodeIPAM) podSubnet(ctx context.Context) (netip.Prefix, error) {
	cm := &corev1.ConfigMap{}
	if err := n.c.client.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "kubeadm-config"}, cm); err != nil {
		return netip.Prefix{}, err
	}
	var cfg struct {
		Networking struct {
			PodSubnet string `json:"podSubnet"`
		} `json:"networking"`
	}
	if err := yaml.Unmarshal([]byte(cm.Data["ClusterConfiguration"]), &cfg); err != nil {
		return netip.Prefix{}, err
	}
	if cfg.Networking.PodSubnet == "" {
		return netip.MustParsePrefix(defaultPodSubnet), nil
	}
	p, err := netip.ParsePrefix(strings.TrimSpace(strings.Split(cfg.Networking.PodSubnet, ",")[0]))
	if err != nil || !p.Addr().Is4() || p.Bits() > nodeCIDRMaskSize {
		return netip.MustParsePrefix(defaultPodSubnet), nil
	}
	return p.Masked(), nil
}

// freeNodeCIDR returns the first /24 of subnet not in used.
func freeNodeCIDR(subnet netip.Prefix, used map[string]bool) (string, bool) {
	base := subnet.Addr().As4()
	start := binary.BigEndian.Uint32(base[:])
	count := uint32(1) << (nodeCIDRMaskSize - subnet.Bits())
	for i := range count {
		var a [4]byte
		binary.BigEndian.PutUint32(a[:], start+i<<(32-nodeCIDRMaskSize))
		cidr := fmt.Sprintf("%s/%d", netip.AddrFrom4(a), nodeCIDRMaskSize)
		if !used[cidr] {
			return cidr, true
		}
	}
	return "", false
}
