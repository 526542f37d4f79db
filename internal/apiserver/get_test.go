package apiserver

import (
	"net/http"
	"strconv"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
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

// TestGetConcurrentReaders GETs one Node from several JSON and protobuf clients while it changes.
// Encoding reads the shared stored object: under -race this fails if encoding ever writes to it.
func TestGetConcurrentReaders(t *testing.T) {
	g := NewWithT(t)
	env := newTestEnv(t, Options{})
	createNode(t, env, readyNode("n1"))
	jsonCS := env.clientset(t)
	protoCS, err := kubernetes.NewForConfig(env.protobufConfig())
	g.Expect(err).NotTo(HaveOccurred())

	const writes = 20
	done := make(chan struct{})
	errs := make(chan error, 4)
	for i := range 4 {
		cs := jsonCS
		if i%2 == 1 {
			cs = protoCS
		}
		go func() {
			for {
				select {
				case <-done:
					errs <- nil
					return
				default:
				}
				if _, err := cs.CoreV1().Nodes().Get(ctx(t), "n1", metav1.GetOptions{}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for i := range writes {
		n, err := jsonCS.CoreV1().Nodes().Get(ctx(t), "n1", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		n.Labels["write"] = strconv.Itoa(i)
		_, err = jsonCS.CoreV1().Nodes().Update(ctx(t), n, metav1.UpdateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
	}
	close(done)
	for range 4 {
		g.Expect(<-errs).NotTo(HaveOccurred())
	}
	for _, cs := range []*kubernetes.Clientset{jsonCS, protoCS} {
		n, err := cs.CoreV1().Nodes().Get(ctx(t), "n1", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(n.Labels).To(HaveKeyWithValue("write", strconv.Itoa(writes-1)))
	}
}
