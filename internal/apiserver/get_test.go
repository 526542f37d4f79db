package apiserver

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// TestGetServesTheCurrentVersion reads a Node through JSON and protobuf clientsets, changes it,
// and reads it again: GETs are answered from encodings cached per object version, so a stale
// encoding would show here.
func TestGetServesTheCurrentVersion(t *testing.T) {
	g := NewWithT(t)
	env := newTestEnv(t, Options{})
	createNode(t, env, readyNode("n1"))
	jsonCS := env.clientset(t)
	protoCS, err := kubernetes.NewForConfig(env.protobufConfig())
	g.Expect(err).NotTo(HaveOccurred())

	for round := range 3 {
		var seen []*corev1.Node
		for _, cs := range []*kubernetes.Clientset{jsonCS, protoCS, jsonCS, protoCS} {
			n, err := cs.CoreV1().Nodes().Get(ctx(t), "n1", metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			if round == 0 {
				g.Expect(n.Labels).NotTo(HaveKey("round"))
			} else {
				g.Expect(n.Labels).To(HaveKeyWithValue("round", strconv.Itoa(round-1)), "round %d", round)
			}
			g.Expect(n.Status.NodeInfo.KubeletVersion).To(Equal("v1.36.3"))
			seen = append(seen, n)
		}
		for _, n := range seen[1:] {
			g.Expect(n.ResourceVersion).To(Equal(seen[0].ResourceVersion))
		}
		n := seen[0]
		n.Labels["round"] = strconv.Itoa(round)
		_, err := jsonCS.CoreV1().Nodes().Update(ctx(t), n, metav1.UpdateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
	}
	n, err := protoCS.CoreV1().Nodes().Get(ctx(t), "n1", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(n.Labels).To(HaveKeyWithValue("round", "2"))

	_, err = jsonCS.CoreV1().Nodes().Get(ctx(t), "missing", metav1.GetOptions{})
	g.Expect(err).To(MatchError(ContainSubstring(`nodes "missing" not found`)))
}

// TestGetFormats checks the headers and bodies of the encoded-GET path for raw clients: plain and
// pretty JSON are different encodings, and HEAD gets the length without a body.
func TestGetFormats(t *testing.T) {
	g := NewWithT(t)
	env := newTestEnv(t, Options{})
	createNode(t, env, readyNode("n1"))

	code, hdr, plain := env.do(t, http.MethodGet, "/api/v1/nodes/n1", "", "application/json", "")
	g.Expect(code).To(Equal(http.StatusOK), plain)
	g.Expect(hdr.Get("Content-Type")).To(Equal("application/json"))
	g.Expect(hdr.Get("Content-Length")).To(Equal(strconv.Itoa(len(plain))))
	g.Expect(plain).To(HavePrefix(`{"kind":"Node","apiVersion":"v1","metadata":{"name":"n1"`))

	code, _, pretty := env.do(t, http.MethodGet, "/api/v1/nodes/n1?pretty=true", "", "application/json", "")
	g.Expect(code).To(Equal(http.StatusOK), pretty)
	g.Expect(pretty).To(HavePrefix("{\n  \"kind\": \"Node\""))

	code, _, yaml := env.do(t, http.MethodGet, "/api/v1/nodes/n1", "", "application/yaml", "")
	g.Expect(code).To(Equal(http.StatusOK), yaml)
	g.Expect(yaml).To(ContainSubstring("kind: Node\n"))

	code, hdr, body := env.do(t, http.MethodHead, "/api/v1/nodes/n1", "", "application/json", "")
	g.Expect(code).To(Equal(http.StatusOK))
	g.Expect(body).To(BeEmpty())
	g.Expect(hdr.Get("Content-Length")).To(Equal(strconv.Itoa(len(plain))))

	code, _, body = env.do(t, http.MethodGet, "/api/v1/nodes/n1", "", "text/html", "")
	g.Expect(code).To(Equal(http.StatusNotAcceptable), body)
}

// TestGetConcurrentReaders has several JSON and protobuf clients GET the same Nodes at the same
// time, so that first GETs of a version (which encode it) can overlap, between rounds of updates:
// every round reads the version of the last round, never a cached older one, and -race checks
// the cache's locking. (TestEncodeSharedDoesNotWrite checks the encoder itself.)
func TestGetConcurrentReaders(t *testing.T) {
	g := NewWithT(t)
	env := newTestEnv(t, Options{})
	const nodes, readers, rounds = 20, 6, 3
	for i := range nodes {
		createNode(t, env, readyNode(fmt.Sprintf("n%d", i)))
	}
	jsonCS := env.clientset(t)
	protoCS, err := kubernetes.NewForConfig(env.protobufConfig())
	g.Expect(err).NotTo(HaveOccurred())

	for round := range rounds {
		start := make(chan struct{})
		errs := make(chan error, readers)
		for r := range readers {
			cs := []*kubernetes.Clientset{jsonCS, protoCS}[r%2]
			go func() {
				<-start
				for i := range nodes {
					n, err := cs.CoreV1().Nodes().Get(ctx(t), fmt.Sprintf("n%d", i), metav1.GetOptions{})
					if err == nil && round > 0 && n.Labels["round"] != strconv.Itoa(round-1) {
						err = fmt.Errorf("node %s: stale labels %v in round %d", n.Name, n.Labels, round)
					}
					if err != nil {
						errs <- err
						return
					}
				}
				errs <- nil
			}()
		}
		close(start)
		for range readers {
			g.Expect(<-errs).NotTo(HaveOccurred())
		}
		for i := range nodes {
			n, err := jsonCS.CoreV1().Nodes().Get(ctx(t), fmt.Sprintf("n%d", i), metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			n.Labels["round"] = strconv.Itoa(round)
			_, err = jsonCS.CoreV1().Nodes().Update(ctx(t), n, metav1.UpdateOptions{})
			g.Expect(err).NotTo(HaveOccurred())
		}
	}
}

// TestEncodeSharedDoesNotWrite encodes one object from two goroutines at once in every media
// type, with and without TypeMeta: under -race this fails if encoding writes to the object (as a
// version encoder does, setting TypeMeta on an object that lacks it while it encodes). The bare
// object is encoded with its kind and left as it was.
func TestEncodeSharedDoesNotWrite(t *testing.T) {
	g := NewWithT(t)
	gvk := corev1.SchemeGroupVersion.WithKind("Node")
	// concurrently encodes obj twice at once and returns one result.
	concurrently := func(enc store.EncodeFunc, obj runtime.Object) []byte {
		outs := make(chan []byte, 2)
		for range 2 {
			go func() {
				var buf bytes.Buffer
				if err := enc(obj, &buf); err != nil {
					t.Error(err)
				}
				outs <- buf.Bytes()
			}()
		}
		a, b := <-outs, <-outs
		g.Expect(a).To(Equal(b))
		return a
	}
	for _, info := range getServing().objects.SupportedMediaTypes() {
		for _, ser := range []runtime.Encoder{info.Serializer, info.PrettySerializer} {
			if ser == nil {
				continue
			}
			enc := encodeShared(ser, gvk)
			kinded := readyNode("n1")
			kinded.SetGroupVersionKind(gvk)
			want := concurrently(enc, kinded)
			g.Expect(want).NotTo(BeEmpty(), info.MediaType)

			bare := readyNode("n1")
			g.Expect(concurrently(enc, bare)).To(Equal(want), "%s: encoded with its kind", info.MediaType)
			g.Expect(bare.GetObjectKind().GroupVersionKind().Empty()).To(BeTrue(), "the shared object was modified")
		}
	}
}

// TestGetLargeObjectGzipped: like upstream, a GET response over 128 KiB is gzipped for a client
// that accepts it, and a small one is not.
func TestGetLargeObjectGzipped(t *testing.T) {
	g := NewWithT(t)
	env := newTestEnv(t, Options{})
	cs := env.clientset(t)
	big := strings.Repeat("0123456789abcdef", 10<<10) // 160 KiB
	for name, data := range map[string]string{"big": big, "small": "v"} {
		_, err := cs.CoreV1().ConfigMaps("default").Create(ctx(t), &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"k": data}}, metav1.CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
	}
	cl := &http.Client{Transport: &http.Transport{DisableCompression: true}} // show the encoding
	defer cl.CloseIdleConnections()
	get := func(name string) (*http.Response, []byte) {
		req, err := http.NewRequestWithContext(ctx(t), http.MethodGet, env.server.URL+cmPath+"/"+name, nil)
		g.Expect(err).NotTo(HaveOccurred())
		req.Header.Set("Accept", "application/json")
		req.Header.Set("Accept-Encoding", "gzip")
		resp, err := cl.Do(req)
		g.Expect(err).NotTo(HaveOccurred())
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
		return resp, body
	}

	resp, body := get("big")
	g.Expect(resp.Header.Get("Content-Encoding")).To(Equal("gzip"))
	zr, err := gzip.NewReader(bytes.NewReader(body))
	g.Expect(err).NotTo(HaveOccurred())
	plain, err := io.ReadAll(zr)
	g.Expect(err).NotTo(HaveOccurred())
	var cm corev1.ConfigMap
	g.Expect(json.Unmarshal(plain, &cm)).To(Succeed())
	g.Expect(cm.Data["k"]).To(Equal(big))

	resp, body = get("small")
	g.Expect(resp.Header.Get("Content-Encoding")).To(BeEmpty())
	g.Expect(json.Unmarshal(body, &cm)).To(Succeed())
	g.Expect(cm.Data["k"]).To(Equal("v"))
}
