package kinds

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"k8s.io/apiextensions-apiserver/pkg/apihelpers"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	structuralpruning "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apiextensions-apiserver/pkg/controller/openapi/builder"
	"k8s.io/apiextensions-apiserver/pkg/registry/customresource"
	"k8s.io/apiextensions-apiserver/pkg/registry/customresource/tableconvertor"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/kube-openapi/pkg/spec3"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// customResourceStrategy is the strategy of one served version of a kind a
// CustomResourceDefinition defines in a workload cluster. Creation, update, validation
// (OpenAPI schema, embedded resources, list-type invariants, x-kubernetes-validations rules in
// CEL), status and generation handling are apiextensions-apiserver's own custom resource
// strategy; defaulting and pruning of unknown fields are its schema packages, run where
// kube-apiserver runs them (when a request body is decoded).
type customResourceStrategy struct {
	rest.RESTCreateStrategy
	rest.RESTUpdateStrategy
	info       ResourceInfo
	structural *structuralschema.Structural // nil: x-kubernetes-preserve-unknown-fields at the root
	preserve   bool                         // spec.preserveUnknownFields (v1 requires false)
	status     rest.RESTUpdateStrategy
	printer    Printer
	selectable map[string]bool // fields.Set keys a field selector may use
	attrs      func(runtime.Object) (fields.Set, error)
	// openAPIV3 and openAPIV2 build the version's OpenAPI documents on first use (most clusters
	// are never asked), with apiextensions-apiserver's own builder.
	openAPIV3 func() (*spec3.OpenAPI, error)
	openAPIV2 func() (*spec.Swagger, error)
	scale     *Scale // nil without a scale subresource
}

// CustomResources returns the strategies of every served version of crd's kind, or why the CRD
// cannot be served (a schema that is not structural, for one).
func CustomResources(crd *apiextensionsv1.CustomResourceDefinition) ([]Strategy, error) {
	var out []Strategy
	for _, v := range crd.Spec.Versions {
		if !v.Served {
			continue
		}
		s, err := newCustomResourceStrategy(crd, v)
		if err != nil {
			return nil, fmt.Errorf("version %s: %w", v.Name, err)
		}
		out = append(out, s)
	}
	return out, nil
}

func newCustomResourceStrategy(crd *apiextensionsv1.CustomResourceDefinition, v apiextensionsv1.CustomResourceDefinitionVersion) (*customResourceStrategy, error) {
	names := crd.Spec.Names
	gv := schema.GroupVersion{Group: crd.Spec.Group, Version: v.Name}
	kind := gv.WithKind(names.Kind)
	namespaced := crd.Spec.Scope == apiextensionsv1.NamespaceScoped
	listKind := names.ListKind
	if listKind == "" {
		listKind = names.Kind + "List"
	}
	singular := names.Singular
	if singular == "" {
		singular = strings.ToLower(names.Kind)
	}
	info := ResourceInfo{
		GVR: gv.WithResource(names.Plural), Kind: names.Kind, ListKind: listKind, Singular: singular,
		Namespaced: namespaced, Verbs: allVerbs, ShortNames: names.ShortNames, Categories: names.Categories,
	}

	validation, err := apihelpers.GetSchemaForVersion(crd, v.Name)
	if err != nil {
		return nil, err
	}
	var internalSchema *apiextensions.JSONSchemaProps
	if validation != nil {
		internal := &apiextensions.CustomResourceValidation{}
		if err := apiextensionsv1.Convert_v1_CustomResourceValidation_To_apiextensions_CustomResourceValidation(validation, internal, nil); err != nil {
			return nil, err
		}
		internalSchema = internal.OpenAPIV3Schema
	}
	var structural *structuralschema.Structural
	if internalSchema != nil {
		if structural, err = structuralschema.NewStructural(internalSchema); err != nil {
			return nil, fmt.Errorf("the schema is not structural: %w", err)
		}
		// Defaults are applied from a copy whose defaults were pruned, as upstream serves them.
		structural = structural.DeepCopy()
		if err := structuraldefaulting.PruneDefaults(structural); err != nil {
			return nil, err
		}
	}
	validator, _, err := apiservervalidation.NewSchemaValidator(internalSchema)
	if err != nil {
		return nil, err
	}

	subresources, err := apihelpers.GetSubresourcesForVersion(crd, v.Name)
	if err != nil {
		return nil, err
	}
	var statusSpec *apiextensions.CustomResourceSubresourceStatus
	var statusValidator apiservervalidation.SchemaValidator
	var scaleSpec *apiextensions.CustomResourceSubresourceScale
	if subresources != nil && subresources.Status != nil {
		info.Subresources = append(info.Subresources, "status")
		statusSpec = &apiextensions.CustomResourceSubresourceStatus{}
		if internalSchema != nil {
			if statusSchema, ok := internalSchema.Properties["status"]; ok {
				if statusValidator, _, err = apiservervalidation.NewSchemaValidator(&statusSchema); err != nil {
					return nil, err
				}
			}
		}
	}
	var scale *Scale
	if subresources != nil && subresources.Scale != nil {
		info.Subresources = append(info.Subresources, "scale")
		scale = customResourceScale(subresources.Scale)
		scaleSpec = &apiextensions.CustomResourceSubresourceScale{}
		if err := apiextensionsv1.Convert_v1_CustomResourceSubresourceScale_To_apiextensions_CustomResourceSubresourceScale(subresources.Scale, scaleSpec, nil); err != nil {
			return nil, err
		}
	}

	upstream := customresource.NewStrategy(unstructuredTyper{}, namespaced, kind, validator, statusValidator, structural, statusSpec, scaleSpec, v.SelectableFields)
	s := &customResourceStrategy{
		RESTCreateStrategy: upstream,
		RESTUpdateStrategy: upstream,
		info:               info,
		structural:         structural,
		preserve:           crd.Spec.PreserveUnknownFields,
		attrs: func(obj runtime.Object) (fields.Set, error) {
			_, f, err := upstream.GetAttrs(obj)
			return f, err
		},
		selectable: map[string]bool{"metadata.name": true},
		scale:      scale,
	}
	if namespaced {
		s.selectable["metadata.namespace"] = true
	}
	for _, f := range v.SelectableFields {
		s.selectable[strings.TrimPrefix(f.JSONPath, ".")] = true
	}
	if statusSpec != nil {
		s.status = customresource.NewStatusStrategy(upstream)
	}
	s.openAPIV3 = sync.OnceValues(func() (*spec3.OpenAPI, error) {
		return builder.BuildOpenAPIV3(crd, v.Name, builder.Options{V2: false})
	})
	s.openAPIV2 = sync.OnceValues(func() (*spec.Swagger, error) {
		return builder.BuildOpenAPIV2(crd, v.Name, builder.Options{V2: true})
	})
	if s.printer, err = customResourcePrinter(crd, v); err != nil {
		return nil, err
	}
	return s, nil
}

// unstructuredTyper names a custom resource's kind from the object itself: there is no Go type.
type unstructuredTyper struct{}

func (unstructuredTyper) ObjectKinds(obj runtime.Object) ([]schema.GroupVersionKind, bool, error) {
	gvk := obj.GetObjectKind().GroupVersionKind()
	if gvk.Kind == "" {
		return nil, false, fmt.Errorf("object has no kind")
	}
	return []schema.GroupVersionKind{gvk}, false, nil
}

func (unstructuredTyper) Recognizes(schema.GroupVersionKind) bool { return true }

// customResourcePrinter renders additionalPrinterColumns with apiextensions-apiserver's table
// convertor (Name and Age first, as upstream; Name only when the CRD lists no columns).
func customResourcePrinter(crd *apiextensionsv1.CustomResourceDefinition, v apiextensionsv1.CustomResourceDefinitionVersion) (Printer, error) {
	columns := v.AdditionalPrinterColumns
	if len(columns) == 0 {
		columns = []apiextensionsv1.CustomResourceColumnDefinition{{Name: "Age", Type: "date", JSONPath: ".metadata.creationTimestamp"}}
	}
	convertor, err := tableconvertor.New(columns)
	if err != nil {
		return Printer{}, fmt.Errorf("additionalPrinterColumns: %w", err)
	}
	empty, err := convertor.ConvertToTable(context.Background(), &unstructured.UnstructuredList{}, nil)
	if err != nil {
		return Printer{}, err
	}
	return Printer{
		Columns: empty.ColumnDefinitions,
		Cells: func(obj runtime.Object) []any {
			t, err := convertor.ConvertToTable(context.Background(), obj, nil)
			if err != nil || len(t.Rows) != 1 {
				return make([]any, len(empty.ColumnDefinitions))
			}
			return t.Rows[0].Cells
		},
	}, nil
}

func (s *customResourceStrategy) Info() ResourceInfo                      { return s.info }
func (s *customResourceStrategy) StatusStrategy() rest.RESTUpdateStrategy { return s.status }
func (s *customResourceStrategy) Printer() Printer                        { return s.printer }

func (s *customResourceStrategy) Scale() *Scale { return s.scale }

// customResourceScale maps the Scale view onto the paths a CRD's scale subresource names, as
// upstream: desired replicas from specReplicasPath, current from statusReplicasPath (0 when
// unset), the selector string from labelSelectorPath if given.
func customResourceScale(spec *apiextensionsv1.CustomResourceSubresourceScale) *Scale {
	path := func(p string) []string { return strings.Split(strings.TrimPrefix(p, "."), ".") }
	specPath, statusPath := path(spec.SpecReplicasPath), path(spec.StatusReplicasPath)
	var selectorPath []string
	if spec.LabelSelectorPath != nil {
		selectorPath = path(*spec.LabelSelectorPath)
	}
	return &Scale{
		Read: func(obj runtime.Object) (int32, int32, string) {
			u := obj.(*unstructured.Unstructured).Object
			desired, _, _ := unstructured.NestedInt64(u, specPath...)
			current, _, _ := unstructured.NestedInt64(u, statusPath...)
			var selector string
			if selectorPath != nil {
				selector, _, _ = unstructured.NestedString(u, selectorPath...)
			}
			return int32(desired), int32(current), selector
		},
		SetReplicas: func(obj runtime.Object, n int32) {
			_ = unstructured.SetNestedField(obj.(*unstructured.Unstructured).Object, int64(n), specPath...)
		},
	}
}

// Both halves of the embedded strategies declare these; the create half answers for both.
func (s *customResourceStrategy) NamespaceScoped() bool { return s.info.Namespaced }
func (s *customResourceStrategy) ObjectKinds(obj runtime.Object) ([]schema.GroupVersionKind, bool, error) {
	return s.RESTCreateStrategy.ObjectKinds(obj)
}
func (s *customResourceStrategy) Recognizes(gvk schema.GroupVersionKind) bool {
	return s.RESTCreateStrategy.Recognizes(gvk)
}
func (s *customResourceStrategy) Canonicalize(obj runtime.Object) {
	s.RESTCreateStrategy.Canonicalize(obj)
}

// Default prunes fields the schema does not know and applies the schema's defaults, as
// kube-apiserver does when it decodes a custom resource.
func (s *customResourceStrategy) Default(obj runtime.Object) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok || s.structural == nil {
		return
	}
	if !s.preserve {
		structuralpruning.Prune(u.Object, s.structural, true)
	}
	structuraldefaulting.Default(u.Object, s.structural)
	structuraldefaulting.PruneNonNullableNullsWithoutDefaults(u.Object, s.structural)
}

// UnknownFields lists the paths of fields the schema does not know (pruned by Default), for
// fieldValidation=Strict and Warn.
func (s *customResourceStrategy) UnknownFields(obj runtime.Object) []string {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok || s.structural == nil || s.preserve {
		return nil
	}
	return structuralpruning.PruneWithOptions(u.DeepCopy().Object, s.structural, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true})
}

func (s *customResourceStrategy) FieldLabel(label string) (string, bool) {
	return label, s.selectable[label]
}

func (s *customResourceStrategy) SelectableFields(obj runtime.Object) fields.Set {
	f, err := s.attrs(obj)
	if err != nil {
		m := obj.(metav1.Object)
		return metaFields(m, s.info.Namespaced)
	}
	return f
}

// OpenAPIV3 is the version's OpenAPI v3 document, as kube-apiserver publishes it under
// /openapi/v3/apis/<group>/<version>.
func (s *customResourceStrategy) OpenAPIV3() (*spec3.OpenAPI, error) { return s.openAPIV3() }

// OpenAPIV2 is the version's part of the OpenAPI v2 document.
func (s *customResourceStrategy) OpenAPIV2() (*spec.Swagger, error) { return s.openAPIV2() }

// CustomResourceTypeConverter is the structured-merge-diff type converter of crd's kind, built as
// kube-apiserver builds it for server-side apply: from the OpenAPI v3 schemas of every version
// (list types and map keys as the schema declares them).
func CustomResourceTypeConverter(crd *apiextensionsv1.CustomResourceDefinition) (managedfields.TypeConverter, error) {
	var specs []*spec3.OpenAPI
	for _, v := range crd.Spec.Versions {
		doc, err := builder.BuildOpenAPIV3(crd, v.Name, builder.Options{})
		if err != nil {
			return nil, err
		}
		specs = append(specs, doc)
	}
	merged, err := builder.MergeSpecsV3(specs...)
	if err != nil {
		return nil, err
	}
	return managedfields.NewTypeConverter(merged.Components.Schemas, crd.Spec.PreserveUnknownFields)
}
