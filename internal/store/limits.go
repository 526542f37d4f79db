package store

import (
	"fmt"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
