package simulate

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// kubelet is every node's kubelet, as far as pods go: a pod bound to a Ready node starts
// (Pending → Running) PodStartDelay after its binding, with an IP from the node's podCIDR and
// the container statuses and conditions the kubelet reports; a container with a readiness probe
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
	return []schema.GroupResource{podsGR, nodesGR}
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
			return
		}
		for _, p := range k.c.cache.podsOn(obj.Name) {
			if !isMirrorPod(p) && isActive(p) {
				k.c.enqueue(k.idx, keyOf(p))
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
	if isJobPod(pod) && pod.Status.StartTime != nil {
		// A Job's containers exit 0 once they have run for JobRunTime.
		if wait := pod.Status.StartTime.Add(k.c.jobRunTime()).Sub(now); wait > 0 {
			k.c.after(wait, k.idx, key)
		} else if nodeReady(node) {
			completePod(next, now)
			return k.c.client.Status().Update(ctx, next)
		}
	} else if isJobPod(next) {
		k.c.after(k.c.jobRunTime(), k.idx, key)
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

func equalStatus(a, b *corev1.Pod) bool {
	return a.Status.String() == b.Status.String()
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
