package harness

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// Contract labels that CAPI's kustomize adds to its CRDs; CAPI core resolves which API version of a
// referenced kind implements a contract from them, and the CRD bases in the module lack them.
const (
	contractLabelV1Beta2 = "cluster.x-k8s.io/v1beta2"
	contractLabelV1Beta1 = "cluster.x-k8s.io/v1beta1"
)

// splitYAML returns the non-empty documents of a multi-document YAML stream.
func splitYAML(data []byte) ([][]byte, error) {
	r := utilyaml.NewYAMLReader(bufioReader(data))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(doc)) == 0 || isOnlyComments(doc) {
			continue
		}
		docs = append(docs, doc)
	}
}

func isOnlyComments(doc []byte) bool {
	for line := range strings.SplitSeq(string(doc), "\n") {
		t := strings.TrimSpace(line)
		if t != "" && !strings.HasPrefix(t, "#") && t != "---" {
			return false
		}
	}
	return true
}

// readCRDs decodes every CRD in the given files.
func readCRDs(files ...string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	var crds []*apiextensionsv1.CustomResourceDefinition
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		docs, err := splitYAML(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		for _, doc := range docs {
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := yaml.UnmarshalStrict(doc, crd); err != nil {
				return nil, fmt.Errorf("%s: %w", f, err)
			}
			if crd.Kind != "CustomResourceDefinition" {
				continue
			}
			crds = append(crds, crd)
		}
	}
	return crds, nil
}

// capiCRDs reads the CRD bases of one CAPI manager from the module, adds the contract labels its
// kustomize would add, and, for CRDs serving more than one version, points conversion at the
// manager's webhook server as CAPI's kustomize patches do (with a URL instead of a Service).
func capiCRDs(moduleDir, component string, webhookPort int, caBundle []byte) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	files, err := filepath.Glob(filepath.Join(moduleDir, component, "config", "crd", "bases", "*.yaml"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no CRDs under %s", filepath.Join(moduleDir, component, "config", "crd", "bases"))
	}
	crds, err := readCRDs(files...)
	if err != nil {
		return nil, err
	}
	for _, crd := range crds {
		if crd.Labels == nil {
			crd.Labels = map[string]string{}
		}
		crd.Labels[contractLabelV1Beta2] = "v1beta2"
		if slices.ContainsFunc(crd.Spec.Versions, func(v apiextensionsv1.CustomResourceDefinitionVersion) bool { return v.Name == "v1beta1" }) {
			crd.Labels[contractLabelV1Beta1] = "v1beta1"
		}
		if len(crd.Spec.Versions) > 1 {
			url := fmt.Sprintf("https://%s/convert", hostPort(webhookPort))
			crd.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{
				Strategy: apiextensionsv1.WebhookConverter,
				Webhook: &apiextensionsv1.WebhookConversion{
					ClientConfig:             &apiextensionsv1.WebhookClientConfig{URL: &url, CABundle: caBundle},
					ConversionReviewVersions: []string{"v1"},
				},
			}
		}
	}
	return crds, nil
}

// kustomization is the part of a kustomization.yaml the harness reads.
type kustomization struct {
	Resources []string `json:"resources"`
	Labels    []struct {
		Pairs map[string]string `json:"pairs"`
	} `json:"labels"`
}

// goofyCRDs reads this repository's CRDs as config/crd/kustomization.yaml assembles them: its
// resources with its labels (the contract label among them), so the harness needs no kustomize.
func goofyCRDs(repoRoot string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	dir := filepath.Join(repoRoot, "config", "crd")
	data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		return nil, err
	}
	var k kustomization
	if err := yaml.Unmarshal(data, &k); err != nil {
		return nil, fmt.Errorf("config/crd/kustomization.yaml: %w", err)
	}
	var files []string
	for _, r := range k.Resources {
		files = append(files, filepath.Join(dir, r))
	}
	crds, err := readCRDs(files...)
	if err != nil {
		return nil, err
	}
	for _, crd := range crds {
		if crd.Labels == nil {
			crd.Labels = map[string]string{}
		}
		for _, l := range k.Labels {
			for key, v := range l.Pairs {
				crd.Labels[key] = v
			}
		}
	}
	return crds, nil
}

var admissionCodecs = func() serializer.CodecFactory {
	s := runtime.NewScheme()
	_ = admissionregistrationv1.AddToScheme(s)
	return serializer.NewCodecFactory(s)
}()

// webhookConfigurations reads a manager's config/webhook/manifests.yaml and rewrites it for a
// webhook server on 127.0.0.1:port: every configuration gets the manager's name as prefix (the
// managers' files share object names), and each webhook a URL client config with the CA bundle.
func webhookConfigurations(moduleDir, component, manager string, port int, caBundle []byte) ([]runtime.Object, error) {
	file := filepath.Join(moduleDir, component, "config", "webhook", "manifests.yaml")
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	docs, err := splitYAML(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	url := func(cc admissionregistrationv1.WebhookClientConfig) (*string, error) {
		if cc.Service == nil || cc.Service.Path == nil {
			return nil, fmt.Errorf("%s: webhook without service path", file)
		}
		u := fmt.Sprintf("https://%s%s", hostPort(port), *cc.Service.Path)
		return &u, nil
	}
	var out []runtime.Object
	for _, doc := range docs {
		obj, _, err := admissionCodecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		switch o := obj.(type) {
		case *admissionregistrationv1.MutatingWebhookConfiguration:
			o.Name = manager + "-" + o.Name
			for i := range o.Webhooks {
				u, err := url(o.Webhooks[i].ClientConfig)
				if err != nil {
					return nil, err
				}
				o.Webhooks[i].ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: u, CABundle: caBundle}
			}
			out = append(out, o)
		case *admissionregistrationv1.ValidatingWebhookConfiguration:
			o.Name = manager + "-" + o.Name
			for i := range o.Webhooks {
				u, err := url(o.Webhooks[i].ClientConfig)
				if err != nil {
					return nil, err
				}
				o.Webhooks[i].ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: u, CABundle: caBundle}
			}
			out = append(out, o)
		default:
			return nil, fmt.Errorf("%s: unexpected %T", file, obj)
		}
	}
	return out, nil
}

func bufioReader(data []byte) *bufio.Reader { return bufio.NewReader(bytes.NewReader(data)) }
