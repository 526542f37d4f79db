package cachetrim

import (
	"mime"
	"net/http"
	"net/url"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Transport leaves out of the JSON list and watch responses that pass through it what its
// Trims name, before the client decodes them. Other requests and responses (protobuf, errors,
// single objects, compressed bodies) pass unchanged.
type Transport struct {
	Next http.RoundTripper
	// Object is the trim of every listed or watched object.
	Object Trim
	// ByResource replaces Object for the resources it names.
	ByResource map[schema.GroupResource]Trim
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.Next.RoundTrip(req)
	if err != nil || req.Method != http.MethodGet || resp.StatusCode != http.StatusOK ||
		resp.Header.Get("Content-Encoding") != "" || !isJSON(resp.Header.Get("Content-Type")) {
		return resp, err
	}
	gr, watchPath, ok := collectionOf(req.URL.Path)
	if !ok {
		return resp, nil
	}
	obj, ok := t.ByResource[gr]
	if !ok {
		obj = t.Object
	}
	if watchPath || isWatch(req.URL) {
		resp.Body = newEventTrimmer(resp.Body, Trim{Within: map[string]Trim{"object": obj}})
	} else {
		resp.Body = newListTrimmer(resp.Body, Trim{Each: map[string]Trim{"items": obj}})
	}
	resp.ContentLength = -1
	resp.Header.Del("Content-Length")
	return resp, nil
}

func isJSON(contentType string) bool {
	mediaType, _, err := mime.ParseMediaType(contentType)
	return err == nil && mediaType == "application/json"
}

func isWatch(u *url.URL) bool {
	w := u.Query().Get("watch")
	return w == "true" || w == "1"
}

// collectionOf reads which resource a request lists or watches from its path (.../api/v1/...
// or .../apis/<group>/<version>/..., after any prefix of the server's address), and whether it
// is the deprecated .../watch/... form. A path that names one object, a subresource or no
// resource reports false.
func collectionOf(path string) (gr schema.GroupResource, watchPath, ok bool) {
	segs := strings.Split(strings.Trim(path, "/"), "/")
	i := 0
	for i < len(segs) && segs[i] != "api" && segs[i] != "apis" {
		i++
	}
	switch {
	case i+1 < len(segs) && segs[i] == "api":
		segs = segs[i+2:] // api, v1
	case i+2 < len(segs) && segs[i] == "apis":
		gr.Group = segs[i+1]
		segs = segs[i+3:] // apis, group, version
	default:
		return gr, false, false
	}
	if len(segs) > 0 && segs[0] == "watch" {
		watchPath, segs = true, segs[1:]
	}
	if len(segs) == 3 && segs[0] == "namespaces" {
		segs = segs[2:]
	}
	if len(segs) != 1 || segs[0] == "" {
		return gr, false, false
	}
	gr.Resource = segs[0]
	return gr, watchPath, true
}
