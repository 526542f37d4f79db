package store

import (
	"fmt"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The bounds kube-apiserver puts on what one request may make a server hold; every simulated
// cluster shares this process, so each is enforced as upstream does.
const (
	// MaxJSONPatchOperations is the most operations a JSON patch may have (413 above it).
	MaxJSONPatchOperations = 10000
	// MaxJSONPatchCopyBytes bounds how much a JSON patch's copy operations may add up to (422
	// above it), kube-apiserver's default.
	MaxJSONPatchCopyBytes = 3 * 1024 * 1024
)

func init() {
	// The library's own accumulated-copy limit, which kube-apiserver sets the same way.
	jsonpatch.AccumulatedCopySizeLimit = MaxJSONPatchCopyBytes
}

// DecodeJSONPatch decodes a JSON patch (RFC 6902) and refuses more operations than
// kube-apiserver allows, with its status and message.
func DecodeJSONPatch(data []byte) (jsonpatch.Patch, error) {
	p, err := jsonpatch.DecodePatch(data)
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	if len(p) > MaxJSONPatchOperations {
		return nil, apierrors.NewRequestEntityTooLargeError(
			fmt.Sprintf("The allowed maximum operations in a JSON patch is %d, got %d", MaxJSONPatchOperations, len(p)))
	}
	return p, nil
}

// validateKind checks what the kind's upstream validation bounds beyond metadata: the data of
// ConfigMaps and Secrets (keys and total size at most 1 MiB).
func validateKind(obj client.Object) field.ErrorList {
	switch o := obj.(type) {
	case *corev1.ConfigMap:
		return validateConfigMapData(o)
	case *corev1.Secret:
		return validateSecretData(o)
	}
	return nil
}

func validateConfigMapData(cm *corev1.ConfigMap) field.ErrorList {
	var errs field.ErrorList
	total := 0
	for key, value := range cm.Data {
		for _, msg := range validation.IsConfigMapKey(key) {
			errs = append(errs, field.Invalid(field.NewPath("data").Key(key), key, msg))
		}
		if _, dup := cm.BinaryData[key]; dup {
			errs = append(errs, field.Invalid(field.NewPath("data").Key(key), key, "duplicate of key present in binaryData"))
		}
		total += len(value)
	}
	for key, value := range cm.BinaryData {
		for _, msg := range validation.IsConfigMapKey(key) {
			errs = append(errs, field.Invalid(field.NewPath("binaryData").Key(key), key, msg))
		}
		total += len(value)
	}
	if total > corev1.MaxSecretSize {
		// Upstream names no field: the error is about the whole object.
		errs = append(errs, field.TooLong(field.NewPath(""), "", corev1.MaxSecretSize))
	}
	return errs
}

func validateSecretData(s *corev1.Secret) field.ErrorList {
	var errs field.ErrorList
	dataPath := field.NewPath("data")
	total := 0
	for key, value := range s.Data {
		for _, msg := range validation.IsConfigMapKey(key) {
			errs = append(errs, field.Invalid(dataPath.Key(key), key, msg))
		}
		total += len(value)
	}
	if total > corev1.MaxSecretSize {
		errs = append(errs, field.TooLong(dataPath, "", corev1.MaxSecretSize))
	}
	return errs
}
