package workload

import (
	"fmt"
	"net/netip"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/version"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ClusterSpec is what kubeadm's cluster-wide objects are built from.
type ClusterSpec struct {
	ClusterName          string
	KubernetesVersion    string
	ControlPlaneEndpoint string // host:port
	DNSDomain            string
	PodSubnet            string
	ServiceSubnet        string
}

// kubeadmAPIVersion is the kubeadm config API kubeadm writes into kubeadm-config for a version.
func kubeadmAPIVersion(kubernetesVersion string) string {
	if v, err := version.ParseSemantic(kubernetesVersion); err == nil && v.LessThan(version.MustParseSemantic("v1.31.0")) {
		return "kubeadm.k8s.io/v1beta3"
	}
	return "kubeadm.k8s.io/v1beta4"
}

// minor returns the minor version, or 0 if it cannot be parsed.
func minor(kubernetesVersion string) uint {
	v, err := version.ParseSemantic(kubernetesVersion)
	if err != nil {
		return 0
	}
	return v.Minor()
}

// CoreDNSVersion is the CoreDNS image tag kubeadm installs with a Kubernetes version.
func CoreDNSVersion(kubernetesVersion string) string {
	switch m := minor(kubernetesVersion); {
	case m >= 36:
		return "v1.14.2"
	case m == 35:
		return "v1.13.1"
	case m == 34:
		return "v1.12.1"
	case m == 33:
		return "v1.12.0"
	default:
		return "v1.11.3"
	}
}

// EtcdVersion is the etcd image tag kubeadm uses with a Kubernetes version.
func EtcdVersion(kubernetesVersion string) string {
	if minor(kubernetesVersion) >= 34 {
		return "3.6.8-0"
	}
	return "3.5.21-0"
}

// ClusterConfiguration renders the ClusterConfiguration document kubeadm stores in kubeadm-config.
func ClusterConfiguration(s ClusterSpec) string {
	dnsDomain := s.DNSDomain
	if dnsDomain == "" {
		dnsDomain = "cluster.local"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: %s\nkind: ClusterConfiguration\n", kubeadmAPIVersion(s.KubernetesVersion))
	fmt.Fprintf(&b, "apiServer: {}\ncertificatesDir: /etc/kubernetes/pki\nclusterName: %s\n", s.ClusterName)
	fmt.Fprintf(&b, "controlPlaneEndpoint: %s\ncontrollerManager: {}\ndns: {}\n", s.ControlPlaneEndpoint)
	b.WriteString("etcd:\n  local:\n    dataDir: /var/lib/etcd\n")
	fmt.Fprintf(&b, "imageRepository: registry.k8s.io\nkubernetesVersion: %s\n", s.KubernetesVersion)
	fmt.Fprintf(&b, "networking:\n  dnsDomain: %s\n", dnsDomain)
	if s.PodSubnet != "" {
		fmt.Fprintf(&b, "  podSubnet: %s\n", s.PodSubnet)
	}
	if s.ServiceSubnet != "" {
		fmt.Fprintf(&b, "  serviceSubnet: %s\n", s.ServiceSubnet)
	}
	b.WriteString("scheduler: {}\n")
	return b.String()
}

// defaultServiceSubnet is kubeadm's service CIDR when the cluster sets none.
const defaultServiceSubnet = "10.96.0.0/12"

// DNSServiceIP is the address kubeadm gives the kube-dns Service and kubelet's clusterDNS: the
// 10th address of the (first) service subnet.
func DNSServiceIP(serviceSubnet string) string {
	first, _, _ := strings.Cut(serviceSubnet, ",")
	p, err := netip.ParsePrefix(strings.TrimSpace(first))
	if err != nil {
		p = netip.MustParsePrefix(defaultServiceSubnet)
	}
	ip := p.Masked().Addr()
	for i := 0; i < 10; i++ {
		ip = ip.Next()
	}
	return ip.String()
}

// kubeletConfiguration is the KubeletConfiguration kubeadm stores in kubelet-config.
func kubeletConfiguration(s ClusterSpec) string {
	dnsDomain := s.DNSDomain
	if dnsDomain == "" {
		dnsDomain = "cluster.local"
	}
	return fmt.Sprintf("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncgroupDriver: systemd\nclusterDNS:\n- %s\nclusterDomain: %s\n",
		DNSServiceIP(s.ServiceSubnet), dnsDomain)
}

// Corefile is the CoreDNS configuration kubeadm writes.
func Corefile(dnsDomain string) string {
	if dnsDomain == "" {
		dnsDomain = "cluster.local"
	}
	return `.:53 {
    errors
    health {
       lameduck 5s
    }
    ready
    kubernetes ` + dnsDomain + ` in-addr.arpa ip6.arpa {
       pods insecure
       fallthrough in-addr.arpa ip6.arpa
       ttl 30
    }
    prometheus :9153
    forward . /etc/resolv.conf {
       max_concurrent 1000
    }
    cache 30 {
       disable success ` + dnsDomain + `
       disable denial ` + dnsDomain + `
    }
    loop
    reload
    loadbalance
}
`
}

// ClusterObjects returns what `kubeadm init` creates once, cluster-wide: kubeadm-config and
// kubelet-config, CoreDNS and kube-proxy, the cluster-info ConfigMap, and the RBAC of a kubeadm
// cluster (DefaultRBAC: kube-apiserver's default policy and kubeadm's roles and bindings).
func ClusterObjects(s ClusterSpec) []client.Object {
	sys := metav1.NamespaceSystem
	labels := func(app string) map[string]string { return map[string]string{"k8s-app": app} }
	two := int32(2)
	coreDNSImage := "registry.k8s.io/coredns/coredns:" + CoreDNSVersion(s.KubernetesVersion)
	kubeProxyImage := "registry.k8s.io/kube-proxy:" + s.KubernetesVersion
	return append([]client.Object{
		&corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "kubeadm-config", Namespace: sys},
			Data:       map[string]string{"ClusterConfiguration": ClusterConfiguration(s)},
		},
		&corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "kubelet-config", Namespace: sys},
			Data:       map[string]string{"kubelet": kubeletConfiguration(s)},
		},
		&corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "cluster-info", Namespace: metav1.NamespacePublic},
			Data:       map[string]string{"kubeconfig": "apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n    server: https://" + s.ControlPlaneEndpoint + "\n  name: \"\"\n"},
		},
		&corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "coredns", Namespace: sys},
			Data:       map[string]string{"Corefile": Corefile(s.DNSDomain)},
		},
		&appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: "coredns", Namespace: sys, Labels: labels("kube-dns")},
			Spec: appsv1.DeploymentSpec{
				Replicas: &two,
				Selector: &metav1.LabelSelector{MatchLabels: labels("kube-dns")},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels("kube-dns")},
					Spec: corev1.PodSpec{
						PriorityClassName:  "system-cluster-critical",
						ServiceAccountName: "coredns",
						// As kubeadm's manifest: CoreDNS may run on control-plane nodes.
						NodeSelector: map[string]string{"kubernetes.io/os": "linux"},
						Tolerations: []corev1.Toleration{
							{Key: "CriticalAddonsOnly", Operator: corev1.TolerationOpExists},
							{Key: ControlPlaneNodeLabel, Effect: corev1.TaintEffectNoSchedule},
						},
						Containers: []corev1.Container{{
							Name: "coredns", Image: coreDNSImage, Args: []string{"-conf", "/etc/coredns/Corefile"},
							Resources: corev1.ResourceRequirements{
								Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("70Mi")},
								Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("170Mi")},
							},
							VolumeMounts: []corev1.VolumeMount{{Name: "config-volume", MountPath: "/etc/coredns", ReadOnly: true}},
						}},
						Volumes: []corev1.Volume{{Name: "config-volume", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
							LocalObjectReference: corev1.LocalObjectReference{Name: "coredns"},
							Items:                []corev1.KeyToPath{{Key: "Corefile", Path: "Corefile"}},
						}}}},
					},
				},
			},
		},
		&corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy", Namespace: sys, Labels: map[string]string{"app": "kube-proxy"}},
			Data:       map[string]string{"config.conf": "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: iptables\n"},
		},
		&appsv1.DaemonSet{
			ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy", Namespace: sys, Labels: labels("kube-proxy")},
			Spec: appsv1.DaemonSetSpec{
				Selector: &metav1.LabelSelector{MatchLabels: labels("kube-proxy")},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels("kube-proxy")},
					Spec: corev1.PodSpec{
						PriorityClassName:  "system-node-critical",
						ServiceAccountName: "kube-proxy",
						HostNetwork:        true,
						// As kubeadm's manifest: kube-proxy runs on every node, whatever its taints.
						NodeSelector: map[string]string{"kubernetes.io/os": "linux"},
						Tolerations:  []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
						Containers: []corev1.Container{{
							Name: "kube-proxy", Image: kubeProxyImage,
							Command: []string{"/usr/local/bin/kube-proxy", "--config=/var/lib/kube-proxy/config.conf", "--hostname-override=$(NODE_NAME)"},
						}},
					},
				},
			},
		},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "coredns", Namespace: sys}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy", Namespace: sys}},
		&corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "kube-dns", Namespace: sys, Labels: labels("kube-dns")},
			Spec: corev1.ServiceSpec{ClusterIP: DNSServiceIP(s.ServiceSubnet), Selector: labels("kube-dns"), Ports: []corev1.ServicePort{
				{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP}, {Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP}}},
		},
	}, DefaultRBAC()...)
}
