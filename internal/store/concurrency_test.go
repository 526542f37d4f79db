package store

import (
	"fmt"
	"sync"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
)

// TestConcurrentWritersAndWatchers runs many writers and watchers at once (meant for -race): every
// watcher that keeps up sees, per object, the exact sequence of changes in RV order.
func TestConcurrentWritersAndWatchers(t *testing.T) {
	g := NewWithT(t)
	c := newTestCluster(t, ClusterOptions{EventHistory: 1 << 16})
	const writers, perWriter, watchers = 8, 50, 8
	start := currentRV(t, c)

	type seen struct {
		events map[string][]watch.EventType
	}
	results := make([]seen, watchers)
	var wg sync.WaitGroup
	ws := make([]watch.Interface, watchers)
	for i := range ws {
		ws[i] = startWatch(t, c, configMapsGVR, "", ListOptions{ResourceVersion: start})
	}
	// Each writer creates, patches and deletes its own objects; it also reads and lists.
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < perWriter; i++ {
				name := fmt.Sprintf("w%d-%d", w, i)
				if _, err := c.Create(configMapsGVR, "default", configMap("default", name, nil), CreateOptions{FieldManager: "w"}); err != nil {
					t.Error(err)
					return
				}
				if _, err := c.Patch(configMapsGVR, "default", name, types.MergePatchType, []byte(`{"data":{"x":"1"}}`), PatchOptions{}); err != nil {
					t.Error(err)
					return
				}
				if _, err := c.Get(configMapsGVR, "default", name); err != nil {
					t.Error(err)
				}
				if _, err := c.List(configMapsGVR, "default", ListOptions{Limit: 5}); err != nil {
					t.Error(err)
				}
				if _, err := c.Delete(configMapsGVR, "default", name, DeleteOptions{}); err != nil {
					t.Error(err)
				}
			}
		}(w)
	}
	// Contending updates on one shared object: conflicts are reported, never lost.
	mustCreate(t, c, configMap("default", "shared", nil))
	var conflicts, successes sync.Map
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				cur, err := c.Get(configMapsGVR, "default", "shared")
				if err != nil {
					t.Error(err)
					return
				}
				cm := cur.(*corev1.ConfigMap)
				if cm.Data == nil {
					cm.Data = map[string]string{}
				}
				cm.Data[fmt.Sprintf("w%d-%d", w, i)] = "x"
				if _, err := c.Update(configMapsGVR, "default", cm, UpdateOptions{}); apierrors.IsConflict(err) {
					conflicts.Store(fmt.Sprintf("%d-%d", w, i), true)
				} else if err != nil {
					t.Error(err)
				} else {
					successes.Store(fmt.Sprintf("w%d-%d", w, i), true)
				}
			}
		}(w)
	}

	var readers sync.WaitGroup
	total := writers * perWriter * 3
	for i := range ws {
		readers.Add(1)
		go func(i int) {
			defer readers.Done()
			r := seen{events: map[string][]watch.EventType{}}
			n := 0
			for ev := range ws[i].ResultChan() {
				name := ev.Object.(*corev1.ConfigMap).Name
				if name == "shared" {
					continue
				}
				r.events[name] = append(r.events[name], ev.Type)
				if n++; n == total {
					break
				}
			}
			results[i] = r
		}(i)
	}
	wg.Wait()
	readers.Wait()

	want := []watch.EventType{watch.Added, watch.Modified, watch.Deleted}
	for i, r := range results {
		g.Expect(r.events).To(HaveLen(writers*perWriter), "watcher %d", i)
		for name, evs := range r.events {
			g.Expect(evs).To(Equal(want), "watcher %d object %s", i, name)
		}
	}
	shared := mustGet(t, c, configMap("default", "shared", nil)).(*corev1.ConfigMap)
	n := 0
	successes.Range(func(k, _ any) bool {
		g.Expect(shared.Data).To(HaveKey(k.(string)), "a successful update is never lost")
		n++
		return true
	})
	g.Expect(shared.Data).To(HaveLen(n))
}

// TestConcurrentPatchesLoseNothing: patches are computed outside the cluster lock and committed
// only onto the version they were computed from, so concurrent merge patches of one object each
// land (a patch that keeps losing the race answers 409, as kube-apiserver's does after 5 tries).
func TestConcurrentPatchesLoseNothing(t *testing.T) {
	g := NewWithT(t)
	c := newTestCluster(t)
	mustCreate(t, c, configMap("default", "shared", nil))
	const writers, each = 8, 25
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				patch := fmt.Sprintf(`{"metadata":{"labels":{"w%d-%d":"x"}}}`, w, i)
				for {
					_, err := c.Patch(configMapsGVR, "default", "shared", types.MergePatchType, []byte(patch), PatchOptions{FieldManager: "t"})
					if apierrors.IsConflict(err) {
						continue
					}
					if err != nil {
						t.Error(err)
					}
					break
				}
			}
		}()
	}
	wg.Wait()
	got := mustGet(t, c, configMap("default", "shared", nil))
	g.Expect(got.GetLabels()).To(HaveLen(writers * each))
}
