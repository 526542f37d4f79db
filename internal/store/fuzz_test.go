package store

import (
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
)

// FuzzPatch feeds arbitrary bodies to every patch type: the store must answer with a Kubernetes
// status error or a result, never panic. Run with `go test -fuzz FuzzPatch ./internal/store/`.
func FuzzPatch(f *testing.F) {
	seeds := []string{
		`{"metadata":{"labels":{"a":"b"}}}`, `[{"op":"add","path":"/metadata/labels/x","value":"y"}]`,
		`{"spec":{"containers":[{"name":"c","$patch":"delete"}]}}`, `null`, `"str"`, `[]`, `{"spec":null}`,
		"apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, image: x}]}\n",
		`{"metadata":{"name":"other"}}`, `{"metadata":{"finalizers":["a/b"]}}`, `{"status":{"phase":1}}`,
	}
	for _, s := range seeds {
		for pt := 0; pt < 4; pt++ {
			f.Add(pt, []byte(s))
		}
	}
	patchTypes := []types.PatchType{types.JSONPatchType, types.MergePatchType, types.StrategicMergePatchType, types.ApplyYAMLPatchType}
	c := newTestCluster(f)
	mustCreate(f, c, pod("default", "p", map[string]string{"a": "b"}))
	f.Fuzz(func(t *testing.T, pt int, body []byte) {
		if pt < 0 {
			pt = -pt
		}
		_, err := c.Patch(podsGVR, "default", "p", patchTypes[pt%len(patchTypes)], body, PatchOptions{FieldManager: "fuzz", Force: pt%len(patchTypes) == 3})
		if err != nil {
			if _, ok := err.(apierrors.APIStatus); !ok {
				t.Fatalf("error without a status: %T %v", err, err)
			}
		}
	})
}
