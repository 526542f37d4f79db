package helm

import (
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/release"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericclioptions"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/apiserver"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// The chart a platform team would ship: a CRD in crds/, one of its objects, a Deployment and a
// Service whose replicas come from values.
var chartFiles = map[string]string{
	"Chart.yaml":  "apiVersion: v2\nname: gizmo\nversion: 0.1.0\nappVersion: \"1.0\"\n",
	"values.yaml": "replicas: 1\n",
	"crds/gizmos.yaml": `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gizmos.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: gizmos, singular: gizmo, kind: Gizmo, listKind: GizmoList}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              level: {type: integer, minimum: 1}
`,
	"templates/gizmo.yaml": `apiVersion: example.com/v1
kind: Gizmo
metadata:
  name: {{ .Release.Name }}
spec:
  level: {{ .Values.replicas }}
`,
	"templates/deployment.yaml": `apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .Release.Name }}
spec:
  replicas: {{ .Values.replicas }}
  selector: {matchLabels: {app: gizmo}}
  template:
    metadata: {labels: {app: gizmo}}
    spec:
      containers:
      - {name: gizmo, image: registry.invalid/gizmo:1.0}
`,
	"templates/service.yaml": `apiVersion: v1
kind: Service
metadata:
  name: {{ .Release.Name }}
spec:
  selector: {app: gizmo}
  ports:
  - {port: 80, targetPort: 8080}
`,
}

var gizmosGVR = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "gizmos"}

// Helm's Go SDK installs a chart with a CRD into a Goofy workload cluster, lists, upgrades and
// uninstalls the release, with its release records stored in the cluster as Secrets.
func TestHelmInstallUpgradeUninstall(t *testing.T) {
	g := NewWithT(t)
	m := store.NewManager()
	c, err := m.AddCluster("ns/helm", store.ClusterOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	srv := httptest.NewServer(apiserver.NewHandler(c, apiserver.Options{}))
	t.Cleanup(srv.Close)

	dir := t.TempDir()
	chartDir := filepath.Join(dir, "gizmo")
	for name, content := range chartFiles {
		path := filepath.Join(chartDir, name)
		g.Expect(os.MkdirAll(filepath.Dir(path), 0o755)).To(Succeed())
		g.Expect(os.WriteFile(path, []byte(content), 0o600)).To(Succeed())
	}
	chrt, err := loader.Load(chartDir)
	g.Expect(err).NotTo(HaveOccurred())
	kubeconfig := filepath.Join(dir, "kubeconfig")
	g.Expect(os.WriteFile(kubeconfig, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: goofy, cluster: {server: %q}}]
contexts: [{name: goofy, context: {cluster: goofy, user: goofy}}]
current-context: goofy
users: [{name: goofy, user: {}}]
`, srv.URL)), 0o600)).To(Succeed())
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig = &kubeconfig
	namespace := "demo" // as helm's --namespace sets it
	flags.Namespace = &namespace
	cacheDir := filepath.Join(dir, "cache")
	flags.CacheDir = &cacheDir
	cfg := &action.Configuration{}
	g.Expect(cfg.Init(flags, "demo", "secret", t.Logf)).To(Succeed())

	install := action.NewInstall(cfg)
	install.ReleaseName, install.Namespace, install.CreateNamespace = "demo", "demo", true
	install.Timeout = 0
	rel, err := install.Run(chrt, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(rel.Info.Status).To(Equal(release.StatusDeployed))

	crd, err := c.Get(apiextensionsv1.SchemeGroupVersion.WithResource("customresourcedefinitions"), "", "gizmos.example.com")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(crd.(*apiextensionsv1.CustomResourceDefinition).Status.AcceptedNames.Kind).To(Equal("Gizmo"))
	gizmo, err := c.Get(gizmosGVR, "demo", "demo")
	g.Expect(err).NotTo(HaveOccurred())
	level, _, _ := unstructured.NestedInt64(gizmo.(*unstructured.Unstructured).Object, "spec", "level")
	g.Expect(level).To(BeEquivalentTo(1))
	svc, err := c.Get(corev1.SchemeGroupVersion.WithResource("services"), "demo", "demo")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(svc.(*corev1.Service).Spec.ClusterIP).NotTo(BeEmpty())
	secrets, err := c.List(corev1.SchemeGroupVersion.WithResource("secrets"), "demo", store.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(secrets.(*corev1.SecretList).Items).To(ContainElement(HaveField("Type", corev1.SecretType("helm.sh/release.v1"))))

	list := action.NewList(cfg)
	releases, err := list.Run()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(releases).To(HaveLen(1))
	g.Expect(releases[0].Name).To(Equal("demo"))

	upgrade := action.NewUpgrade(cfg)
	upgrade.Namespace = "demo"
	rel, err = upgrade.Run("demo", chrt, map[string]any{"replicas": 2})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(rel.Version).To(Equal(2))
	g.Expect(rel.Info.Status).To(Equal(release.StatusDeployed))
	dep, err := c.Get(appsv1.SchemeGroupVersion.WithResource("deployments"), "demo", "demo")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(*dep.(*appsv1.Deployment).Spec.Replicas).To(BeEquivalentTo(2))
	gizmo, err = c.Get(gizmosGVR, "demo", "demo")
	g.Expect(err).NotTo(HaveOccurred())
	level, _, _ = unstructured.NestedInt64(gizmo.(*unstructured.Unstructured).Object, "spec", "level")
	g.Expect(level).To(BeEquivalentTo(2))

	// A value the CRD's schema refuses fails the upgrade with the API server's 422.
	_, err = upgrade.Run("demo", chrt, map[string]any{"replicas": 0})
	g.Expect(err).To(MatchError(ContainSubstring("spec.level in body should be greater than or equal to 1")))

	_, err = action.NewUninstall(cfg).Run("demo")
	g.Expect(err).NotTo(HaveOccurred())
	for _, gvr := range []schema.GroupVersionResource{gizmosGVR, appsv1.SchemeGroupVersion.WithResource("deployments"), corev1.SchemeGroupVersion.WithResource("services")} {
		_, err = c.Get(gvr, "demo", "demo")
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%s: %v", gvr.Resource, err)
	}
	_, err = c.Get(apiextensionsv1.SchemeGroupVersion.WithResource("customresourcedefinitions"), "", "gizmos.example.com")
	g.Expect(err).NotTo(HaveOccurred(), "helm keeps the CRDs of crds/ on uninstall")
	releases, err = action.NewList(cfg).Run()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(releases).To(BeEmpty())
}
