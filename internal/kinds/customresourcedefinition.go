package kinds

import (
	"context"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// customResourceDefinitionStrategy: CRDs are defaulted and validated by apiextensions-apiserver's
// own rules (structural schemas, names, versions, CEL rules compile, conversion), and a new CRD
// records its storage version in status.storedVersions, as the apiextensions-apiserver does.
type customResourceDefinitionStrategy struct{ base }

func init() {
	register(customResourceDefinitionStrategy{newBase(resource{apiextensionsv1.SchemeGroupVersion,
		"customresourcedefinitions", "CustomResourceDefinition", false, []string{"crd", "crds"},
		[]string{"api-extensions"}, []string{"status"}}, withGeneration)})
}

func (s customResourceDefinitionStrategy) Default(obj runtime.Object) {
	apiextensionsv1.SetObjectDefaults_CustomResourceDefinition(obj.(*apiextensionsv1.CustomResourceDefinition))
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

func (s customResourceDefinitionStrategy) Validate(ctx context.Context, obj runtime.Object) field.ErrorList {
	internal, err := internalCRD(obj)
	if err != nil {
		return field.ErrorList{field.InternalError(nil, err)}
	}
	return validation.ValidateCustomResourceDefinition(ctx, internal)
}

func (s customResourceDefinitionStrategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	internal, err := internalCRD(obj)
	if err != nil {
		return field.ErrorList{field.InternalError(nil, err)}
	}
	internalOld, err := internalCRD(old)
	if err != nil {
		return field.ErrorList{field.InternalError(nil, err)}
	}
	return validation.ValidateCustomResourceDefinitionUpdate(ctx, internal, internalOld)
}

// internalCRD converts a v1 CRD to the internal version the validation is written against.
func internalCRD(obj runtime.Object) (*apiextensions.CustomResourceDefinition, error) {
	out := &apiextensions.CustomResourceDefinition{}
	err := apiextensionsv1.Convert_v1_CustomResourceDefinition_To_apiextensions_CustomResourceDefinition(obj.(*apiextensionsv1.CustomResourceDefinition), out, nil)
	return out, err
}
