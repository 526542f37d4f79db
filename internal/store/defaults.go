package store

import (
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// addDefaults registers the few API defaults that clients visibly rely on (kubectl columns,
// rollout logic, apply diffs). The real defaulting functions live in k8s.io/kubernetes, which is
// not importable; this is a deliberately small subset. Defaults run on every write, as the real
// API server defaults every decoded body, so an update that omits a defaulted field is not a
// spec change.
func addDefaults(s *runtime.Scheme) {
	s.AddTypeDefaultingFunc(&corev1.Service{}, func(o interface{}) { defaultService(o.(*corev1.Service)) })
	s.AddTypeDefaultingFunc(&corev1.Pod{}, func(o interface{}) { defaultPodSpec(&o.(*corev1.Pod).Spec) })
	s.AddTypeDefaultingFunc(&corev1.PodTemplate{}, func(o interface{}) { defaultPodSpec(&o.(*corev1.PodTemplate).Template.Spec) })
	s.AddTypeDefaultingFunc(&appsv1.Deployment{}, func(o interface{}) { defaultDeployment(o.(*appsv1.Deployment)) })
	s.AddTypeDefaultingFunc(&appsv1.DaemonSet{}, func(o interface{}) { defaultDaemonSet(o.(*appsv1.DaemonSet)) })
	s.AddTypeDefaultingFunc(&appsv1.ReplicaSet{}, func(o interface{}) {
		rs := o.(*appsv1.ReplicaSet)
		if rs.Spec.Replicas == nil {
			rs.Spec.Replicas = ptr.To[int32](1)
		}
		defaultPodSpec(&rs.Spec.Template.Spec)
	})
	s.AddTypeDefaultingFunc(&appsv1.StatefulSet{}, func(o interface{}) {
		ss := o.(*appsv1.StatefulSet)
		if ss.Spec.Replicas == nil {
			ss.Spec.Replicas = ptr.To[int32](1)
		}
		if ss.Spec.PodManagementPolicy == "" {
			ss.Spec.PodManagementPolicy = appsv1.OrderedReadyPodManagement
		}
		if ss.Spec.UpdateStrategy.Type == "" {
			ss.Spec.UpdateStrategy.Type = appsv1.RollingUpdateStatefulSetStrategyType
		}
		if ss.Spec.RevisionHistoryLimit == nil {
			ss.Spec.RevisionHistoryLimit = ptr.To[int32](10)
		}
		defaultPodSpec(&ss.Spec.Template.Spec)
	})
}

func defaultService(s *corev1.Service) {
	if s.Spec.Type == "" {
		s.Spec.Type = corev1.ServiceTypeClusterIP
	}
	if s.Spec.SessionAffinity == "" {
		s.Spec.SessionAffinity = corev1.ServiceAffinityNone
	}
	for i := range s.Spec.Ports {
		p := &s.Spec.Ports[i]
		if p.Protocol == "" {
			p.Protocol = corev1.ProtocolTCP
		}
		if p.TargetPort.Type == intstr.Int && p.TargetPort.IntVal == 0 || p.TargetPort.Type == intstr.String && p.TargetPort.StrVal == "" {
			p.TargetPort = intstr.FromInt32(p.Port)
		}
	}
	if s.Spec.InternalTrafficPolicy == nil && s.Spec.Type != corev1.ServiceTypeExternalName {
		s.Spec.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyCluster)
	}
}

func defaultPodSpec(s *corev1.PodSpec) {
	if s.RestartPolicy == "" {
		s.RestartPolicy = corev1.RestartPolicyAlways
	}
	if s.DNSPolicy == "" {
		s.DNSPolicy = corev1.DNSClusterFirst
	}
	if s.SchedulerName == "" {
		s.SchedulerName = corev1.DefaultSchedulerName
	}
	if s.TerminationGracePeriodSeconds == nil {
		s.TerminationGracePeriodSeconds = ptr.To[int64](corev1.DefaultTerminationGracePeriodSeconds)
	}
	for _, list := range [][]corev1.Container{s.InitContainers, s.Containers} {
		for i := range list {
			defaultContainer(&list[i])
		}
	}
}

func defaultContainer(c *corev1.Container) {
	if c.ImagePullPolicy == "" {
		// Untagged or :latest images are always pulled.
		image := c.Image
		if i := strings.LastIndex(image, "@"); i >= 0 {
			image = image[:i] + ":digest"
		}
		if tag := image[strings.LastIndex(image, "/")+1:]; !strings.Contains(tag, ":") || strings.HasSuffix(tag, ":latest") {
			c.ImagePullPolicy = corev1.PullAlways
		} else {
			c.ImagePullPolicy = corev1.PullIfNotPresent
		}
	}
	if c.TerminationMessagePath == "" {
		c.TerminationMessagePath = corev1.TerminationMessagePathDefault
	}
	if c.TerminationMessagePolicy == "" {
		c.TerminationMessagePolicy = corev1.TerminationMessageReadFile
	}
	for i := range c.Ports {
		if c.Ports[i].Protocol == "" {
			c.Ports[i].Protocol = corev1.ProtocolTCP
		}
	}
}

func defaultDeployment(d *appsv1.Deployment) {
	if d.Spec.Replicas == nil {
		d.Spec.Replicas = ptr.To[int32](1)
	}
	if d.Spec.Strategy.Type == "" {
		d.Spec.Strategy.Type = appsv1.RollingUpdateDeploymentStrategyType
	}
	if d.Spec.Strategy.Type == appsv1.RollingUpdateDeploymentStrategyType {
		if d.Spec.Strategy.RollingUpdate == nil {
			d.Spec.Strategy.RollingUpdate = &appsv1.RollingUpdateDeployment{}
		}
		quarter := intstr.FromString("25%")
		if d.Spec.Strategy.RollingUpdate.MaxUnavailable == nil {
			d.Spec.Strategy.RollingUpdate.MaxUnavailable = &quarter
		}
		if d.Spec.Strategy.RollingUpdate.MaxSurge == nil {
			d.Spec.Strategy.RollingUpdate.MaxSurge = &quarter
		}
	}
	if d.Spec.RevisionHistoryLimit == nil {
		d.Spec.RevisionHistoryLimit = ptr.To[int32](10)
	}
	if d.Spec.ProgressDeadlineSeconds == nil {
		d.Spec.ProgressDeadlineSeconds = ptr.To[int32](600)
	}
	defaultPodSpec(&d.Spec.Template.Spec)
}

func defaultDaemonSet(d *appsv1.DaemonSet) {
	if d.Spec.UpdateStrategy.Type == "" {
		d.Spec.UpdateStrategy.Type = appsv1.RollingUpdateDaemonSetStrategyType
	}
	if d.Spec.UpdateStrategy.Type == appsv1.RollingUpdateDaemonSetStrategyType {
		if d.Spec.UpdateStrategy.RollingUpdate == nil {
			d.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateDaemonSet{}
		}
		if d.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable == nil {
			d.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable = ptr.To(intstr.FromInt32(1))
		}
		if d.Spec.UpdateStrategy.RollingUpdate.MaxSurge == nil {
			d.Spec.UpdateStrategy.RollingUpdate.MaxSurge = ptr.To(intstr.FromInt32(0))
		}
	}
	if d.Spec.RevisionHistoryLimit == nil {
		d.Spec.RevisionHistoryLimit = ptr.To[int32](10)
	}
	defaultPodSpec(&d.Spec.Template.Spec)
}

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
	for _, o := range c.objects[servicesGR] {
		used[o.(*corev1.Service).Spec.ClusterIP] = true
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

// keepAllocatedIPs carries a Service's addresses over an update that omits them.
func keepAllocatedIPs(next, cur *corev1.Service) {
	if next.Spec.ClusterIP == "" && next.Spec.Type != corev1.ServiceTypeExternalName {
		next.Spec.ClusterIP = cur.Spec.ClusterIP
		next.Spec.ClusterIPs = cur.Spec.ClusterIPs
		if len(next.Spec.IPFamilies) == 0 {
			next.Spec.IPFamilies = cur.Spec.IPFamilies
		}
		if next.Spec.IPFamilyPolicy == nil {
			next.Spec.IPFamilyPolicy = cur.Spec.IPFamilyPolicy
		}
	}
}

func ipString(base [4]byte, offset int) string {
	v := uint32(base[0])<<24 | uint32(base[1])<<16 | uint32(base[2])<<8 | uint32(base[3])
	v += uint32(offset)
	return fmt.Sprintf("%d.%d.%d.%d", v>>24, v>>16&0xff, v>>8&0xff, v&0xff)
}
