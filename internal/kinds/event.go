package kinds

import (
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/conversion"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
)

// Events of core/v1 and of events.k8s.io/v1 are one collection, as upstream serves both from the
// core Events' storage: events.k8s.io/v1 is a view (StoredAs) whose objects convert to and from
// core Events (the conversion functions below, registered with the scheme). Both are created on
// update (recorders PUT them) and selected by the object they are about; events.k8s.io's field
// names map onto the core ones.
type (
	coreEventStrategy     struct{ base }
	eventsV1EventStrategy struct{ base }
)

// View is implemented by a kind whose objects are another kind's, stored once and converted
// through the scheme.
type View interface {
	// StoredAs is the resource holding the objects.
	StoredAs() schema.GroupVersionResource
}

func (eventsV1EventStrategy) StoredAs() schema.GroupVersionResource {
	return corev1.SchemeGroupVersion.WithResource("events")
}

func init() {
	utilruntime.Must(scheme.AddConversionFunc((*corev1.Event)(nil), (*eventsv1.Event)(nil), func(a, b any, _ conversion.Scope) error {
		coreToEventsV1(a.(*corev1.Event), b.(*eventsv1.Event))
		return nil
	}))
	utilruntime.Must(scheme.AddConversionFunc((*eventsv1.Event)(nil), (*corev1.Event)(nil), func(a, b any, _ conversion.Scope) error {
		eventsV1ToCore(a.(*eventsv1.Event), b.(*corev1.Event))
		return nil
	}))
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

// coreToEventsV1 is upstream's field mapping from a core Event to an events.k8s.io/v1 one. The
// result shares maps and slices with in.
func coreToEventsV1(in *corev1.Event, out *eventsv1.Event) {
	*out = eventsv1.Event{
		TypeMeta:                 metav1.TypeMeta{APIVersion: eventsv1.SchemeGroupVersion.String(), Kind: "Event"},
		ObjectMeta:               in.ObjectMeta,
		EventTime:                in.EventTime,
		ReportingController:      in.ReportingController,
		ReportingInstance:        in.ReportingInstance,
		Action:                   in.Action,
		Reason:                   in.Reason,
		Regarding:                in.InvolvedObject,
		Related:                  in.Related,
		Note:                     in.Message,
		Type:                     in.Type,
		DeprecatedSource:         in.Source,
		DeprecatedFirstTimestamp: in.FirstTimestamp,
		DeprecatedLastTimestamp:  in.LastTimestamp,
		DeprecatedCount:          in.Count,
	}
	if in.Series != nil {
		out.Series = &eventsv1.EventSeries{Count: in.Series.Count, LastObservedTime: in.Series.LastObservedTime}
	}
}

// eventsV1ToCore is the mapping back.
func eventsV1ToCore(in *eventsv1.Event, out *corev1.Event) {
	*out = corev1.Event{
		TypeMeta:            metav1.TypeMeta{APIVersion: corev1.SchemeGroupVersion.String(), Kind: "Event"},
		ObjectMeta:          in.ObjectMeta,
		InvolvedObject:      in.Regarding,
		Reason:              in.Reason,
		Message:             in.Note,
		Source:              in.DeprecatedSource,
		FirstTimestamp:      in.DeprecatedFirstTimestamp,
		LastTimestamp:       in.DeprecatedLastTimestamp,
		Count:               in.DeprecatedCount,
		Type:                in.Type,
		EventTime:           in.EventTime,
		Related:             in.Related,
		ReportingController: in.ReportingController,
		ReportingInstance:   in.ReportingInstance,
		Action:              in.Action,
	}
	if in.Series != nil {
		out.Series = &corev1.EventSeries{Count: in.Series.Count, LastObservedTime: in.Series.LastObservedTime}
	}
}
