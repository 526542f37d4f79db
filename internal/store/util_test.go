package store

import (
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

type unstructuredObj = unstructured.Unstructured

func labelsParse(s string) (labels.Selector, error) { return labels.Parse(s) }

type schemaGVR = schema.GroupVersionResource

// metaItems counts the items of a typed list.
func metaItems(list runtime.Object) (int, error) {
	items, err := meta.ExtractList(list)
	return len(items), err
}
