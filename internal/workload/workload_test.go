package workload_test

import (
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/blang/semver/v4"
	"github.com/coredns/corefile-migration/migration"
	"github.com/coredns/corefile-migration/migration/corefile"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	kubeadmtypes "sigs.k8s.io/cluster-api/bootstrap/kubeadm/pkg/types"
	"sigs.k8s.io/cluster-api/bootstrap/kubeadm/pkg/types/upstreamv1beta3"
	"sigs.k8s.io/cluster-api/bootstrap/kubeadm/pkg/types/upstreamv1beta4"
	"sigs.k8s.io/yaml"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/workload"
)

var now = metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))

func spec(version string) workload.ClusterSpec {
	return workload.ClusterSpec{
		ClusterName:          "c1",
		KubernetesVersion:    version,
		ControlPlaneEndpoint: "10.0.0.1:20000",
		DNSDomain:            "example.internal",
		PodSubnet:            "192.168.0.0/16",
		ServiceSubnet:        "10.96.0.0/12",
	}
}

// TestClusterConfiguration: kubeadm-config's ClusterConfiguration decodes strictly (no unknown
// field) into kubeadm's own API of the right version, and CAPI's kubeadm types (what KCP uses)
// read every value back and write it again unchanged.
func TestClusterConfiguration(t *testing.T) {
	for _, tc := range []struct {
		version, apiVersion string
		into                any
	}{
		{"v1.36.3", "kubeadm.k8s.io/v1beta4", &upstreamv1beta4.ClusterConfiguration{}},
		{"v1.31.0", "kubeadm.k8s.io/v1beta4", &upstreamv1beta4.ClusterConfiguration{}},
		{"v1.30.4", "kubeadm.k8s.io/v1beta3", &upstreamv1beta3.ClusterConfiguration{}},
	} {
		t.Run(tc.version, func(t *testing.T) {
			g := NewWithT(t)
			doc := workload.ClusterConfiguration(spec(tc.version))
			g.Expect(yaml.UnmarshalStrict([]byte(doc), tc.into)).To(Succeed(), doc)
			var meta metav1.TypeMeta
			g.Expect(yaml.Unmarshal([]byte(doc), &meta)).To(Succeed())
			g.Expect(meta.APIVersion).To(Equal(tc.apiVersion))
			g.Expect(meta.Kind).To(Equal("ClusterConfiguration"))

			cc, data, err := kubeadmtypes.UnmarshalClusterConfiguration(doc)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(cc.ControlPlaneEndpoint).To(Equal("10.0.0.1:20000"))
			g.Expect(cc.Etcd.Local.DataDir).To(Equal("/var/lib/etcd"))
			g.Expect(cc.ImageRepository).To(Equal("registry.k8s.io"))
			g.Expect(cc.CertificatesDir).To(Equal("/etc/kubernetes/pki"))
			g.Expect(ptr.Deref(data.KubernetesVersion, "")).To(Equal(tc.version))
			g.Expect(ptr.Deref(data.ClusterName, "")).To(Equal("c1"))
			g.Expect(ptr.Deref(data.DNSDomain, "")).To(Equal("example.internal"))
			g.Expect(ptr.Deref(data.PodSubnet, "")).To(Equal("192.168.0.0/16"))
			g.Expect(ptr.Deref(data.ServiceSubnet, "")).To(Equal("10.96.0.0/12"))

			// KCP rewrites the document on every rollout; what it writes reads back the same.
			out, err := kubeadmtypes.MarshalClusterConfigurationForVersion(cc, semver.MustParse(tc.version[1:]), data)
			g.Expect(err).NotTo(HaveOccurred())
			cc2, data2, err := kubeadmtypes.UnmarshalClusterConfiguration(out)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(cc2).To(Equal(cc))
			g.Expect(data2).To(Equal(data))
		})
	}
}

func TestClusterConfigurationDefaults(t *testing.T) {
	g := NewWithT(t)
	s := spec("v1.36.3")
	s.DNSDomain, s.PodSubnet, s.ServiceSubnet = "", "", ""
	_, data, err := kubeadmtypes.UnmarshalClusterConfiguration(workload.ClusterConfiguration(s))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ptr.Deref(data.DNSDomain, "")).To(Equal("cluster.local"))
	g.Expect(data.PodSubnet).To(BeNil())
}

// TestCorefile: the Corefile parses as CoreDNS configuration, is one of the default Corefiles
// kubeadm ships, and CoreDNS's own migration tool (which KCP runs on upgrades) accepts it.
func TestCorefile(t *testing.T) {
	g := NewWithT(t)
	cf := workload.Corefile("example.internal")
	parsed, err := corefile.New(cf)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(parsed.Servers).To(HaveLen(1))
	var plugins []string
	for _, p := range parsed.Servers[0].Plugins {
		plugins = append(plugins, p.Name)
	}
	g.Expect(plugins).To(ContainElements("errors", "health", "ready", "kubernetes", "forward", "cache", "loop", "reload", "loadbalance"))
	g.Expect(cf).To(ContainSubstring("kubernetes example.internal in-addr.arpa ip6.arpa"))
	// kubeadm >= 1.35 keeps the cluster domain out of the cache (the migration tool's defaults
	// predate that, so they are no reference here).
	for _, p := range parsed.Servers[0].Plugins {
		if p.Name == "cache" {
			g.Expect(p.Args).To(Equal([]string{"30"}))
			var opts []string
			for _, o := range p.Options {
				opts = append(opts, o.ToString())
			}
			g.Expect(opts).To(ConsistOf("disable success example.internal", "disable denial example.internal"))
		}
	}

	// KCP migrates with the tags without their "v".
	from := strings.TrimPrefix(workload.CoreDNSVersion("v1.34.1"), "v")
	to := strings.TrimPrefix(workload.CoreDNSVersion("v1.36.3"), "v")
	migrated, err := migration.Migrate(from, to, workload.Corefile(""), false)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = corefile.New(migrated)
	g.Expect(err).NotTo(HaveOccurred())
}

// TestImageVersions: the CoreDNS tags are real CoreDNS releases (known to the migration tool KCP
// uses, which refuses unknown ones) and newer Kubernetes never gets an older CoreDNS or etcd.
func TestImageVersions(t *testing.T) {
	g := NewWithT(t)
	valid := map[string]bool{}
	for _, v := range migration.ValidVersions() {
		valid[v] = true
	}
	prevDNS, prevEtcd := semver.Version{}, semver.Version{}
	for minor := 28; minor <= 36; minor++ {
		k := "v1." + strconv.Itoa(minor) + ".0"
		dns := workload.CoreDNSVersion(k)
		g.Expect(valid).To(HaveKey(dns[1:]), "CoreDNS %s for %s", dns, k)
		dv := semver.MustParse(dns[1:])
		g.Expect(dv.GTE(prevDNS)).To(BeTrue(), k)
		prevDNS = dv
		etcd := workload.EtcdVersion(k)
		ev := semver.MustParse(etcd[:len(etcd)-2]) // "3.6.8-0" -> 3.6.8
		g.Expect(ev.GTE(prevEtcd)).To(BeTrue(), k)
		prevEtcd = ev
	}
}

func TestNode(t *testing.T) {
	g := NewWithT(t)
	cp := workload.Node(workload.NodeSpec{Name: "cp-0", ProviderID: "goofy://ns/c/cp-0", KubeletVersion: "v1.36.3",
		InternalIP: "10.10.0.10", ControlPlane: true, Ready: true}, now)
	g.Expect(cp.Name).To(Equal("cp-0"))
	g.Expect(cp.Spec.ProviderID).To(Equal("goofy://ns/c/cp-0"))
	g.Expect(cp.Status.NodeInfo.KubeletVersion).To(Equal("v1.36.3"))
	g.Expect(cp.Labels).To(HaveKeyWithValue("kubernetes.io/hostname", "cp-0"))
	g.Expect(cp.Labels).To(HaveKeyWithValue(workload.ControlPlaneNodeLabel, ""))
	g.Expect(cp.Spec.Taints).To(ConsistOf(clusterv1.NodeUninitializedTaint,
		corev1.Taint{Key: workload.ControlPlaneNodeLabel, Effect: corev1.TaintEffectNoSchedule}))
	g.Expect(cp.Status.Addresses).To(ContainElement(corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.10.0.10"}))
	g.Expect(cp.Status.Capacity).To(Equal(workload.DefaultCapacity()))
	g.Expect(cp.Status.Allocatable).To(Equal(workload.DefaultCapacity()))
	g.Expect(nodeCondition(cp, corev1.NodeReady)).To(Equal(corev1.ConditionTrue))
	for _, c := range []corev1.NodeConditionType{corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure} {
		g.Expect(nodeCondition(cp, c)).To(Equal(corev1.ConditionFalse), string(c))
	}

	capacity := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("16"), corev1.ResourceMemory: resource.MustParse("64Gi")}
	w := workload.Node(workload.NodeSpec{Name: "md-0", Capacity: capacity, Ready: false}, now)
	g.Expect(w.Labels).NotTo(HaveKey(workload.ControlPlaneNodeLabel))
	g.Expect(w.Spec.Taints).To(ConsistOf(clusterv1.NodeUninitializedTaint))
	g.Expect(w.Status.Capacity).To(Equal(capacity))
	g.Expect(nodeCondition(w, corev1.NodeReady)).To(Equal(corev1.ConditionFalse))
	// The capacity is copied: changing the node does not change the caller's list.
	w.Status.Capacity[corev1.ResourceCPU] = resource.MustParse("1")
	g.Expect(capacity.Cpu().String()).To(Equal("16"))
}

// TestSetNodeReady: flips Ready like kubelet (transition time moves), reports no change when
// nothing changes, and adds missing conditions.
func TestSetNodeReady(t *testing.T) {
	g := NewWithT(t)
	n := workload.Node(workload.NodeSpec{Name: "n", Ready: true}, now)
	later := metav1.NewTime(now.Add(time.Minute))
	g.Expect(workload.SetNodeReady(n, true, later)).To(BeFalse())
	g.Expect(readyCondition(n).LastTransitionTime).To(Equal(now))

	g.Expect(workload.SetNodeReady(n, false, later)).To(BeTrue())
	c := readyCondition(n)
	g.Expect(c.Status).To(Equal(corev1.ConditionFalse))
	g.Expect(c.Reason).To(Equal("KubeletNotReady"))
	g.Expect(c.LastTransitionTime).To(Equal(later))
	g.Expect(n.Status.Conditions).To(HaveLen(4))
	g.Expect(nodeCondition(n, corev1.NodeMemoryPressure)).To(Equal(corev1.ConditionFalse))

	empty := &corev1.Node{}
	g.Expect(workload.SetNodeReady(empty, true, now)).To(BeTrue())
	g.Expect(empty.Status.Conditions).To(HaveLen(4))
}

func readyCondition(n *corev1.Node) corev1.NodeCondition {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c
		}
	}
	return corev1.NodeCondition{}
}

func nodeCondition(n *corev1.Node, t corev1.NodeConditionType) corev1.ConditionStatus {
	for _, c := range n.Status.Conditions {
		if c.Type == t {
			return c.Status
		}
	}
	return ""
}

func TestStaticPod(t *testing.T) {
	g := NewWithT(t)
	for _, component := range []string{workload.Etcd, workload.KubeAPIServer, workload.KubeControllerManager, workload.KubeScheduler} {
		p := workload.StaticPod(component, "cp-0", "v1.36.3", "10.10.0.10", now)
		g.Expect(p.Name).To(Equal(component + "-cp-0"))
		g.Expect(p.Namespace).To(Equal(metav1.NamespaceSystem))
		g.Expect(p.Labels).To(Equal(map[string]string{"component": component, "tier": "control-plane"}))
		g.Expect(p.Spec.NodeName).To(Equal("cp-0"))
		g.Expect(p.Status.Phase).To(Equal(corev1.PodRunning))
		g.Expect(p.Status.PodIP).To(Equal("10.10.0.10"))
		g.Expect(p.Status.Conditions).To(ContainElement(And(HaveField("Type", corev1.PodReady), HaveField("Status", corev1.ConditionTrue))))
		g.Expect(p.Status.ContainerStatuses).To(ConsistOf(HaveField("Ready", true)))
		image := p.Spec.Containers[0].Image
		if component == workload.Etcd {
			g.Expect(image).To(Equal("registry.k8s.io/etcd:" + workload.EtcdVersion("v1.36.3")))
		} else {
			g.Expect(image).To(Equal("registry.k8s.io/" + component + ":v1.36.3"))
		}
	}
}

// TestClusterObjects: every object is a known type with a unique name, workload selectors match
// their templates, references resolve, and the kubelet and DNS settings follow the cluster network.
func TestClusterObjects(t *testing.T) {
	g := NewWithT(t)
	objs := workload.ClusterObjects(spec("v1.36.3"))
	seen := map[string]bool{}
	configMaps := map[string]*corev1.ConfigMap{}
	roles := map[string]bool{"ClusterRole/system:kubelet-api-admin": false}
	for _, o := range objs {
		gvks, _, err := scheme.Scheme.ObjectKinds(o)
		g.Expect(err).NotTo(HaveOccurred())
		id := gvks[0].Kind + "/" + o.GetNamespace() + "/" + o.GetName()
		g.Expect(seen).NotTo(HaveKey(id))
		seen[id] = true
		switch o := o.(type) {
		case *corev1.ConfigMap:
			configMaps[o.Namespace+"/"+o.Name] = o
		case *rbacv1.ClusterRole:
			roles["ClusterRole/"+o.Name] = true
		case *rbacv1.Role:
			roles["Role/"+o.Name] = true
		case *appsv1.Deployment:
			sel, err := metav1.LabelSelectorAsSelector(o.Spec.Selector)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(sel.Matches(labels.Set(o.Spec.Template.Labels))).To(BeTrue(), o.Name)
		case *appsv1.DaemonSet:
			sel, err := metav1.LabelSelectorAsSelector(o.Spec.Selector)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(sel.Matches(labels.Set(o.Spec.Template.Labels))).To(BeTrue(), o.Name)
			g.Expect(o.Spec.Template.Spec.Containers[0].Image).To(Equal("registry.k8s.io/kube-proxy:v1.36.3"))
		}
	}
	for _, o := range objs {
		switch o := o.(type) {
		case *rbacv1.ClusterRoleBinding:
			g.Expect(roles).To(HaveKey(o.RoleRef.Kind+"/"+o.RoleRef.Name), o.Name)
		case *rbacv1.RoleBinding:
			g.Expect(roles).To(HaveKeyWithValue(o.RoleRef.Kind+"/"+o.RoleRef.Name, true), o.Name)
		case *appsv1.Deployment:
			for _, v := range o.Spec.Template.Spec.Volumes {
				if v.ConfigMap != nil {
					g.Expect(configMaps).To(HaveKey(o.Namespace+"/"+v.ConfigMap.Name), o.Name)
				}
			}
		}
	}
	g.Expect(seen).To(HaveKey("ClusterRoleBinding//kubeadm:apiserver-kubelet-client"))
	g.Expect(seen).To(HaveKey("ConfigMap/kube-system/kubeadm-config"))
	g.Expect(seen).To(HaveKey("ConfigMap/kube-system/coredns"))
	g.Expect(seen).To(HaveKey("Deployment/kube-system/coredns"))
	g.Expect(seen).To(HaveKey("DaemonSet/kube-system/kube-proxy"))

	// kubelet-config: kubeadm derives clusterDNS (10th address of the service subnet) and
	// clusterDomain from the cluster network; the kube-dns Service has that address.
	var kubelet struct {
		Kind          string   `json:"kind"`
		ClusterDNS    []string `json:"clusterDNS"`
		ClusterDomain string   `json:"clusterDomain"`
	}
	g.Expect(yaml.Unmarshal([]byte(configMaps["kube-system/kubelet-config"].Data["kubelet"]), &kubelet)).To(Succeed())
	g.Expect(kubelet.Kind).To(Equal("KubeletConfiguration"))
	g.Expect(kubelet.ClusterDomain).To(Equal("example.internal"))
	g.Expect(kubelet.ClusterDNS).To(Equal([]string{"10.96.0.10"}))
	for _, o := range objs {
		if svc, ok := o.(*corev1.Service); ok && svc.Name == "kube-dns" {
			g.Expect(svc.Spec.ClusterIP).To(Equal("10.96.0.10"))
		}
	}
}

func TestDNSServiceIP(t *testing.T) {
	g := NewWithT(t)
	g.Expect(workload.DNSServiceIP("10.128.0.0/12")).To(Equal("10.128.0.10"))
	g.Expect(workload.DNSServiceIP("10.96.0.0/12,fd00::/108")).To(Equal("10.96.0.10"))
	g.Expect(workload.DNSServiceIP("fd00:10:96::/108")).To(Equal("fd00:10:96::a"))
	g.Expect(workload.DNSServiceIP("")).To(Equal("10.96.0.10"))
	g.Expect(workload.DNSServiceIP("not-a-cidr")).To(Equal("10.96.0.10"))
	g.Expect(netip.MustParseAddr(workload.DNSServiceIP("10.96.0.5/12")).String()).To(Equal("10.96.0.10"))
}

// Static pods take their images from the ClusterConfiguration, as kubeadm does: the image
// repository for every component, etcd's own repository and tag when set.
func TestStaticPodImagesFromClusterConfiguration(t *testing.T) {
	images, err := workload.ImagesFromClusterConfiguration(`apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
imageRepository: mirror.example/k8s
etcd:
  local:
    imageTag: 3.6.99-0
`)
	if err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	if got := workload.StaticPodWithImages(workload.Etcd, "cp-0", "v1.36.3", "10.0.0.1", now, images).Spec.Containers[0].Image; got != "mirror.example/k8s/etcd:3.6.99-0" {
		t.Errorf("etcd image %q", got)
	}
	if got := workload.StaticPodWithImages(workload.KubeAPIServer, "cp-0", "v1.36.3", "10.0.0.1", now, images).Spec.Containers[0].Image; got != "mirror.example/k8s/kube-apiserver:v1.36.3" {
		t.Errorf("kube-apiserver image %q", got)
	}
	if got := workload.StaticPod(workload.Etcd, "cp-0", "v1.36.3", "10.0.0.1", now).Spec.Containers[0].Image; got != "registry.k8s.io/etcd:"+workload.EtcdVersion("v1.36.3") {
		t.Errorf("default etcd image %q", got)
	}
}
