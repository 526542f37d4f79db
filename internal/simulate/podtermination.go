package simulate

import (
	"context"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// podTermination is the kubelets' part of pod deletion (the kubelet's status manager): deleting
// a pod that runs on a node sets its deletionTimestamp to now + the grace period and
// deletionGracePeriodSeconds (the pod strategy's CheckGracefulDelete, package kinds), and the
// pod stays Terminating until its kubelet, once the containers have stopped, deletes it with a
// grace period of 0 and its UID as precondition: it is removed, or kept with
// deletionGracePeriodSeconds 0 while finalizers remain. The simulated kubelets stop a pod's
// containers after Options.PodStopDelay, or after the grace period when that is shorter; a
// shorter grace period given to a terminating pod stops it that much sooner. It runs in every
// cluster, workloads or not, and always answers, also for a pod on a NotReady node. It keeps
// only the terminating pods' deadlines.
type podTermination struct {
	c   *cluster
	idx int

	mu      sync.Mutex
	pending map[string]podStop // by pod key
}

// podStop is when a terminating pod's kubelet confirms it.
type podStop struct {
	uid types.UID
	at  time.Time
}

func newPodTermination(c *cluster, idx int) *podTermination {
	return &podTermination{c: c, idx: idx, pending: map[string]podStop{}}
}

func (t *podTermination) uncached() {}

func (t *podTermination) resources() []schema.GroupResource {
	return []schema.GroupResource{podsGR}
}

// observe arms the kubelet's confirmation of a pod that has just begun terminating (or was
// terminating when the process stopped) or whose grace period got shorter.
func (t *podTermination) observe(ch store.Change) {
	key := changedKey(ch)
	if ch.New == nil {
		t.mu.Lock()
		delete(t.pending, key)
		t.mu.Unlock()
		return
	}
	grace := ch.New.GetDeletionGracePeriodSeconds()
	if ch.New.GetDeletionTimestamp() == nil || grace == nil || *grace == 0 {
		return
	}
	if ch.Old != nil && ch.Old.GetDeletionGracePeriodSeconds() != nil && *ch.Old.GetDeletionGracePeriodSeconds() <= *grace {
		return
	}
	delay := min(t.c.sim.opts.PodStopDelay, time.Duration(*grace)*time.Second)
	at := time.Now().Add(delay)
	t.mu.Lock()
	if p, ok := t.pending[key]; ok && p.uid == ch.New.GetUID() && !p.at.After(at) {
		t.mu.Unlock()
		return
	}
	t.pending[key] = podStop{uid: ch.New.GetUID(), at: at}
	t.mu.Unlock()
	t.c.after(delay, t.idx, key)
}

// sync confirms the pod's stop once its time has come.
func (t *podTermination) sync(ctx context.Context, key string) error {
	t.mu.Lock()
	p, ok := t.pending[key]
	if !ok {
		t.mu.Unlock()
		return nil
	}
	if wait := time.Until(p.at); wait > 0 {
		t.mu.Unlock()
		t.c.after(wait, t.idx, key) // a timer armed for a longer grace period, shortened since
		return nil
	}
	delete(t.pending, key)
	t.mu.Unlock()
	namespace, name, _ := strings.Cut(key, "/")
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	err := t.c.client.Delete(ctx, pod, client.GracePeriodSeconds(0), client.Preconditions{UID: &p.uid})
	if err == nil || apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // confirmed; or gone, or replaced by another pod of the name
	}
	t.mu.Lock()
	if _, again := t.pending[key]; !again {
		t.pending[key] = p
	}
	t.mu.Unlock()
	return err
}
