package kinds

import (
	"context"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// customResourceDefinitionStrategy: a new CRD records its storage version in
// status.storedVersions, as the apiextensions-apiserver does.
type customResourceDefinitionStrategy struct{ base }

func init() {
	register(customResourceDefinitionStrategy{newBase(resource{apiextensionsv1.SchemeGroupVersion,
		"customresourcedefinitions", "CustomResourceDefinition", false, []string{"crd", "crds"},
		[]string{"api-extensions"}, []string{"status"}}, withGeneration)})
}

func (s customResourceDefinitionStrategy) PrepareForCreate(ctx context.Context, obj runtime.Object) {
	s.base.PrepareForCreate(ctx, obj)
	crd := obj.(*apiextensionsv1.CustomResourceDefinition)
	for _, v := range crd.Spec.Versions {
		if v.Storage {
			crd.Status.StoredVersions = []string{v.Name}
		}
	}
}
