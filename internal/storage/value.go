package storage

import (
	"encoding/json"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kjson "sigs.k8s.io/json"
)

// Values on disk start with their encoding: every built-in kind is protobuf (as kube-apiserver
// stores them in etcd: smaller and several times faster to encode than JSON), anything else JSON.
const (
	encodingProtobuf byte = 'p'
	encodingJSON     byte = 'j'
	// encodingShared: a reference to shared content (shared.go), only in a cluster's bucket.
	encodingShared byte = 's'
)

type protoMessage interface {
	Marshal() ([]byte, error)
	Unmarshal([]byte) error
}

// SizeOf is an object's size as stored: its protobuf encoding for every built-in kind, which
// computes it without allocating, and its JSON encoding for anything else (custom resources).
func SizeOf(obj client.Object) int {
	if s, ok := obj.(interface{ Size() int }); ok {
		return s.Size()
	}
	data, err := json.Marshal(obj)
	if err != nil {
		return 1 << 10
	}
	return len(data)
}

// legacyKey is an object's key on disk as files written before the resources' codes hold it
// (keys.go): "<group>/<resource>/<Key>". Neither a group nor a resource contains a slash.
func legacyKey(gr schema.GroupResource, key string) string {
	return gr.Group + "/" + gr.Resource + "/" + key
}

func parseLegacyKey(k string) (schema.GroupResource, string, bool) {
	group, rest, ok := strings.Cut(k, "/")
	if !ok {
		return schema.GroupResource{}, "", false
	}
	resource, key, ok := strings.Cut(rest, "/")
	return schema.GroupResource{Group: group, Resource: resource}, key, ok && resource != "" && key != ""
}

// encodeValue encodes a stored object for the disk. Stored objects are never mutated, so the
// committer may call it after the owner's lock is released.
func encodeValue(obj client.Object) func() ([]byte, error) {
	return func() ([]byte, error) {
		if m, ok := obj.(protoMessage); ok {
			data, err := m.Marshal()
			if err != nil {
				return nil, err
			}
			return append([]byte{encodingProtobuf}, data...), nil
		}
		data, err := json.Marshal(obj)
		if err != nil {
			return nil, err
		}
		return append([]byte{encodingJSON}, data...), nil
	}
}

// DecodeValue decodes a value written by Put into obj, a new object of the stored kind (its
// TypeMeta is kept: protobuf carries none).
func DecodeValue(value []byte, obj client.Object) error {
	if len(value) == 0 {
		return fmt.Errorf("empty value")
	}
	gvk := obj.GetObjectKind().GroupVersionKind()
	switch value[0] {
	case encodingProtobuf:
		m, ok := obj.(protoMessage)
		if !ok {
			return fmt.Errorf("%T is not a protobuf message", obj)
		}
		if err := m.Unmarshal(value[1:]); err != nil {
			return err
		}
	case encodingJSON:
		if err := kjson.UnmarshalCaseSensitivePreserveInts(value[1:], obj); err != nil {
			return err
		}
	default:
		return fmt.Errorf("unknown encoding %q", value[0])
	}
	if !gvk.Empty() { // an unstructured object reads its kind from the value
		obj.GetObjectKind().SetGroupVersionKind(gvk)
	}
	return nil
}
