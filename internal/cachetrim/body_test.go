package cachetrim

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/iotest"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

func machineSample(t *testing.T) *clusterv1.Machine {
	t.Helper()
	m := &clusterv1.Machine{}
	if err := json.Unmarshal(sample(t, "machine"), m); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestWatchEventsTrimmedOneByOne: client-go's watch decoder, reading through the trimmer a
// stream that arrives a byte at a time (or whole), gets each Machine without its status and
// managed fields and with the rest as served; a bookmark as sent; an ERROR event's Status
// whole (its own "status" member is not an object's); then the stream's end. A stream cut
// inside an event, or holding what is not an event, reaches the decoder as it is.
func TestWatchEventsTrimmedOneByOne(t *testing.T) {
	s := testScheme(t)
	metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
	served := machineSample(t)
	want := served.DeepCopy()
	want.ManagedFields = nil
	want.Status = clusterv1.MachineStatus{}

	machine := string(sample(t, "machine"))
	stream := `{"type":"ADDED","object":` + machine + "}\n" +
		`{"type":"BOOKMARK","object":{"kind":"Machine","apiVersion":"cluster.x-k8s.io/v1beta2","metadata":{"resourceVersion":"77","annotations":{"k8s.io/initial-events-end":"true"}}}}` + "\n" +
		`  {"object":` + machine + `,"type":"MODIFIED"}` + "\r\n" +
		`{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 1 (77)","reason":"Expired","code":410}}` + "\n"
	for name, wrap := range map[string]func(io.Reader) io.Reader{
		"whole":      func(r io.Reader) io.Reader { return r },
		"byte-wise":  iotest.OneByteReader,
		"half-reads": iotest.HalfReader,
	} {
		t.Run(name, func(t *testing.T) {
			body := newEventTrimmer(io.NopCloser(wrap(strings.NewReader(stream))), Trim{Within: map[string]Trim{"object": machineTrim}})
			d := watchDecoder(t, s, body)
			for i, wantType := range []watch.EventType{watch.Added, watch.Bookmark, watch.Modified, watch.Error} {
				typ, obj, err := d.Decode()
				if err != nil {
					t.Fatalf("event %d: %v", i, err)
				}
				if typ != wantType {
					t.Fatalf("event %d is %s, want %s", i, typ, wantType)
				}
				switch o := obj.(type) {
				case *clusterv1.Machine:
					if typ == watch.Bookmark {
						if o.ResourceVersion != "77" || o.Annotations[metav1.InitialEventsAnnotationKey] != "true" {
							t.Errorf("bookmark: %+v", o.ObjectMeta)
						}
						continue
					}
					o.SetGroupVersionKind(schema.GroupVersionKind{}) // the decoder sets it; the sample's decoding did not
					want.SetGroupVersionKind(schema.GroupVersionKind{})
					if !equalJSON(t, o, want) {
						t.Errorf("event %d: got %+v", i, o)
					}
				case *metav1.Status:
					if o.Status != metav1.StatusFailure || o.Code != 410 || o.Reason != metav1.StatusReasonExpired {
						t.Errorf("ERROR event's Status changed: %+v", o)
					}
				default:
					t.Fatalf("event %d: %T", i, obj)
				}
			}
			if _, _, err := d.Decode(); err != io.EOF {
				t.Errorf("after the last event: %v, want EOF", err)
			}
		})
	}

	// Cut inside an event, and bytes that cannot start one: the decoder fails on them.
	for _, bad := range []string{
		`{"type":"ADDED","object":` + machine[:len(machine)/2],
		`{"type":"ADDED","object":{"metadata":{"name":"m"}}}` + "\n" + `not an event`,
	} {
		body := newEventTrimmer(io.NopCloser(strings.NewReader(bad)), Trim{Within: map[string]Trim{"object": machineTrim}})
		d := watchDecoder(t, s, body)
		var err error
		for range 3 {
			if _, _, err = d.Decode(); err != nil {
				break
			}
		}
		if err == nil || err == io.EOF {
			t.Errorf("%.40q...: decoded without an error (%v)", bad, err)
		}
	}
}

func equalJSON(t *testing.T, a, b any) bool {
	t.Helper()
	ja, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	jb, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Equal(ja, jb)
}

// TestTransportTrimsCollections: through an http.Client, a JSON list or watch of a resource is
// trimmed by that resource's trim (or the one for every object); a single object, a
// subresource, protobuf, an error response and other verbs pass byte for byte.
func TestTransportTrimsCollections(t *testing.T) {
	machine := sample(t, "machine")
	list := []byte(`{"kind":"MachineList","apiVersion":"cluster.x-k8s.io/v1beta2","metadata":{"resourceVersion":"9"},"items":[` + string(machine) + `]}`)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Query().Get("fail") != "":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusGone)
			_, _ = w.Write(list)
		case strings.HasSuffix(r.URL.Path, "/secrets"):
			w.Header().Set("Content-Type", "application/vnd.kubernetes.protobuf")
			_, _ = w.Write(list)
		case r.URL.Query().Get("watch") == "true" || strings.Contains(r.URL.Path, "/watch/"):
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"type":"ADDED","object":` + string(machine) + "}\n"))
		case strings.HasSuffix(r.URL.Path, "/machines"), strings.HasSuffix(r.URL.Path, "/goofymachines"):
			w.Header().Set("Content-Type", "application/json; charset=utf-8")
			_, _ = w.Write(list)
		default:
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(machine)
		}
	}))
	defer srv.Close()
	machines := schema.GroupResource{Group: "cluster.x-k8s.io", Resource: "machines"}
	c := &http.Client{Transport: &Transport{Next: srv.Client().Transport, Object: managedFields,
		ByResource: map[schema.GroupResource]Trim{machines: machineTrim}}}
	get := func(method, path string) []byte {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		if resp.ContentLength > 0 && int(resp.ContentLength) != len(b) {
			t.Errorf("%s: Content-Length %d for %d bytes", path, resp.ContentLength, len(b))
		}
		return b
	}
	trimmedList := func(trim Trim) string {
		b, _, err := trimObject(nil, list, 0, &Trim{Each: map[string]Trim{"items": trim}})
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	for path, want := range map[string]string{
		"/apis/cluster.x-k8s.io/v1beta2/namespaces/ns/machines":          trimmedList(machineTrim),
		"/apis/cluster.x-k8s.io/v1beta2/machines":                        trimmedList(machineTrim),
		"/prefix/k8s/apis/cluster.x-k8s.io/v1beta2/machines?limit=500":   trimmedList(machineTrim),
		"/apis/infrastructure.cluster.x-k8s.io/v1alpha1/goofymachines":   trimmedList(managedFields),
		"/apis/cluster.x-k8s.io/v1beta2/namespaces/ns/machines/m":        string(machine),
		"/apis/cluster.x-k8s.io/v1beta2/namespaces/ns/machines/m/status": string(machine),
		"/api/v1/namespaces/ns/secrets":                                  string(list),
		"/apis/cluster.x-k8s.io/v1beta2/machines?fail=1":                 string(list),
		"/healthz": string(machine),
	} {
		if got := string(get(http.MethodGet, path)); got != want {
			t.Errorf("GET %s: got %d bytes, want %d", path, len(got), len(want))
		}
	}
	if got := get(http.MethodPost, "/apis/cluster.x-k8s.io/v1beta2/machines"); !bytes.Equal(got, list) {
		t.Error("POST: response changed")
	}
	for _, path := range []string{"/apis/cluster.x-k8s.io/v1beta2/machines?watch=true", "/apis/cluster.x-k8s.io/v1beta2/watch/namespaces/ns/machines"} {
		got := get(http.MethodGet, path)
		want, _, err := trimObject(nil, []byte(`{"type":"ADDED","object":`+string(machine)+"}"), 0, &Trim{Within: map[string]Trim{"object": machineTrim}})
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want)+"\n" {
			t.Errorf("GET %s: got %d bytes, want %d", path, len(got), len(want)+1)
		}
	}
}

func TestCollectionOf(t *testing.T) {
	for path, want := range map[string]string{
		"/api/v1/secrets":                         "/secrets",
		"/api/v1/namespaces/ns/secrets":           "/secrets",
		"/api/v1/namespaces":                      "/namespaces",
		"/api/v1/watch/namespaces/ns/secrets":     "/secrets watch",
		"/apis/g.io/v1/things":                    "g.io/things",
		"/apis/g.io/v1/namespaces/api/things":     "g.io/things",
		"/k8s/clusters/c-1/apis/g.io/v1/things":   "g.io/things",
		"/api/v1/namespaces/ns":                   "",
		"/api/v1/namespaces/ns/secrets/s":         "",
		"/apis/g.io/v1/namespaces/ns/things/x/st": "",
		"/apis/g.io/v1":                           "",
		"/apis/g.io":                              "",
		"/api":                                    "",
		"/version":                                "",
	} {
		gr, watchPath, ok := collectionOf(path)
		got := ""
		if ok {
			got = gr.Group + "/" + gr.Resource
			if watchPath {
				got += " watch"
			}
		}
		if got != want {
			t.Errorf("%s: %q, want %q", path, got, want)
		}
	}
}
