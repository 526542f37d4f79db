package simulate_test

import (
	"context"
	"sort"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// revisionsOf are the ControllerRevisions a set controls, by revision number.
func revisionsOf(g Gomega, e *env, owner types.UID) []appsv1.ControllerRevision {
	list, err := e.cs.AppsV1().ControllerRevisions("default").List(context.Background(), metav1.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	var out []appsv1.ControllerRevision
	for _, r := range list.Items {
		if ref := metav1.GetControllerOf(&r); ref != nil && ref.UID == owner {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Revision < out[j].Revision })
	return out
}

// podImagesAndHashes are the images and controller-revision-hash labels of the live pods
// labelled app=<app>.
func podImagesAndHashes(g Gomega, e *env, app string) (images, hashes map[string]bool) {
	pods, err := e.cs.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{LabelSelector: "app=" + app})
	g.Expect(err).NotTo(HaveOccurred())
	images, hashes = map[string]bool{}, map[string]bool{}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			images[p.Spec.Containers[0].Image] = true
			hashes[p.Labels[appsv1.ControllerRevisionHashLabelKey]] = true
		}
	}
	return images, hashes
}

// rolloutHistory checks that `kubectl rollout history` lists the revisions want, in order.
func rolloutHistory(g Gomega, e *env, target string, want ...string) {
	out := e.kubectl(true, "", "rollout", "history", target)
	var got []string
	for _, line := range strings.Split(out, "\n")[2:] {
		if f := strings.Fields(line); len(f) > 0 {
			got = append(got, f[0])
		}
	}
	g.Expect(got).To(Equal(want), out)
}

// TestDaemonSetControllerRevisions: a DaemonSet records each template in a ControllerRevision
// <name>-<hash> (the hash its pods' controller-revision-hash label carries, the template's
// labels, the patch that restores it); `kubectl rollout history` lists them, `kubectl rollout
// undo` rolls back (the old revision becomes the newest), and history beyond
// revisionHistoryLimit goes.
func TestDaemonSetControllerRevisions(t *testing.T) {
	g := NewWithT(t)
	e := newWorkerEnv(t)
	e.addNode("worker-1", "10.0.0.21", false)
	ctx := context.Background()
	e.kubectl(true, `apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: agent
spec:
  revisionHistoryLimit: 1
  selector:
    matchLabels: {app: agent}
  template:
    metadata:
      labels: {app: agent}
    spec:
      containers:
      - name: agent
        image: agent:1
`, "apply", "-f", "-")
	e.kubectl(true, "", "rollout", "status", "ds/agent", "--timeout=60s")
	ds, err := e.cs.AppsV1().DaemonSets("default").Get(ctx, "agent", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	revs := revisionsOf(g, e, ds.UID)
	g.Expect(revs).To(HaveLen(1))
	images, hashes := podImagesAndHashes(g, e, "agent")
	g.Expect(hashes).To(HaveLen(1))
	for h := range hashes {
		g.Expect(revs[0].Name).To(Equal("agent-" + h))
		g.Expect(revs[0].Labels).To(HaveKeyWithValue(appsv1.ControllerRevisionHashLabelKey, h))
	}
	g.Expect(revs[0].Labels).To(HaveKeyWithValue("app", "agent"))
	g.Expect(revs[0].Revision).To(BeEquivalentTo(1))
	g.Expect(string(revs[0].Data.Raw)).To(ContainSubstring(`"$patch":"replace"`))
	g.Expect(images).To(HaveKey("agent:1"))
	first := revs[0].Name

	e.kubectl(true, "", "set", "image", "ds/agent", "agent=agent:2")
	e.kubectl(true, "", "rollout", "status", "ds/agent", "--timeout=60s")
	rolloutHistory(g, e, "ds/agent", "1", "2")
	e.kubectl(true, "", "rollout", "undo", "ds/agent")
	e.kubectl(true, "", "rollout", "status", "ds/agent", "--timeout=60s")
	g.Eventually(func(g Gomega) {
		images, hashes := podImagesAndHashes(g, e, "agent")
		g.Expect(images).To(Equal(map[string]bool{"agent:1": true}))
		g.Expect(hashes).To(Equal(map[string]bool{strings.TrimPrefix(first, "agent-"): true}), "the first revision's pods again")
	}, 20*time.Second, 100*time.Millisecond).Should(Succeed())
	revs = revisionsOf(g, e, ds.UID)
	g.Expect(revs).To(HaveLen(2))
	g.Expect(revs[1].Name).To(Equal(first), "the rolled-back-to revision is the newest")
	g.Expect(revs[1].Revision).To(BeEquivalentTo(3))
	rolloutHistory(g, e, "ds/agent", "2", "3")

	// A third template: one old revision is kept (revisionHistoryLimit 1), the oldest goes.
	e.kubectl(true, "", "set", "image", "ds/agent", "agent=agent:3")
	e.kubectl(true, "", "rollout", "status", "ds/agent", "--timeout=60s")
	g.Eventually(func(g Gomega) {
		revs := revisionsOf(g, e, ds.UID)
		g.Expect(revs).To(HaveLen(2))
		g.Expect(revs[0].Name).To(Equal(first))
		g.Expect(revs[1].Revision).To(BeEquivalentTo(4))
	}, 20*time.Second, 100*time.Millisecond).Should(Succeed())
}

// TestStatefulSetControllerRevisions: a StatefulSet's currentRevision and updateRevision name
// its ControllerRevisions, which its pods' controller-revision-hash labels carry; `kubectl
// rollout history` lists them and `kubectl rollout undo` rolls back.
func TestStatefulSetControllerRevisions(t *testing.T) {
	g := NewWithT(t)
	e := newWorkerEnv(t)
	ctx := context.Background()
	e.kubectl(true, statefulSetManifest, "apply", "-f", "-")
	e.kubectl(true, "", "rollout", "status", "statefulset/db", "--timeout=60s")
	set, err := e.cs.AppsV1().StatefulSets("default").Get(ctx, "db", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	revs := revisionsOf(g, e, set.UID)
	g.Expect(revs).To(HaveLen(1))
	first := revs[0].Name
	g.Expect(set.Status.CurrentRevision).To(Equal(first))
	g.Expect(set.Status.UpdateRevision).To(Equal(first))
	g.Expect(first).To(Equal("db-" + revs[0].Labels[appsv1.ControllerRevisionHashLabelKey]))
	_, hashes := podImagesAndHashes(g, e, "db")
	g.Expect(hashes).To(Equal(map[string]bool{first: true}))

	e.kubectl(true, "", "set", "image", "statefulset/db", "db=postgres:18")
	e.kubectl(true, "", "rollout", "status", "statefulset/db", "--timeout=60s")
	rolloutHistory(g, e, "statefulset/db", "1", "2")
	g.Eventually(func(g Gomega) {
		set, err := e.cs.AppsV1().StatefulSets("default").Get(ctx, "db", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		revs := revisionsOf(g, e, set.UID)
		g.Expect(revs).To(HaveLen(2))
		g.Expect(set.Status.UpdateRevision).To(Equal(revs[1].Name))
		g.Expect(set.Status.CurrentRevision).To(Equal(revs[1].Name))
		_, hashes := podImagesAndHashes(g, e, "db")
		g.Expect(hashes).To(Equal(map[string]bool{revs[1].Name: true}))
	}, 20*time.Second, 100*time.Millisecond).Should(Succeed())

	e.kubectl(true, "", "rollout", "undo", "statefulset/db")
	e.kubectl(true, "", "rollout", "status", "statefulset/db", "--timeout=60s")
	g.Eventually(func(g Gomega) {
		set, err := e.cs.AppsV1().StatefulSets("default").Get(ctx, "db", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(set.Status.UpdateRevision).To(Equal(first), "rolled back to the first revision")
		images, hashes := podImagesAndHashes(g, e, "db")
		g.Expect(images).To(Equal(map[string]bool{"postgres:17": true}))
		g.Expect(hashes).To(Equal(map[string]bool{first: true}))
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
	rolloutHistory(g, e, "statefulset/db", "2", "3")
}
