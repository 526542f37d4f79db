package kinds

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// serviceStrategy: services are named as DNS-1035 labels, keep their allocated addresses over
// updates that omit them, and are selected by cluster IP and type. The address allocation at
// create is cluster state, so the store does it (as upstream's allocator wraps the registry).
type serviceStrategy struct{ base }

func init() {
	register(serviceStrategy{newBase(resource{corev1.SchemeGroupVersion, "services", "Service", true,
		[]string{"svc"}, []string{"all"}, []string{"status"}},
		withCreateOnUpdate, withNames(apimachineryvalidation.NameIsDNS1035Label))})
}

func (serviceStrategy) Default(obj runtime.Object) {
	s := obj.(*corev1.Service)
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

// PrepareForUpdate carries a Service's addresses over an update that omits them.
func (s serviceStrategy) PrepareForUpdate(ctx context.Context, obj, old runtime.Object) {
	s.base.PrepareForUpdate(ctx, obj, old)
	next, cur := obj.(*corev1.Service), old.(*corev1.Service)
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

var serviceFieldLabels = allowedLabels("metadata.name", "metadata.namespace", "spec.clusterIP", "spec.type")

func (serviceStrategy) FieldLabel(label string) (string, bool) { return serviceFieldLabels(label) }

func (serviceStrategy) SelectableFields(obj runtime.Object) fields.Set {
	svc := obj.(*corev1.Service)
	s := metaFields(svc, true)
	s["spec.clusterIP"] = svc.Spec.ClusterIP
	s["spec.type"] = string(svc.Spec.Type)
	return s
}

func (serviceStrategy) Printer() Printer { return servicePrinter }

var servicePrinter = Printer{
	Columns: []metav1.TableColumnDefinition{colName, col("Type", "string", 0), col("Cluster-IP", "string", 0),
		col("External-IP", "string", 0), col("Port(s)", "string", 0), colAge, col("Selector", "string", 1)},
	Cells: func(o runtime.Object) []any {
		s := o.(*corev1.Service)
		return []any{s.Name, string(serviceType(s)), orNone(s.Spec.ClusterIP), serviceExternalIP(s),
			servicePorts(s), age(s.CreationTimestamp), selectorString(s.Spec.Selector)}
	},
}

// serviceType is the effective type: an unset type means ClusterIP, the API default.
func serviceType(s *corev1.Service) corev1.ServiceType {
	if s.Spec.Type == "" {
		return corev1.ServiceTypeClusterIP
	}
	return s.Spec.Type
}

func serviceExternalIP(s *corev1.Service) string {
	switch serviceType(s) {
	case corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort:
		if len(s.Spec.ExternalIPs) > 0 {
			return strings.Join(s.Spec.ExternalIPs, ",")
		}
		return none
	case corev1.ServiceTypeLoadBalancer:
		var ips []string
		for _, ing := range s.Status.LoadBalancer.Ingress {
			if ing.IP != "" {
				ips = append(ips, ing.IP)
			} else if ing.Hostname != "" {
				ips = append(ips, ing.Hostname)
			}
		}
		ips = append(ips, s.Spec.ExternalIPs...)
		if len(ips) == 0 {
			return "<pending>"
		}
		return strings.Join(ips, ",")
	case corev1.ServiceTypeExternalName:
		return s.Spec.ExternalName
	}
	return "<unknown>"
}

func servicePorts(s *corev1.Service) string {
	if len(s.Spec.Ports) == 0 {
		return none
	}
	out := make([]string, 0, len(s.Spec.Ports))
	for _, p := range s.Spec.Ports {
		if p.NodePort > 0 {
			out = append(out, fmt.Sprintf("%d:%d/%s", p.Port, p.NodePort, p.Protocol))
		} else {
			out = append(out, fmt.Sprintf("%d/%s", p.Port, p.Protocol))
		}
	}
	return strings.Join(out, ",")
}
