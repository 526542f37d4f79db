package apiserver

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/resource"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/openapi3"
)

func TestHealthRootVersion(t *testing.T) {
	g := NewWithT(t)
	env := newTestEnv(t, Options{})
	for _, p := range []string{"/healthz", "/livez", "/readyz", "/readyz?verbose", "/healthz/ping"} {
		code, _, body := env.do(t, http.MethodGet, p, "", "", "")
		g.Expect(code).To(Equal(http.StatusOK), p)
		g.Expect(body).To(Equal("ok"), p)
	}
	code, _, body := env.do(t, http.MethodGet, "/", "", "", "")
	g.Expect(code).To(Equal(http.StatusOK))
	var root metav1.RootPaths
	g.Expect(json.Unmarshal([]byte(body), &root)).To(Succeed())
	g.Expect(root.Paths).To(ContainElements("/api", "/apis", "/apis/apps/v1", "/version"))

	dc, err := discovery.NewDiscoveryClientForConfig(env.cfg)
	g.Expect(err).NotTo(HaveOccurred())
	v, err := dc.ServerVersion()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(v.GitVersion).To(Equal(testVersion))
	g.Expect(v.Major).To(Equal("1"))
	g.Expect(v.Minor).To(Equal("36"))

	// The version follows the cluster (KCP upgrades change it).
	env.cluster.SetKubernetesVersion("v1.37.0")
	v, err = dc.ServerVersion()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(v.GitVersion).To(Equal("v1.37.0"))

	// Unknown paths and writes to read-only paths are Status errors.
	code, _, body = env.do(t, http.MethodGet, "/nope", "", "", "")
	g.Expect(code).To(Equal(http.StatusNotFound))
	g.Expect(body).To(ContainSubstring(`"kind":"Status"`))
	code, _, _ = env.do(t, http.MethodPost, "/version", "application/json", "", "{}")
	g.Expect(code).To(Equal(http.StatusMethodNotAllowed))
}

// checkDiscovery asserts what kubectl and KCP rely on, whatever discovery protocol was used.
func checkDiscovery(g Gomega, dc discovery.DiscoveryInterface) {
	groups, lists, err := dc.ServerGroupsAndResources()
	g.Expect(err).NotTo(HaveOccurred())
	var names []string
	for _, gr := range groups {
		names = append(names, gr.Name)
	}
	g.Expect(names).To(ContainElements("", "apps", "policy", "rbac.authorization.k8s.io", "storage.k8s.io", "coordination.k8s.io", "apiextensions.k8s.io"))
	g.Expect(names[0]).To(Equal(""))

	found := map[string]metav1.APIResource{}
	for _, l := range lists {
		for _, r := range l.APIResources {
			found[l.GroupVersion+"/"+r.Name] = r
		}
	}
	g.Expect(found).To(HaveKey("v1/pods"))
	g.Expect(found["v1/pods"].Namespaced).To(BeTrue())
	g.Expect(found["v1/pods"].ShortNames).To(ContainElement("po"))
	g.Expect(found["v1/nodes"].Namespaced).To(BeFalse())
	ev := found["v1/pods/eviction"]
	g.Expect(ev.Group).To(Equal("policy"))
	g.Expect(ev.Version).To(Equal("v1"))
	g.Expect(ev.Kind).To(Equal("Eviction"))
	g.Expect(ev.Verbs).To(ConsistOf("create"))
	sc := found["apps/v1/deployments/scale"]
	g.Expect(sc.Group).To(Equal("autoscaling"))
	g.Expect(sc.Kind).To(Equal("Scale"))
	g.Expect(found["apps/v1/deployments/status"].Verbs).To(ConsistOf("get", "patch", "update"))
	g.Expect(found["v1/pods/log"].Verbs).To(ConsistOf("get"))

	preferred, err := dc.ServerPreferredResources()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(preferred).NotTo(BeEmpty())
}

func TestDiscoveryAggregatedAndLegacy(t *testing.T) {
	g := NewWithT(t)
	env := newTestEnv(t, Options{})
	dc, err := discovery.NewDiscoveryClientForConfig(env.cfg)
	g.Expect(err).NotTo(HaveOccurred())

	checkDiscovery(g, dc)
	// The default client used aggregated discovery: two requests (/api and /apis), never a
	// per-group-version document.
	for _, r := range env.requestLog() {
		g.Expect(r).NotTo(HavePrefix("GET /apis/apps/v1"), "aggregated discovery should not need per-GV fetches")
	}

	checkDiscovery(g, dc.WithLegacy())
	g.Expect(env.requestLog()).To(ContainElement(HavePrefix("GET /apis/apps/v1")))

	// The aggregated document itself, as kubectl asks for it.
	code, hdr, body := env.do(t, http.MethodGet, "/apis", "", discovery.AcceptV2+","+discovery.AcceptV1, "")
	g.Expect(code).To(Equal(http.StatusOK))
	g.Expect(hdr.Get("Content-Type")).To(Equal("application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"))
	var agg apidiscoveryv2.APIGroupDiscoveryList
	g.Expect(json.Unmarshal([]byte(body), &agg)).To(Succeed())
	g.Expect(agg.Kind).To(Equal("APIGroupDiscoveryList"))
	// kube-aggregator's own group first (priority 18000), as upstream lists it.
	g.Expect(agg.Items[0].Name).To(Equal("apiregistration.k8s.io"))
	g.Expect(agg.Items[1].Name).To(Equal("apps"))

	// Unsupported Accept is a 406 Status.
	code, _, body = env.do(t, http.MethodGet, "/api/v1", "", "text/html", "")
	g.Expect(code).To(Equal(http.StatusNotAcceptable))
	g.Expect(body).To(ContainSubstring(`"NotAcceptable"`))
	code, _, _ = env.do(t, http.MethodGet, "/apis/nope.io/v1", "", "", "")
	g.Expect(code).To(Equal(http.StatusNotFound))
}

func TestOpenAPIV3FieldValidationSupport(t *testing.T) {
	g := NewWithT(t)
	env := newTestEnv(t, Options{})
	dc, err := discovery.NewDiscoveryClientForConfig(env.cfg)
	g.Expect(err).NotTo(HaveOccurred())
	paths, err := dc.OpenAPIV3().Paths()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(paths).To(HaveKey("api/v1"))
	g.Expect(paths).To(HaveKey("apis/apps/v1"))
	g.Expect(paths).NotTo(HaveKey("apis/networking.k8s.io/v1"), "only served group-versions are indexed")

	// kubectl's own check for server-side field validation (what `kubectl apply` runs first).
	dyn, err := dynamic.NewForConfig(env.cfg)
	g.Expect(err).NotTo(HaveOccurred())
	verifier := resource.NewQueryParamVerifierV3(dyn, dc.OpenAPIV3(), resource.QueryParamFieldValidation)
	for _, gvk := range []schema.GroupVersionKind{
		{Version: "v1", Kind: "ConfigMap"}, {Group: "apps", Version: "v1", Kind: "Deployment"}, {Version: "v1", Kind: "Node"},
	} {
		g.Expect(verifier.HasSupport(gvk)).To(Succeed(), gvk.String())
	}

	// The documents carry the strategic-merge-patch metadata kubectl's client-side apply uses.
	root := openapi3.NewRoot(dc.OpenAPIV3())
	doc, err := root.GVSpec(schema.GroupVersion{Group: "apps", Version: "v1"})
	g.Expect(err).NotTo(HaveOccurred())
	podSpec := doc.Components.Schemas["io.k8s.api.core.v1.PodSpec"]
	g.Expect(podSpec).NotTo(BeNil())
	g.Expect(podSpec.Properties["containers"].Extensions).To(HaveKeyWithValue("x-kubernetes-patch-merge-key", "name"))

	code, hdr, _ := env.do(t, http.MethodGet, "/openapi/v2", "", "application/json", "")
	g.Expect(code).To(Equal(http.StatusOK))
	g.Expect(strings.HasPrefix(hdr.Get("Content-Type"), "application/json")).To(BeTrue())
}
