package store

import (
	"fmt"
	"reflect"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/validate/content"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// kindBehavior captures the per-kind rules the real API server's registry strategies apply.
type kindBehavior struct {
	info ResourceInfo
	// nameFn validates metadata.name (DNS-1123 subdomain for most kinds, like upstream).
	nameFn apimachineryvalidation.ValidateNameFunc
	// hasGeneration: the upstream strategy sets generation=1 on create and bumps it on spec changes.
	hasGeneration bool
	// hasStatus: the kind has a status subresource, so the main resource ignores status changes
	// and the status subresource ignores everything else.
	hasStatus bool
	// allowCreateOnUpdate: PUT of a missing object creates it (rbac, leases, events, ...).
	allowCreateOnUpdate bool
	// fieldLabel maps a field selector label to the canonical one of fieldsOf, or reports it unsupported.
	fieldLabel func(label string) (string, bool)
	// fieldsOf returns the selectable fields of an object.
	fieldsOf func(obj client.Object) fields.Set
	goType   reflect.Type // struct type of the kind
}

var generationKinds = map[string]bool{
	"pods": true, "podtemplates": true, "replicationcontrollers": true, "daemonsets": true,
	"statefulsets": true, "deployments": true, "replicasets": true, "jobs": true, "cronjobs": true,
	"poddisruptionbudgets": true, "endpointslices": true, "customresourcedefinitions": true,
}

var createOnUpdateKinds = map[schema.GroupResource]bool{
	{Group: "rbac.authorization.k8s.io", Resource: "roles"}:               true,
	{Group: "rbac.authorization.k8s.io", Resource: "rolebindings"}:        true,
	{Group: "rbac.authorization.k8s.io", Resource: "clusterroles"}:        true,
	{Group: "rbac.authorization.k8s.io", Resource: "clusterrolebindings"}: true,
	{Group: "coordination.k8s.io", Resource: "leases"}:                    true,
	{Resource: "limitranges"}:                                             true,
	{Resource: "events"}:                                                  true,
	{Resource: "services"}:                                                true,
	{Resource: "endpoints"}:                                               true,
}

// behaviorFor returns the rules of a served resource; built once per resource and shared.
func behaviorFor(gvr schema.GroupVersionResource) (*kindBehavior, bool) {
	b, ok := shared().behaviors[gvr]
	return b, ok
}

func newBehavior(info ResourceInfo, scheme *runtime.Scheme) *kindBehavior {
	b := &kindBehavior{
		info:                info,
		nameFn:              apimachineryvalidation.NameIsDNSSubdomain,
		hasGeneration:       generationKinds[info.GVR.Resource],
		hasStatus:           info.HasSubresource("status"),
		allowCreateOnUpdate: createOnUpdateKinds[info.GVR.GroupResource()],
	}
	switch {
	case info.GVR.Group == "rbac.authorization.k8s.io":
		b.nameFn = validatePathSegmentName
	case info.GVR.Group == "" && info.GVR.Resource == "namespaces":
		b.nameFn = apimachineryvalidation.NameIsDNSLabel
	case info.GVR.Group == "" && info.GVR.Resource == "services":
		b.nameFn = apimachineryvalidation.NameIsDNS1035Label
	}
	obj, err := scheme.New(info.GVK())
	if err != nil {
		panic(fmt.Sprintf("store: kind %v not in scheme: %v", info.GVK(), err))
	}
	b.goType = reflect.TypeOf(obj).Elem()
	b.fieldLabel, b.fieldsOf = fieldSetFor(info)
	return b
}

// metaFields are the selectable fields every object has.
func metaFields(obj client.Object, namespaced bool) fields.Set {
	s := fields.Set{"metadata.name": obj.GetName()}
	if namespaced {
		s["metadata.namespace"] = obj.GetNamespace()
	}
	return s
}

// fieldSetFor mirrors the field label conversion functions and ToSelectableFields of the real
// API server's registry for each kind; kinds without their own set only support metadata fields.
func fieldSetFor(info ResourceInfo) (func(string) (string, bool), func(client.Object) fields.Set) {
	namespaced := info.Namespaced
	allowed := func(labels ...string) func(string) (string, bool) {
		set := map[string]bool{}
		for _, l := range labels {
			set[l] = true
		}
		return func(l string) (string, bool) { return l, set[l] }
	}
	switch info.GVK() {
	case corev1.SchemeGroupVersion.WithKind("Pod"):
		conv := allowed("metadata.name", "metadata.namespace", "spec.nodeName", "spec.restartPolicy",
			"spec.schedulerName", "spec.serviceAccountName", "spec.hostNetwork", "status.phase",
			"status.podIP", "status.podIPs", "status.nominatedNodeName")
		return func(l string) (string, bool) {
				if l == "spec.host" { // old clients
					return "spec.nodeName", true
				}
				return conv(l)
			}, func(o client.Object) fields.Set {
				p := o.(*corev1.Pod)
				s := metaFields(o, true)
				s["spec.nodeName"] = p.Spec.NodeName
				s["spec.restartPolicy"] = string(p.Spec.RestartPolicy)
				s["spec.schedulerName"] = p.Spec.SchedulerName
				s["spec.serviceAccountName"] = p.Spec.ServiceAccountName
				s["spec.hostNetwork"] = strconv.FormatBool(p.Spec.HostNetwork)
				s["status.phase"] = string(p.Status.Phase)
				podIP := ""
				if len(p.Status.PodIPs) > 0 {
					podIP = p.Status.PodIPs[0].IP
				}
				s["status.podIP"] = podIP
				s["status.nominatedNodeName"] = p.Status.NominatedNodeName
				return s
			}
	case corev1.SchemeGroupVersion.WithKind("Node"):
		return allowed("metadata.name", "spec.unschedulable"), func(o client.Object) fields.Set {
			s := metaFields(o, false)
			s["spec.unschedulable"] = strconv.FormatBool(o.(*corev1.Node).Spec.Unschedulable)
			return s
		}
	case corev1.SchemeGroupVersion.WithKind("ReplicationController"):
		return allowed("metadata.name", "metadata.namespace", "status.replicas"), func(o client.Object) fields.Set {
			s := metaFields(o, true)
			s["status.replicas"] = strconv.Itoa(int(o.(*corev1.ReplicationController).Status.Replicas))
			return s
		}
	case corev1.SchemeGroupVersion.WithKind("Namespace"):
		return allowed("metadata.name", "status.phase"), func(o client.Object) fields.Set {
			s := metaFields(o, false)
			s["status.phase"] = string(o.(*corev1.Namespace).Status.Phase)
			return s
		}
	case corev1.SchemeGroupVersion.WithKind("Secret"):
		return allowed("metadata.name", "metadata.namespace", "type"), func(o client.Object) fields.Set {
			s := metaFields(o, true)
			s["type"] = string(o.(*corev1.Secret).Type)
			return s
		}
	case corev1.SchemeGroupVersion.WithKind("Service"):
		return allowed("metadata.name", "metadata.namespace", "spec.clusterIP", "spec.type"), func(o client.Object) fields.Set {
			svc := o.(*corev1.Service)
			s := metaFields(o, true)
			s["spec.clusterIP"] = svc.Spec.ClusterIP
			s["spec.type"] = string(svc.Spec.Type)
			return s
		}
	case corev1.SchemeGroupVersion.WithKind("Event"):
		return allowed("metadata.name", "metadata.namespace", "involvedObject.kind", "involvedObject.namespace",
				"involvedObject.name", "involvedObject.uid", "involvedObject.apiVersion",
				"involvedObject.resourceVersion", "involvedObject.fieldPath", "reason", "reportingComponent",
				"source", "type"), func(o client.Object) fields.Set {
				e := o.(*corev1.Event)
				source := e.Source.Component
				if source == "" {
					source = e.ReportingController
				}
				s := metaFields(o, true)
				addInvolved(s, e.InvolvedObject)
				s["reason"] = e.Reason
				s["reportingComponent"] = e.ReportingController
				s["source"] = source
				s["type"] = e.Type
				return s
			}
	case eventsv1.SchemeGroupVersion.WithKind("Event"):
		// events.k8s.io names map onto the core field set, as upstream's conversion does.
		mapping := map[string]string{
			"reason": "reason", "regarding.kind": "involvedObject.kind", "regarding.namespace": "involvedObject.namespace",
			"regarding.name": "involvedObject.name", "regarding.uid": "involvedObject.uid",
			"regarding.apiVersion": "involvedObject.apiVersion", "regarding.resourceVersion": "involvedObject.resourceVersion",
			"regarding.fieldPath": "involvedObject.fieldPath", "reportingController": "reportingComponent",
			"type": "type", "metadata.namespace": "metadata.namespace", "metadata.name": "metadata.name",
		}
		return func(l string) (string, bool) {
				m, ok := mapping[l]
				return m, ok
			}, func(o client.Object) fields.Set {
				e := o.(*eventsv1.Event)
				source := e.DeprecatedSource.Component
				if source == "" {
					source = e.ReportingController
				}
				s := metaFields(o, true)
				addInvolved(s, e.Regarding)
				s["reason"] = e.Reason
				s["reportingComponent"] = e.ReportingController
				s["source"] = source
				s["type"] = e.Type
				return s
			}
	case schema.GroupVersionKind{Group: "batch", Version: "v1", Kind: "Job"}:
		return allowed("metadata.name", "metadata.namespace", "status.successful"), func(o client.Object) fields.Set {
			s := metaFields(o, true)
			v := reflect.ValueOf(o).Elem().FieldByName("Status").FieldByName("Succeeded")
			s["status.successful"] = strconv.FormatInt(v.Int(), 10)
			return s
		}
	}
	if namespaced {
		return allowed("metadata.name", "metadata.namespace"), func(o client.Object) fields.Set { return metaFields(o, true) }
	}
	return allowed("metadata.name", "metadata.namespace"), func(o client.Object) fields.Set { return metaFields(o, false) }
}

func addInvolved(s fields.Set, r corev1.ObjectReference) {
	s["involvedObject.kind"] = r.Kind
	s["involvedObject.namespace"] = r.Namespace
	s["involvedObject.name"] = r.Name
	s["involvedObject.uid"] = string(r.UID)
	s["involvedObject.apiVersion"] = r.APIVersion
	s["involvedObject.resourceVersion"] = r.ResourceVersion
	s["involvedObject.fieldPath"] = r.FieldPath
}

// specEqual reports whether two objects of a kind agree on everything but metadata and status,
// which is what upstream compares to decide on a generation bump.
func specEqual(a, b client.Object) bool {
	va, vb := reflect.ValueOf(a).Elem(), reflect.ValueOf(b).Elem()
	t := va.Type()
	for i := 0; i < t.NumField(); i++ {
		switch t.Field(i).Name {
		case "TypeMeta", "ObjectMeta", "Status":
			continue
		}
		if !equality.Semantic.DeepEqual(va.Field(i).Interface(), vb.Field(i).Interface()) {
			return false
		}
	}
	return true
}

// copyStatus sets dst's status to src's (main-resource updates keep the stored status).
func copyStatus(dst, src client.Object) {
	vd, vs := reflect.ValueOf(dst).Elem(), reflect.ValueOf(src).Elem()
	if f := vd.FieldByName("Status"); f.IsValid() {
		f.Set(vs.FieldByName("Status"))
	}
}

// copyAllButStatus sets every non-metadata, non-status field of dst to src's (status updates keep
// the stored spec).
func copyAllButStatus(dst, src client.Object) {
	vd, vs := reflect.ValueOf(dst).Elem(), reflect.ValueOf(src).Elem()
	t := vd.Type()
	for i := 0; i < t.NumField(); i++ {
		switch t.Field(i).Name {
		case "TypeMeta", "ObjectMeta", "Status":
			continue
		}
		vd.Field(i).Set(vs.Field(i))
	}
}

// validatePathSegmentName is RBAC's name rule upstream: any name usable as one URL path segment.
func validatePathSegmentName(name string, prefix bool) []string {
	if prefix {
		return content.IsPathSegmentPrefix(name)
	}
	return content.IsPathSegmentName(name)
}
