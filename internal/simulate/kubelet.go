package simulate

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// kubelet is every node's kubelet, as far as pods go: a pod bound to a Ready node starts
// (Pending → Running) PodStartDelay after its binding, or once its PersistentVolumeClaims are
// bound and their volumes attached and in use (kubeletvolumes.go) when that is later, with an
// IP from the node's podCIDR and the container statuses and conditions the kubelet reports; a
// container with a readiness probe
// turns ready after its initialDelaySeconds. While a node is not Ready its pods are not ready
// (kube-controller-manager's node lifecycle controller marks them so); when it is Ready again
// they are. Static pods are the machine controller's (package workload), and a pod's graceful
// deletion is confirmed by podTermination (podtermination.go), which runs with workloads off too.
type kubelet struct {
	c   *cluster
	idx int
}

func newKubelet(c *cluster, idx int) *kubelet { return &kubelet{c: c, idx: idx} }

func (k *kubelet) resources() []schema.GroupResource {
	return []schema.GroupResource{podsGR, nodesGR, pvcsGR}
}

func (k *kubelet) observe(ch store.Change) {
	switch obj := ch.New.(type) {
	case *corev1.Pod:
		if obj.Spec.NodeName == "" || isMirrorPod(obj) || obj.DeletionTimestamp != nil || isTerminal(obj) {
			return
		}
		old, _ := ch.Old.(*corev1.Pod)
		switch {
		case obj.Status.Phase == corev1.PodPending && (old == nil || old.Spec.NodeName == ""):
			k.c.after(k.c.podStartDelay(), k.idx, keyOf(obj))
		case obj.Status.Phase == corev1.PodRunning && old == nil && (!isReady(obj) || isJobPod(obj)):
			k.c.enqueue(k.idx, keyOf(obj)) // restarted: re-arm its readiness or its completion
		}
	case *corev1.Node:
		old, _ := ch.Old.(*corev1.Node)
		if old != nil && nodeReady(old) == nodeReady(obj) {
			if !slices.Equal(old.Status.VolumesAttached, obj.Status.VolumesAttached) || !slices.Equal(old.Status.VolumesInUse, obj.Status.VolumesInUse) {
				// Volumes attached or in use: the pods waiting for them may start.
				for _, p := range k.c.cache.podsOn(obj.Name) {
					if p.Status.Phase == corev1.PodPending && isActive(p) && claimVolumes(p) {
						k.c.enqueue(k.idx, keyOf(p))
					}
				}
			}
			return
		}
		for _, p := range k.c.cache.podsOn(obj.Name) {
			if !isMirrorPod(p) && isActive(p) {
				k.c.enqueue(k.idx, keyOf(p))
			}
		}
	case *corev1.PersistentVolumeClaim:
		// A claim bound: the pods on nodes waiting for it may start.
		if old, _ := ch.Old.(*corev1.PersistentVolumeClaim); obj.Status.Phase == corev1.ClaimBound && (old == nil || old.Status.Phase != corev1.ClaimBound) {
			for _, p := range k.c.cache.podsIn(obj.Namespace) {
				if p.Spec.NodeName != "" && p.Status.Phase == corev1.PodPending && isActive(p) && usesClaim(p, obj.Name) {
					k.c.enqueue(k.idx, keyOf(p))
				}
			}
		}
	}
}

func (k *kubelet) sync(ctx context.Context, key string) error {
	pod, _ := k.c.cache.get(podsGR, key).(*corev1.Pod)
	if pod == nil || pod.Spec.NodeName == "" || isMirrorPod(pod) || !isActive(pod) {
		return nil
	}
	node, _ := k.c.cache.get(nodesGR, pod.Spec.NodeName).(*corev1.Node)
	if node == nil {
		return nil // no kubelet: the pod stays Pending, as upstream
	}
	now := time.Now()
	next := pod.DeepCopy()
	switch pod.Status.Phase {
	case corev1.PodPending:
		if !nodeReady(node) {
			return nil // the kubelet is down; the node's return queues the pod again
		}
		if wait := startsAt(pod, k.c.podStartDelay()).Sub(now); wait > 0 {
			k.c.after(wait, k.idx, key)
			return nil
		}
		if !k.c.volumesMounted(pod, node) {
			return nil // its claims' binding or its node's volumes queue it again
		}
		ip, ok := k.podIP(pod, node)
		if !ok {
			k.c.after(time.Second, k.idx, key) // no podCIDR yet, or it is full
			return nil
		}
		start(next, node, ip, now)
	case corev1.PodRunning:
	default:
		return nil
	}
	if isJobPod(next) {
		// A Job's containers exit once they have run for JobRunTime (see ExitCodeAnnotation).
		if wait := k.runToCompletion(next, now, nodeReady(node)); wait > 0 {
			k.c.after(wait, k.idx, key)
		}
		if isTerminal(next) {
			return k.c.client.Status().Update(ctx, next)
		}
	}
	if nodeReady(node) {
		ready, wait := containersReady(next, now)
		setReadiness(next, ready, metav1.NewTime(now))
		if wait > 0 {
			k.c.after(wait, k.idx, key)
		}
	} else {
		// The node lifecycle controller's MarkPodsNotReady: Ready turns False, nothing else.
		if c := podCondition(next, corev1.PodReady); c != nil && c.Status != corev1.ConditionFalse {
			c.Status, c.LastTransitionTime = corev1.ConditionFalse, metav1.NewTime(now.Truncate(time.Second))
		}
	}
	if equalStatus(pod, next) {
		return nil
	}
	return k.c.client.Status().Update(ctx, next)
}

// isJobPod: a Job's pod, whose containers run to completion.
func isJobPod(p *corev1.Pod) bool {
	ref := metav1.GetControllerOfNoCopy(p)
	return ref != nil && ref.Kind == "Job" && p.Spec.RestartPolicy != corev1.RestartPolicyAlways
}

// runToCompletion advances a running Job pod's containers: once they have run for JobRunTime
// they exit with the pod's ExitCodeAnnotation (0 without it). Exit 0 completes the pod; another
// code fails it (restartPolicy Never) or, with OnFailure, restarts its containers after the
// kubelet's crash-loop back-off (CrashLoopBackOff, restartCount and lastState as the kubelet
// reports them). It returns how long until the next step is due (0: none, or the node is down).
func (k *kubelet) runToCompletion(pod *corev1.Pod, now time.Time, up bool) time.Duration {
	if len(pod.Status.ContainerStatuses) == 0 {
		return 0
	}
	cs := pod.Status.ContainerStatuses[0]
	switch {
	case cs.State.Waiting != nil && cs.LastTerminationState.Terminated != nil:
		at := cs.LastTerminationState.Terminated.FinishedAt.Add(crashLoopBackoff(cs.RestartCount, k.c.sim.backoffBase()))
		if wait := at.Sub(now); wait > 0 {
			return wait
		}
		if !up {
			return 0
		}
		t := metav1.NewTime(now.Truncate(time.Second))
		for i := range pod.Status.ContainerStatuses {
			c := &pod.Status.ContainerStatuses[i]
			c.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: t}}
			c.Started = ptr.To(true)
		}
		return k.c.jobRunTime()
	case cs.State.Running == nil:
		return 0
	}
	if wait := cs.State.Running.StartedAt.Add(k.c.jobRunTime()).Sub(now); wait > 0 {
		return wait
	}
	if !up {
		return 0
	}
	code := exitCode(pod)
	switch {
	case code == 0:
		completePod(pod, now)
	case pod.Spec.RestartPolicy == corev1.RestartPolicyOnFailure:
		t := metav1.NewTime(now.Truncate(time.Second))
		for i := range pod.Status.ContainerStatuses {
			c := &pod.Status.ContainerStatuses[i]
			started := t
			if c.State.Running != nil {
				started = c.State.Running.StartedAt
			}
			c.LastTerminationState = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: "Error",
				StartedAt: started, FinishedAt: t, ContainerID: c.ContainerID}}
			c.RestartCount++
			backoff := crashLoopBackoff(c.RestartCount, k.c.sim.backoffBase())
			c.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff",
				Message: fmt.Sprintf("back-off %s restarting failed container=%s pod=%s_%s(%s)", backoff, c.Name, pod.Name, pod.Namespace, pod.UID)}}
			c.Started = ptr.To(false)
		}
		return crashLoopBackoff(cs.RestartCount+1, k.c.sim.backoffBase())
	default:
		failPod(pod, now, code)
	}
	return 0
}

// crashLoopBackoff is the kubelet's delay before it restarts a container that exited for the
// restarts-th time: base doubled for each further restart, at most 5 minutes.
func crashLoopBackoff(restarts int32, base time.Duration) time.Duration {
	d := base
	for i := int32(1); i < restarts && d < maxCrashLoopBackoff; i++ {
		d *= 2
	}
	return min(d, maxCrashLoopBackoff)
}

// exitCode is the code a pod's simulated containers exit with (ExitCodeAnnotation), 0 by default.
func exitCode(pod *corev1.Pod) int32 {
	code, err := strconv.ParseInt(pod.Annotations[ExitCodeAnnotation], 10, 32)
	if err != nil || code < 0 || code > 255 {
		return 0
	}
	return int32(code)
}

// failPod is what the kubelet reports once a pod of restartPolicy Never has a container that
// exited with a code other than 0.
func failPod(pod *corev1.Pod, now time.Time, code int32) {
	completePod(pod, now)
	pod.Status.Phase = corev1.PodFailed
	for i := range pod.Status.ContainerStatuses {
		term := pod.Status.ContainerStatuses[i].State.Terminated
		term.ExitCode, term.Reason = code, "Error"
	}
	for i := range pod.Status.Conditions {
		if c := &pod.Status.Conditions[i]; c.Type == corev1.PodReady || c.Type == corev1.ContainersReady {
			c.Reason = "PodFailed"
		}
	}
}

// completePod is what the kubelet reports once every container exited 0.
func completePod(pod *corev1.Pod, now time.Time) {
	t := metav1.NewTime(now.Truncate(time.Second))
	pod.Status.Phase = corev1.PodSucceeded
	for i := range pod.Status.ContainerStatuses {
		cs := &pod.Status.ContainerStatuses[i]
		started := t
		if cs.State.Running != nil {
			started = cs.State.Running.StartedAt
		}
		cs.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed",
			StartedAt: started, FinishedAt: t, ContainerID: cs.ContainerID}}
		cs.Ready, cs.Started = false, new(bool)
	}
	for _, typ := range []corev1.PodConditionType{corev1.PodReady, corev1.ContainersReady} {
		setCondition(&pod.Status, corev1.PodCondition{Type: typ, Status: corev1.ConditionFalse, Reason: "PodCompleted", LastTransitionTime: t})
	}
	setCondition(&pod.Status, corev1.PodCondition{Type: corev1.PodReadyToStartContainers, Status: corev1.ConditionFalse, LastTransitionTime: t})
	orderConditions(pod)
}

// startsAt is when a bound pod's containers run: PodStartDelay after its binding.
func startsAt(pod *corev1.Pod, delay time.Duration) time.Time {
	if c := podCondition(pod, corev1.PodScheduled); c != nil && c.Status == corev1.ConditionTrue && !c.LastTransitionTime.IsZero() {
		return c.LastTransitionTime.Add(delay)
	}
	return pod.CreationTimestamp.Add(delay)
}

// podIP is the pod's address: the node's for host-network pods, else the lowest free address of
// the node's podCIDR (from .2: .1 is the bridge's, as with host-local IPAM).
func (k *kubelet) podIP(pod *corev1.Pod, node *corev1.Node) (string, bool) {
	if pod.Spec.HostNetwork {
		ip := nodeInternalIP(node)
		return ip, ip != ""
	}
	prefix, err := netip.ParsePrefix(node.Spec.PodCIDR)
	if err != nil || !prefix.Addr().Is4() {
		return "", false
	}
	used := map[string]bool{}
	for _, p := range k.c.cache.podsOn(node.Name) {
		if p.Status.PodIP != "" && !isTerminal(p) {
			used[p.Status.PodIP] = true
		}
	}
	base := prefix.Masked().Addr().As4()
	first := binary.BigEndian.Uint32(base[:])
	size := uint32(1) << (32 - prefix.Bits())
	for i := uint32(2); i < size-1; i++ {
		var a [4]byte
		binary.BigEndian.PutUint32(a[:], first+i)
		if ip := netip.AddrFrom4(a).String(); !used[ip] {
			return ip, true
		}
	}
	return "", false
}

// start sets what the kubelet reports once a pod's sandbox and containers run.
func start(pod *corev1.Pod, node *corev1.Node, ip string, now time.Time) {
	t := metav1.NewTime(now.Truncate(time.Second))
	pod.Status.Phase = corev1.PodRunning
	pod.Status.StartTime = &t
	if hostIP := nodeInternalIP(node); hostIP != "" {
		pod.Status.HostIP = hostIP
		pod.Status.HostIPs = []corev1.HostIP{{IP: hostIP}}
	}
	pod.Status.PodIP = ip
	pod.Status.PodIPs = []corev1.PodIP{{IP: ip}}
	setCondition(&pod.Status, corev1.PodCondition{Type: corev1.PodReadyToStartContainers, Status: corev1.ConditionTrue, LastTransitionTime: t})
	setCondition(&pod.Status, corev1.PodCondition{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: t})
	pod.Status.InitContainerStatuses = nil
	for _, c := range pod.Spec.InitContainers {
		pod.Status.InitContainerStatuses = append(pod.Status.InitContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: imageID(c.Image), ContainerID: containerID(pod, c.Name),
			Ready: true, Started: new(bool),
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: 0, Reason: "Completed", StartedAt: t, FinishedAt: t, ContainerID: containerID(pod, c.Name)}},
		})
	}
	pod.Status.ContainerStatuses = nil
	for _, c := range pod.Spec.Containers {
		started := true
		pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: imageID(c.Image), ContainerID: containerID(pod, c.Name),
			Started: &started,
			State:   corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: t}},
		})
	}
}

// containersReady sets each running container's ready flag (readiness probes pass from their
// initialDelaySeconds on) and returns whether all are ready, and how long until the next one
// turns ready.
func containersReady(pod *corev1.Pod, now time.Time) (bool, time.Duration) {
	all, wait := true, time.Duration(0)
	for i := range pod.Status.ContainerStatuses {
		cs := &pod.Status.ContainerStatuses[i]
		running := cs.State.Running
		ready := running != nil
		if ready {
			for _, c := range pod.Spec.Containers {
				if c.Name == cs.Name && c.ReadinessProbe != nil {
					at := running.StartedAt.Add(time.Duration(c.ReadinessProbe.InitialDelaySeconds) * time.Second)
					if d := at.Sub(now); d > 0 {
						ready = false
						if wait == 0 || d < wait {
							wait = d
						}
					}
				}
			}
		}
		cs.Ready = ready
		all = all && ready
	}
	return all, wait
}

// setReadiness sets the Ready and ContainersReady conditions as the kubelet does.
func setReadiness(pod *corev1.Pod, ready bool, now metav1.Time) {
	status, reason, message := corev1.ConditionTrue, "", ""
	if !ready {
		var names []string
		for _, cs := range pod.Status.ContainerStatuses {
			if !cs.Ready {
				names = append(names, cs.Name)
			}
		}
		sort.Strings(names)
		status, reason, message = corev1.ConditionFalse, "ContainersNotReady", fmt.Sprintf("containers with unready status: [%s]", strings.Join(names, " "))
	}
	now = metav1.NewTime(now.Truncate(time.Second))
	setCondition(&pod.Status, corev1.PodCondition{Type: corev1.PodReady, Status: status, Reason: reason, Message: message, LastTransitionTime: now})
	setCondition(&pod.Status, corev1.PodCondition{Type: corev1.ContainersReady, Status: status, Reason: reason, Message: message, LastTransitionTime: now})
	orderConditions(pod)
}

// conditionOrder is the order in which the kubelet lists a pod's conditions.
var conditionOrder = map[corev1.PodConditionType]int{
	corev1.PodReadyToStartContainers: 0, corev1.PodInitialized: 1, corev1.PodReady: 2, corev1.ContainersReady: 3, corev1.PodScheduled: 4,
}

func orderConditions(pod *corev1.Pod) {
	sort.SliceStable(pod.Status.Conditions, func(i, j int) bool {
		oi, iok := conditionOrder[pod.Status.Conditions[i].Type]
		oj, jok := conditionOrder[pod.Status.Conditions[j].Type]
		if !iok || !jok {
			return iok && !jok
		}
		return oi < oj
	})
}

// equalStatus: whether a status write would change nothing, as the kubelet's status manager
// decides it (semantic equality: empty and nil lists alike, quantities by value).
func equalStatus(a, b *corev1.Pod) bool {
	return apiequality.Semantic.DeepEqual(&a.Status, &b.Status)
}

// imageIDs are the images' IDs computed so far, one string per image however many pods of the
// fleet report it; bounded (a bound, not a cache: beyond it each pod gets its own string).
var imageIDs struct {
	sync.Mutex
	byImage map[string]string
}

const maxImageIDs = 4096

// imageID is the digest a container runtime reports for an image: the image's name in full
// (docker.io/library/nginx) and a digest derived from the reference, stable for each image.
func imageID(image string) string {
	imageIDs.Lock()
	defer imageIDs.Unlock()
	if id, ok := imageIDs.byImage[image]; ok {
		return id
	}
	id := computeImageID(image)
	if imageIDs.byImage == nil {
		imageIDs.byImage = map[string]string{}
	}
	if len(imageIDs.byImage) < maxImageIDs {
		imageIDs.byImage[image] = id
	}
	return id
}

func computeImageID(image string) string {
	name := image
	if i := strings.Index(name, "@"); i >= 0 {
		return fullImageName(name[:i]) + name[i:]
	}
	if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
		name = name[:i]
	}
	sum := sha256.Sum256([]byte(image))
	return fullImageName(name) + "@sha256:" + hex.EncodeToString(sum[:])
}

func fullImageName(name string) string {
	first, _, found := strings.Cut(name, "/")
	switch {
	case !found:
		return "docker.io/library/" + name
	case !strings.ContainsAny(first, ".:") && first != "localhost":
		return "docker.io/" + name
	}
	return name
}

// containerID is stable per pod and container, so a restart reports the same one.
func containerID(pod *corev1.Pod, name string) string {
	sum := sha256.Sum256([]byte(string(pod.UID) + "/" + name))
	return "containerd://" + hex.EncodeToString(sum[:])
}
