package store

import (
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/testenv"
)

// What one fuzz input may cost: every simulated cluster shares the process, so a request that
// allocates without bound or holds the cluster lock for long hurts them all. Generous enough for
// a loaded 2-core machine with the race detector; orders of magnitude below what an unbounded
// patch reaches (a copy-doubling JSON patch of 2 KB allocates gigabytes without the copy limit).
const (
	fuzzAllocBudget = 64 << 20
	fuzzLockBudget  = time.Second
)

// checkBudget runs one fuzz input and fails it when it cost more than the budget.
func checkBudget(t *testing.T, input func()) {
	t.Helper()
	TimeLockHolds(true)
	defer TimeLockHolds(false)
	LongestLockHold()
	if n := testenv.Allocated(input); n > fuzzAllocBudget {
		t.Fatalf("the input allocated %d MiB, over the budget of %d MiB", n>>20, fuzzAllocBudget>>20)
	}
	if d := LongestLockHold(); d > fuzzLockBudget {
		t.Fatalf("the input held a cluster lock for %v, over the budget of %v", d, fuzzLockBudget)
	}
}

// copyDoublingPatch is a JSON patch whose every copy doubles the object's annotations: 2 KB of
// request, 2 KB × 2^copies of result.
func copyDoublingPatch(copies int) string {
	var b strings.Builder
	fmt.Fprintf(&b, `[{"op":"add","path":"/metadata/annotations","value":{"a":"%s"}}`, strings.Repeat("x", 2000))
	for i := range copies {
		fmt.Fprintf(&b, `,{"op":"copy","from":"/metadata/annotations","path":"/metadata/annotations/c%d"}`, i)
	}
	b.WriteString("]")
	return b.String()
}

// FuzzPatch feeds arbitrary bodies to every patch type: the store must answer with a Kubernetes
// status error or a result, never panic, within the fuzz budget of memory and lock time. Run with
// `go test -fuzz FuzzPatch ./internal/store/`.
func FuzzPatch(f *testing.F) {
	seeds := []string{
		`{"metadata":{"labels":{"a":"b"}}}`, `[{"op":"add","path":"/metadata/labels/x","value":"y"}]`,
		`{"spec":{"containers":[{"name":"c","$patch":"delete"}]}}`, `null`, `"str"`, `[]`, `{"spec":null}`,
		"apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, image: x}]}\n",
		`{"metadata":{"name":"other"}}`, `{"metadata":{"finalizers":["a/b"]}}`, `{"status":{"phase":1}}`,
		copyDoublingPatch(20),
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
		var err error
		checkBudget(t, func() {
			_, err = c.Patch(podsGVR, "default", "p", patchTypes[pt%len(patchTypes)], body, PatchOptions{FieldManager: "fuzz", Force: pt%len(patchTypes) == 3})
		})
		if err != nil {
			if _, ok := err.(apierrors.APIStatus); !ok {
				t.Fatalf("error without a status: %T %v", err, err)
			}
		}
	})
}
