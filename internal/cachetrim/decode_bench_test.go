package cachetrim

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	restclientwatch "k8s.io/client-go/rest/watch"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/goofy-capi/cluster-api-provider-goofy/api/v1alpha1"
)

// sample returns one of the objects CAPI v1.14 and Goofy wrote in a `make bench` run, as the
// API server serves them (managed fields included), compacted.
func sample(tb testing.TB, name string) []byte {
	tb.Helper()
	raw, err := os.ReadFile("testdata/" + name + ".json")
	if err != nil {
		tb.Fatal(err)
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		tb.Fatal(err)
	}
	return b.Bytes()
}

// watchStream is n MODIFIED events of obj, as kube-apiserver writes a JSON watch.
func watchStream(obj []byte, n int) []byte {
	var b bytes.Buffer
	for range n {
		b.WriteString(`{"type":"MODIFIED","object":`)
		b.Write(obj)
		b.WriteString("}\n")
	}
	return b.Bytes()
}

func testScheme(tb testing.TB) *runtime.Scheme {
	tb.Helper()
	s := runtime.NewScheme()
	if err := clusterv1.AddToScheme(s); err != nil {
		tb.Fatal(err)
	}
	if err := infrav1.AddToScheme(s); err != nil {
		tb.Fatal(err)
	}
	return s
}

// watchDecoder decodes a JSON watch body as client-go's REST client does for a typed informer
// (controller-runtime's codecs: no conversion).
func watchDecoder(tb testing.TB, s *runtime.Scheme, body io.ReadCloser) *restclientwatch.Decoder {
	tb.Helper()
	codecs := serializer.NewCodecFactory(s)
	info, ok := runtime.SerializerInfoForMediaType(codecs.SupportedMediaTypes(), runtime.ContentTypeJSON)
	if !ok {
		tb.Fatal("no JSON serializer")
	}
	frames := info.StreamSerializer.Framer.NewFrameReader(body)
	events := streaming.NewDecoder(frames, info.StreamSerializer.Serializer)
	return restclientwatch.NewDecoder(events, runtime.WithoutVersionDecoder{Decoder: info.Serializer})
}

// BenchmarkWatchDecode: what a watch event of each sample costs the cache's decoder, as served
// and through the trim the manager uses (controllers.CacheTransport's shape: managed fields
// everywhere, a Machine's status, a Cluster's status but its initialization and its
// ControlPlaneInitialized condition).
func BenchmarkWatchDecode(b *testing.B) {
	s := testScheme(b)
	metadata := Trim{Within: map[string]Trim{"metadata": {Drop: []string{"managedFields"}}}}
	trims := map[string]Trim{"machine": machineTrim, "cluster": clusterTrim, "goofymachine": metadata}
	const events = 100
	for _, name := range []string{"machine", "cluster", "goofymachine"} {
		stream := watchStream(sample(b, name), events)
		for _, trimmed := range []bool{false, true} {
			label := name + "/served"
			if trimmed {
				label = name + "/trimmed"
			}
			b.Run(label, func(b *testing.B) {
				b.SetBytes(int64(len(stream)))
				for b.Loop() {
					var body io.ReadCloser = io.NopCloser(bytes.NewReader(stream))
					if trimmed {
						body = newEventTrimmer(body, Trim{Within: map[string]Trim{"object": trims[name]}})
					}
					d := watchDecoder(b, s, body)
					for range events {
						if _, _, err := d.Decode(); err != nil {
							b.Fatal(err)
						}
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*events), "ns/event")
			})
		}
	}
}
