package simulate

//lint:file-ignore SA1019 v1 Endpoints are deprecated but still served and kept by kube-controller-manager's Endpoints controller, which this simulates.

import (
	"context"
	"sort"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// endpointsController is kube-controller-manager's EndpointSlice and Endpoints controllers: a
// Service with a selector gets an EndpointSlice (labelled kubernetes.io/service-name, owned by
// the Service, up to 100 endpoints each) and a v1 Endpoints object of the same name, from the
// pods it selects that have an IP: ready, serving and terminating as the pods are, target
// ports resolved by name in each pod's containers.
type endpointsController struct {
	c   *cluster
	idx int
}

var (
	servicesGR       = corev1.SchemeGroupVersion.WithResource("services").GroupResource()
	endpointSlicesGR = discoveryv1.SchemeGroupVersion.WithResource("endpointslices").GroupResource()
	serviceKind      = corev1.SchemeGroupVersion.WithKind("Service")
)

const (
	endpointSliceManagedBy = "endpointslice-controller.k8s.io"
	maxEndpointsPerSlice   = 100
)

func newEndpointsController(c *cluster, idx int) *endpointsController {
	return &endpointsController{c: c, idx: idx}
}

func (e *endpointsController) resources() []schema.GroupResource {
	return []schema.GroupResource{servicesGR, podsGR, endpointSlicesGR}
}

func (e *endpointsController) observe(ch store.Change) {
	obj := changedObject(ch)
	switch ch.Resource {
	case servicesGR:
		e.c.enqueue(e.idx, keyOf(obj))
	case endpointSlicesGR:
		if svc := obj.GetLabels()[discoveryv1.LabelServiceName]; svc != "" && obj.GetLabels()[discoveryv1.LabelManagedBy] == endpointSliceManagedBy {
			e.c.enqueue(e.idx, obj.GetNamespace()+"/"+svc)
		}
	case podsGR:
		for _, o := range e.c.cache.list(servicesGR) {
			svc := o.(*corev1.Service)
			if svc.Namespace != obj.GetNamespace() || len(svc.Spec.Selector) == 0 {
				continue
			}
			sel := labels.SelectorFromSet(svc.Spec.Selector)
			for _, x := range []client.Object{ch.Old, ch.New} {
				if x != nil && sel.Matches(labels.Set(x.GetLabels())) {
					e.c.enqueue(e.idx, keyOf(svc))
					break
				}
			}
		}
	}
}

func (e *endpointsController) sync(ctx context.Context, key string) error {
	svc, _ := e.c.cache.get(servicesGR, key).(*corev1.Service)
	if svc == nil || svc.DeletionTimestamp != nil || len(svc.Spec.Selector) == 0 {
		return nil // a Service's slices go with it (owner references); without a selector they are the user's
	}
	sel := labels.SelectorFromSet(svc.Spec.Selector)
	var pods []*corev1.Pod
	for _, p := range e.c.cache.podsIn(svc.Namespace) {
		if sel.Matches(labels.Set(p.Labels)) && p.Status.PodIP != "" && !isTerminal(p) {
			pods = append(pods, p)
		}
	}
	sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name })
	if err := e.syncSlices(ctx, svc, pods); err != nil {
		return err
	}
	return e.syncEndpoints(ctx, svc, pods)
}

// servicePorts resolves the Service's ports for one pod: a named targetPort is looked up in its
// containers; a port the pod lacks leaves the pod out of that port.
func servicePorts(svc *corev1.Service, p *corev1.Pod) []discoveryv1.EndpointPort {
	var out []discoveryv1.EndpointPort
	for _, sp := range svc.Spec.Ports {
		port := sp.TargetPort.IntValue()
		if sp.TargetPort.Type == intstr.String {
			port = 0
			for _, c := range p.Spec.Containers {
				for _, cp := range c.Ports {
					if cp.Name == sp.TargetPort.StrVal && cp.Protocol == sp.Protocol {
						port = int(cp.ContainerPort)
					}
				}
			}
		}
		if sp.TargetPort.Type == intstr.Int && port == 0 {
			port = int(sp.Port)
		}
		if port == 0 {
			continue
		}
		name, proto, num := sp.Name, sp.Protocol, int32(port)
		out = append(out, discoveryv1.EndpointPort{Name: &name, Protocol: &proto, Port: &num, AppProtocol: sp.AppProtocol})
	}
	return out
}

func (e *endpointsController) syncSlices(ctx context.Context, svc *corev1.Service, pods []*corev1.Pod) error {
	// Endpoints grouped by their resolved ports, as upstream groups them into slices.
	type group struct {
		ports     []discoveryv1.EndpointPort
		endpoints []discoveryv1.Endpoint
	}
	var groups []*group
	for _, p := range pods {
		ports := servicePorts(svc, p)
		ready := isReady(p) && p.DeletionTimestamp == nil
		serving, terminating := isReady(p), p.DeletionTimestamp != nil
		nodeName := p.Spec.NodeName
		ep := discoveryv1.Endpoint{
			Addresses:  []string{p.Status.PodIP},
			Conditions: discoveryv1.EndpointConditions{Ready: &ready, Serving: &serving, Terminating: &terminating},
			NodeName:   &nodeName,
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: p.Namespace, Name: p.Name, UID: p.UID},
		}
		var g *group
		for _, x := range groups {
			if apiequality.Semantic.DeepEqual(x.ports, ports) && len(x.endpoints) < maxEndpointsPerSlice {
				g = x
			}
		}
		if g == nil {
			g = &group{ports: ports}
			groups = append(groups, g)
		}
		g.endpoints = append(g.endpoints, ep)
	}
	var existing []*discoveryv1.EndpointSlice
	for _, obj := range e.c.cache.owned(endpointSlicesGR, svc.UID) {
		if s := obj.(*discoveryv1.EndpointSlice); s.Labels[discoveryv1.LabelManagedBy] == endpointSliceManagedBy {
			existing = append(existing, s)
		}
	}
	sort.Slice(existing, func(i, j int) bool { return existing[i].Name < existing[j].Name })
	if len(groups) == 0 {
		groups = []*group{{}} // a Service without endpoints still has its (empty) slice
	}
	for i, g := range groups {
		want := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: svc.Namespace, GenerateName: svc.Name + "-",
				Labels: map[string]string{discoveryv1.LabelServiceName: svc.Name, discoveryv1.LabelManagedBy: endpointSliceManagedBy,
					"app.kubernetes.io/managed-by": "kube-controller-manager"},
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(svc, serviceKind)},
			},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   g.endpoints,
			Ports:       g.ports,
		}
		if i >= len(existing) {
			if err := e.c.client.Create(ctx, want); err != nil {
				return err
			}
			continue
		}
		cur := existing[i]
		if apiequality.Semantic.DeepEqual(cur.Endpoints, want.Endpoints) && apiequality.Semantic.DeepEqual(cur.Ports, want.Ports) {
			continue
		}
		next := cur.DeepCopy()
		next.Endpoints, next.Ports = want.Endpoints, want.Ports
		if err := e.c.client.Update(ctx, next); err != nil {
			return err
		}
	}
	for _, s := range existing[min(len(groups), len(existing)):] {
		if err := e.c.client.Delete(ctx, s, client.Preconditions{UID: &s.UID}); err != nil && !isGone(err) {
			return err
		}
	}
	return nil
}

// syncEndpoints writes the v1 Endpoints of the Service (deprecated upstream, still kept).
func (e *endpointsController) syncEndpoints(ctx context.Context, svc *corev1.Service, pods []*corev1.Pod) error {
	var subsets []corev1.EndpointSubset
	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			continue
		}
		var ports []corev1.EndpointPort
		for _, sp := range servicePorts(svc, p) {
			ports = append(ports, corev1.EndpointPort{Name: *sp.Name, Port: *sp.Port, Protocol: *sp.Protocol, AppProtocol: sp.AppProtocol})
		}
		nodeName := p.Spec.NodeName
		addr := corev1.EndpointAddress{IP: p.Status.PodIP, NodeName: &nodeName,
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: p.Namespace, Name: p.Name, UID: p.UID}}
		var sub *corev1.EndpointSubset
		for i := range subsets {
			if apiequality.Semantic.DeepEqual(subsets[i].Ports, ports) {
				sub = &subsets[i]
			}
		}
		if sub == nil {
			subsets = append(subsets, corev1.EndpointSubset{Ports: ports})
			sub = &subsets[len(subsets)-1]
		}
		if isReady(p) {
			sub.Addresses = append(sub.Addresses, addr)
		} else {
			sub.NotReadyAddresses = append(sub.NotReadyAddresses, addr)
		}
	}
	cur := &corev1.Endpoints{}
	err := e.c.client.Get(ctx, client.ObjectKey{Namespace: svc.Namespace, Name: svc.Name}, cur)
	if err != nil && !isGone(err) {
		return err
	}
	if err != nil {
		labels := map[string]string{discoveryv1.LabelSkipMirror: "true"} // the EndpointSlice mirroring controller leaves it
		for k, v := range svc.Labels {
			labels[k] = v
		}
		ep := &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Namespace: svc.Namespace, Name: svc.Name, Labels: labels}, Subsets: subsets}
		return e.c.client.Create(ctx, ep)
	}
	if apiequality.Semantic.DeepEqual(cur.Subsets, subsets) {
		return nil
	}
	cur.Subsets = subsets
	return e.c.client.Update(ctx, cur)
}
