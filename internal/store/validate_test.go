package store

import (
	"errors"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// A write's ValidateObject judges the object the write stores: a write that loses a race with
// another write is prepared again from the new object and judged again, and what it judged the
// first time is never stored. The concurrent write is made from inside the first judgment, after
// the write was prepared and before it commits. The judge refuses any object, new or old, owned
// by "mallory".
func TestValidateObjectJudgesTheStoredObject(t *testing.T) {
	for _, tc := range []struct {
		write, concurrentOwner string
		wantErr                bool
		want                   map[string]string
	}{
		{"patch", "mallory", true, map[string]string{"owner": "mallory"}},
		{"patch", "bob", false, map[string]string{"owner": "bob", "v": "1"}},
		{"update", "mallory", true, map[string]string{"owner": "mallory"}},
		{"update", "bob", false, map[string]string{"owner": "alice", "v": "1"}},
	} {
		t.Run(tc.write+"/"+tc.concurrentOwner, func(t *testing.T) {
			g := NewWithT(t)
			c := newTestCluster(t)
			mustCreate(t, c, configMap("default", "cm", map[string]string{"owner": "alice"}))
			var judged []string // old owner -> new owner/v, per judgment
			validate := func(obj, old client.Object) error {
				next, prev := obj.(*corev1.ConfigMap), old.(*corev1.ConfigMap)
				judged = append(judged, prev.Data["owner"]+"->"+next.Data["owner"]+"/"+next.Data["v"])
				if len(judged) == 1 {
					cm := prev.DeepCopy()
					cm.Data["owner"] = tc.concurrentOwner
					if _, err := c.Update(configMapsGVR, "default", cm, UpdateOptions{FieldManager: "other"}); err != nil {
						t.Error(err)
					}
				}
				if next.Data["owner"] == "mallory" || prev.Data["owner"] == "mallory" {
					return errors.New("refused")
				}
				return nil
			}
			var err error
			if tc.write == "patch" {
				_, err = c.PatchObject(configMapsGVR, "default", "cm", types.MergePatchType, []byte(`{"data":{"v":"1"}}`),
					PatchOptions{FieldManager: "test", ValidateObject: validate})
			} else {
				cm := mustGet(t, c, configMap("default", "cm", nil)).(*corev1.ConfigMap)
				cm.ResourceVersion = "" // unconditional: prepared again after the concurrent write
				cm.Data["v"] = "1"
				_, err = c.Update(configMapsGVR, "default", cm, UpdateOptions{FieldManager: "test", ValidateObject: validate})
			}
			if tc.wantErr {
				g.Expect(err).To(MatchError("refused"))
			} else {
				g.Expect(err).NotTo(HaveOccurred())
			}
			g.Expect(judged).To(HaveLen(2), "judged again after the concurrent write")
			g.Expect(judged[0]).To(Equal("alice->alice/1"))
			g.Expect(mustGet(t, c, configMap("default", "cm", nil)).(*corev1.ConfigMap).Data).To(Equal(tc.want))
		})
	}
}
