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
// shorter grace period given to a terminating pod stops it that much sooner. A pod that
// finalizers keep (a Job's until its controller has counted it) first gets the terminal phase
// the kubelet reports before that delete: Failed, its containers terminated with exit code 143
// (they ended on SIGTERM), or 137 when the grace period ran out before Options.PodStopDelay
// (SIGKILL); the others are gone at once, so they skip that write. It runs in every cluster,
// workloads or not, and always answers, also for a pod on a NotReady node. It keeps only the
// terminating pods' deadlines.
type podTermination struct {
	c   *cluster
	idx int

	mu      sync.Mutex
	pending map[string]podStop // by pod key
}

// podStop is when a terminating pod's kubelet confirms it; held: the pod had finalizers (none
// can be added once it is terminating), killed: its grace period ends before PodStopDelay.
type podStop struct {
	uid          types.UID
	at           time.Time
	held, killed bool
}

// Exit codes of containers the kubelet stops: SIGTERM handled, or SIGKILL at the grace period's end.
const (
	exitCodeTerminated = 128 + 15
	exitCodeKilled     = 128 + 9
)

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
	killed := delay < t.c.sim.opts.PodStopDelay
	at := time.Now().Add(delay)
	t.mu.Lock()
	if p, ok := t.pending[key]; ok && p.uid == ch.New.GetUID() && !p.at.After(at) {
		t.mu.Unlock()
		return
	}
	t.pending[key] = podStop{uid: ch.New.GetUID(), at: at, held: len(ch.New.GetFinalizers()) > 0, killed: killed}
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
	var err error
	if p.held {
		err = t.terminalPhase(ctx, pod, p)
	}
	if err == nil {
		err = t.c.client.Delete(ctx, pod, client.GracePeriodSeconds(0), client.Preconditions{UID: &p.uid})
	}
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

// terminalPhase reports a held pod that has not finished Failed, its containers terminated
// with the exit code of their stop, as the kubelet's status manager does before it deletes it.
func (t *podTermination) terminalPhase(ctx context.Context, pod *corev1.Pod, p podStop) error {
	if err := t.c.client.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil || pod.UID != p.uid {
		return client.IgnoreNotFound(err) // gone, or replaced: the delete's precondition tells
	}
	if len(pod.Finalizers) == 0 || isTerminal(pod) {
		return nil
	}
	code := int32(exitCodeTerminated)
	if p.killed {
		code = exitCodeKilled
	}
	failPod(pod, time.Now(), code)
	return t.c.client.Status().Update(ctx, pod)
}
