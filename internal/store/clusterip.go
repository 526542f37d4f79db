package store

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// serviceCIDRBase is the start of kubeadm's default service range 10.96.0.0/12; .1 is the
// "kubernetes" service's address, so allocation starts above it.
var serviceCIDRBase = [4]byte{10, 96, 0, 0}

const serviceCIDRSize = 1 << 20

var servicesGR = corev1.SchemeGroupVersion.WithResource("services").GroupResource()

// allocateClusterIP gives a new Service the next free address of the service range, as the real
// API server's allocator does at create time. Callers hold c.mu.
func (c *Cluster) allocateClusterIP(s *corev1.Service) {
	if s.Spec.Type == corev1.ServiceTypeExternalName || s.Spec.ClusterIP != "" {
		if s.Spec.ClusterIP != "" && len(s.Spec.ClusterIPs) == 0 {
			s.Spec.ClusterIPs = []string{s.Spec.ClusterIP}
		}
		return
	}
	used := map[string]bool{}
	for _, o := range c.objs.Resource(servicesGR) {
		used[o.Object().(*corev1.Service).Spec.ClusterIP] = true
	}
	for i := 2; i < serviceCIDRSize-1; i++ {
		ip := ipString(serviceCIDRBase, i)
		if !used[ip] {
			s.Spec.ClusterIP = ip
			s.Spec.ClusterIPs = []string{ip}
			break
		}
	}
	if len(s.Spec.IPFamilies) == 0 {
		s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol}
	}
	if s.Spec.IPFamilyPolicy == nil {
		s.Spec.IPFamilyPolicy = ptr.To(corev1.IPFamilyPolicySingleStack)
	}
}

func ipString(base [4]byte, offset int) string {
	v := uint32(base[0])<<24 | uint32(base[1])<<16 | uint32(base[2])<<8 | uint32(base[3])
	v += uint32(offset)
	return fmt.Sprintf("%d.%d.%d.%d", v>>24, v>>16&0xff, v>>8&0xff, v&0xff)
}
