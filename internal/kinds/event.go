package kinds

import (
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
)

// Events of core/v1 and of events.k8s.io/v1 are created on update (recorders PUT them) and are
// selected by the object they are about; events.k8s.io's field names map onto the core ones, as
// upstream's conversion does.
type (
	coreEventStrategy     struct{ base }
	eventsV1EventStrategy struct{ base }
)

func init() {
	register(coreEventStrategy{newBase(resource{corev1.SchemeGroupVersion, "events", "Event", true,
		[]string{"ev"}, nil, nil}, withCreateOnUpdate)})
	register(eventsV1EventStrategy{newBase(resource{eventsv1.SchemeGroupVersion, "events", "Event", true,
		[]string{"ev"}, nil, nil}, withCreateOnUpdate)})
}

var coreEventFieldLabels = allowedLabels("metadata.name", "metadata.namespace", "involvedObject.kind", "involvedObject.namespace",
	"involvedObject.name", "involvedObject.uid", "involvedObject.apiVersion",
	"involvedObject.resourceVersion", "involvedObject.fieldPath", "reason", "reportingComponent",
	"source", "type")

func (coreEventStrategy) FieldLabel(label string) (string, bool) { return coreEventFieldLabels(label) }

func (coreEventStrategy) SelectableFields(obj runtime.Object) fields.Set {
	e := obj.(*corev1.Event)
	return eventFields(e, e.InvolvedObject, e.Reason, e.ReportingController, e.Source.Component, e.Type)
}

// eventsV1FieldLabels maps events.k8s.io field labels onto the core field set.
var eventsV1FieldLabels = map[string]string{
	"reason": "reason", "regarding.kind": "involvedObject.kind", "regarding.namespace": "involvedObject.namespace",
	"regarding.name": "involvedObject.name", "regarding.uid": "involvedObject.uid",
	"regarding.apiVersion": "involvedObject.apiVersion", "regarding.resourceVersion": "involvedObject.resourceVersion",
	"regarding.fieldPath": "involvedObject.fieldPath", "reportingController": "reportingComponent",
	"type": "type", "metadata.namespace": "metadata.namespace", "metadata.name": "metadata.name",
}

func (eventsV1EventStrategy) FieldLabel(label string) (string, bool) {
	m, ok := eventsV1FieldLabels[label]
	return m, ok
}

func (eventsV1EventStrategy) SelectableFields(obj runtime.Object) fields.Set {
	e := obj.(*eventsv1.Event)
	return eventFields(e, e.Regarding, e.Reason, e.ReportingController, e.DeprecatedSource.Component, e.Type)
}

// eventFields is the core event field set; the source is the reporting controller when no
// source component is set.
func eventFields(e interface {
	GetName() string
	GetNamespace() string
}, r corev1.ObjectReference, reason, reporting, source, typ string) fields.Set {
	if source == "" {
		source = reporting
	}
	s := fields.Set{"metadata.name": e.GetName(), "metadata.namespace": e.GetNamespace()}
	s["involvedObject.kind"] = r.Kind
	s["involvedObject.namespace"] = r.Namespace
	s["involvedObject.name"] = r.Name
	s["involvedObject.uid"] = string(r.UID)
	s["involvedObject.apiVersion"] = r.APIVersion
	s["involvedObject.resourceVersion"] = r.ResourceVersion
	s["involvedObject.fieldPath"] = r.FieldPath
	s["reason"] = reason
	s["reportingComponent"] = reporting
	s["source"] = source
	s["type"] = typ
	return s
}
