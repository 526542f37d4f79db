package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/storage"
)

// countingJSON encodes with encoding/json and counts the calls, to tell cache hits from misses.
type countingJSON struct{ calls int }

func (e *countingJSON) encode(obj runtime.Object, w *bytes.Buffer) error {
	e.calls++
	return json.NewEncoder(w).Encode(obj)
}

func TestGetEncodedCachesUntilTheObjectChanges(t *testing.T) {
	g := NewWithT(t)
	c := newTestCluster(t)
	mustCreate(t, c, configMap("default", "cm", map[string]string{"k": "v1"}))
	enc := &countingJSON{}

	first, err := c.GetEncoded(configMapsGVR, "default", "cm", "json", enc.encode)
	g.Expect(err).NotTo(HaveOccurred())
	again, err := c.GetEncoded(configMapsGVR, "default", "cm", "json", enc.encode)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(enc.calls).To(Equal(1), "an unchanged object is encoded once")
	g.Expect(again).To(Equal(first))
	g.Expect(string(first)).To(ContainSubstring(`"kind":"ConfigMap"`), "the stored object carries its TypeMeta")

	// Another format of the same version is encoded separately.
	other := &countingJSON{}
	_, err = c.GetEncoded(configMapsGVR, "default", "cm", "other", other.encode)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(other.calls).To(Equal(1))

	// An update makes the next read encode the new version.
	cur := mustGet(t, c, configMap("default", "cm", nil)).(*corev1.ConfigMap)
	cur.Data["k"] = "v2"
	_, err = c.Update(configMapsGVR, "default", cur, UpdateOptions{FieldManager: "test"})
	g.Expect(err).NotTo(HaveOccurred())
	updated, err := c.GetEncoded(configMapsGVR, "default", "cm", "json", enc.encode)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(enc.calls).To(Equal(2))
	g.Expect(string(updated)).To(ContainSubstring(`"k":"v2"`))

	// A delete drops the encodings with the object.
	_, err = c.Delete(configMapsGVR, "default", "cm", DeleteOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = c.GetEncoded(configMapsGVR, "default", "cm", "json", enc.encode)
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "got %v", err)
	c.mu.RLock()
	objects, bytes := c.objs.CachedEncodings()
	c.mu.RUnlock()
	g.Expect(objects).To(BeZero())
	g.Expect(bytes).To(BeZero())
}

func TestGetEncodedStaysBounded(t *testing.T) {
	g := NewWithT(t)
	c := newTestCluster(t)
	big := strings.Repeat("x", storage.MaxEncodedEntryBytes/2)
	for i := range 20 {
		mustCreate(t, c, configMap("default", fmt.Sprintf("cm-%d", i), map[string]string{"k": big}))
	}
	enc := &countingJSON{}
	for i := range 20 {
		_, err := c.GetEncoded(configMapsGVR, "default", fmt.Sprintf("cm-%d", i), "json", enc.encode)
		g.Expect(err).NotTo(HaveOccurred())
	}
	c.mu.RLock()
	_, bytes := c.objs.CachedEncodings()
	c.mu.RUnlock()
	g.Expect(bytes).To(BeNumerically("<=", storage.MaxEncodedCacheBytes))
	g.Expect(bytes).To(BeNumerically(">", storage.MaxEncodedCacheBytes/2), "the cache is used up to its bound")

	// An encoding larger than an entry may be is returned but not kept.
	huge := strings.Repeat("y", storage.MaxEncodedEntryBytes)
	mustCreate(t, c, configMap("default", "huge", map[string]string{"k": huge}))
	for range 2 {
		data, err := c.GetEncoded(configMapsGVR, "default", "huge", "json", enc.encode)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(len(data)).To(BeNumerically(">", storage.MaxEncodedEntryBytes))
	}
	calls := enc.calls
	_, _ = c.GetEncoded(configMapsGVR, "default", "huge", "json", enc.encode)
	g.Expect(enc.calls).To(Equal(calls + 1))
}

func TestGetEncodedErrors(t *testing.T) {
	g := NewWithT(t)
	c := newTestCluster(t)
	mustCreate(t, c, configMap("default", "cm", nil))
	failing := func(runtime.Object, *bytes.Buffer) error { return fmt.Errorf("boom") }
	_, err := c.GetEncoded(configMapsGVR, "default", "cm", "json", failing)
	g.Expect(err).To(MatchError("boom"))
	enc := &countingJSON{}
	_, err = c.GetEncoded(configMapsGVR, "default", "cm", "json", enc.encode)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(enc.calls).To(Equal(1), "a failed encoding is not cached")
	_, err = c.GetEncoded(configMapsGVR, "", "cm", "json", enc.encode)
	g.Expect(apierrors.IsBadRequest(err)).To(BeTrue(), "namespace required: %v", err)
}

// TestGetEncodedConcurrentWithWrites reads encodings while the object changes (run with -race):
// after the writes, readers see the last version, never a cached older one.
func TestGetEncodedConcurrentWithWrites(t *testing.T) {
	g := NewWithT(t)
	c := newTestCluster(t)
	mustCreate(t, c, configMap("default", "cm", map[string]string{"n": "0"}))
	encode := func(obj runtime.Object, w *bytes.Buffer) error { return json.NewEncoder(w).Encode(obj) }
	const writes = 50
	done := make(chan struct{})
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			for {
				select {
				case <-done:
					errs <- nil
					return
				default:
				}
				if _, err := c.GetEncoded(configMapsGVR, "default", "cm", "json", encode); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for i := 1; i <= writes; i++ {
		cur := mustGet(t, c, configMap("default", "cm", nil)).(*corev1.ConfigMap)
		cur.Data["n"] = fmt.Sprint(i)
		_, err := c.Update(configMapsGVR, "default", cur, UpdateOptions{FieldManager: "test"})
		g.Expect(err).NotTo(HaveOccurred())
	}
	close(done)
	for range 4 {
		g.Expect(<-errs).NotTo(HaveOccurred())
	}
	data, err := c.GetEncoded(configMapsGVR, "default", "cm", "json", encode)
	g.Expect(err).NotTo(HaveOccurred())
	var got corev1.ConfigMap
	g.Expect(json.Unmarshal(data, &got)).To(Succeed())
	g.Expect(got.Data).To(HaveKeyWithValue("n", fmt.Sprint(writes)))
}
