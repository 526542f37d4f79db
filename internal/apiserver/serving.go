package apiserver

import (
	"sync"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	metainternalversionscheme "k8s.io/apimachinery/pkg/apis/meta/internalversion/scheme"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured/unstructuredscheme"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// serving holds what every cluster's handler shares: codecs over the store's scheme and the
// pre-rendered discovery documents. It is built once per process so a handler costs nothing.
type serving struct {
	// objects encodes and decodes the store's typed objects without conversion (the store keeps
	// exactly the served versions). SerializerInfo.StrictSerializer gives field validation.
	objects runtime.NegotiatedSerializer
	// meta encodes meta.k8s.io types that are not part of a group: Table, PartialObjectMetadata,
	// WatchEvent, DeleteOptions, Status.
	meta runtime.NegotiatedSerializer
	// scale encodes autoscaling/v1 Scale, which the store does not keep.
	scale runtime.NegotiatedSerializer
	// custom encodes and decodes custom resources: JSON and YAML only, as kube-apiserver serves
	// them (there is no protobuf for an unstructured object; clients fall back to JSON).
	custom runtime.NegotiatedSerializer

	disc *discoveryDocs
}

var (
	servingOnce sync.Once
	shared      *serving
)

func getServing() *serving {
	servingOnce.Do(func() {
		scaleScheme := runtime.NewScheme()
		utilruntime.Must(autoscalingv1.AddToScheme(scaleScheme))
		metav1.AddToGroupVersion(scaleScheme, schema.GroupVersion{Version: "v1"})
		shared = &serving{
			objects: serializer.NewCodecFactory(store.Scheme()).WithoutConversion(),
			meta:    metainternalversionscheme.Codecs,
			scale:   serializer.NewCodecFactory(scaleScheme).WithoutConversion(),
			custom:  unstructuredscheme.NewUnstructuredNegotiatedSerializer(),
			disc:    buildDiscovery(servedResources()),
		}
	})
	return shared
}
