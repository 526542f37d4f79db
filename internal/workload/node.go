package workload

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

// Labels and taints kubeadm and CAPI put on nodes.
const ControlPlaneNodeLabel = "node-role.kubernetes.io/control-plane"

// UninitializedTaint is set by CAPI's kubeadm bootstrap on join and removed by CAPI once the
// Machine's labels are synced to the Node.
var UninitializedTaint = clusterv1.NodeUninitializedTaint

// NodeSpec is what a simulated Node is built from.
type NodeSpec struct {
	Name           string
	ProviderID     string
	KubeletVersion string
	InternalIP     string
	ControlPlane   bool
	// Capacity of the node; nil means DefaultCapacity.
	Capacity corev1.ResourceList
	// Ready false makes the node NotReady (used to simulate failures).
	Ready bool
}

// DefaultCapacity is the capacity of a simulated node when its template does not say.
func DefaultCapacity() corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU:              resource.MustParse("2"),
		corev1.ResourceMemory:           resource.MustParse("8Gi"),
		corev1.ResourcePods:             resource.MustParse("110"),
		corev1.ResourceEphemeralStorage: resource.MustParse("100Gi"),
	}
}

// Node returns the Node as kubelet registers it after kubeadm init/join.
func Node(s NodeSpec, now metav1.Time) *corev1.Node {
	capacity := s.Capacity
	if len(capacity) == 0 {
		capacity = DefaultCapacity()
	}
	labels := map[string]string{
		"kubernetes.io/hostname": s.Name,
		"kubernetes.io/os":       "linux",
		"kubernetes.io/arch":     "amd64",
		"beta.kubernetes.io/os":  "linux",
	}
	taints := []corev1.Taint{UninitializedTaint}
	if s.ControlPlane {
		labels[ControlPlaneNodeLabel] = ""
		labels["node.kubernetes.io/exclude-from-external-load-balancers"] = ""
		taints = append(taints, corev1.Taint{Key: ControlPlaneNodeLabel, Effect: corev1.TaintEffectNoSchedule})
	}
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:   s.Name,
			Labels: labels,
			Annotations: map[string]string{
				"kubeadm.alpha.kubernetes.io/cri-socket":                 "unix:///var/run/containerd/containerd.sock",
				"node.alpha.kubernetes.io/ttl":                           "0",
				"volumes.kubernetes.io/controller-managed-attach-detach": "true",
			},
		},
		Spec: corev1.NodeSpec{ProviderID: s.ProviderID, Taints: taints},
		Status: corev1.NodeStatus{
			Capacity:    capacity.DeepCopy(),
			Allocatable: capacity.DeepCopy(),
			Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeInternalIP, Address: s.InternalIP},
				{Type: corev1.NodeHostName, Address: s.Name},
			},
			NodeInfo: corev1.NodeSystemInfo{
				KubeletVersion:          s.KubeletVersion,
				KubeProxyVersion:        s.KubeletVersion,
				ContainerRuntimeVersion: "containerd://2.1.0",
				OperatingSystem:         "linux",
				Architecture:            "amd64",
				OSImage:                 "Goofy Simulated Linux",
				KernelVersion:           "6.12.0-goofy",
				MachineID:               s.Name,
				SystemUUID:              s.Name,
				BootID:                  s.Name,
			},
			Phase: corev1.NodeRunning,
		},
	}
	SetNodeReady(n, s.Ready, now)
	return n
}

// SetNodeReady sets the Ready and pressure conditions as kubelet reports them; it returns whether
// anything changed.
func SetNodeReady(n *corev1.Node, ready bool, now metav1.Time) bool {
	readyStatus, reason, message := corev1.ConditionTrue, "KubeletReady", "kubelet is posting ready status"
	if !ready {
		readyStatus, reason, message = corev1.ConditionFalse, "KubeletNotReady", "simulated failure: container runtime network not ready"
	}
	want := []corev1.NodeCondition{
		{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientMemory", Message: "kubelet has sufficient memory available"},
		{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasNoDiskPressure", Message: "kubelet has no disk pressure"},
		{Type: corev1.NodePIDPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientPID", Message: "kubelet has sufficient PID available"},
		{Type: corev1.NodeReady, Status: readyStatus, Reason: reason, Message: message},
	}
	changed := false
	for _, w := range want {
		found := false
		for i := range n.Status.Conditions {
			c := &n.Status.Conditions[i]
			if c.Type != w.Type {
				continue
			}
			found = true
			if c.Status != w.Status {
				c.Status, c.Reason, c.Message = w.Status, w.Reason, w.Message
				c.LastTransitionTime, c.LastHeartbeatTime = now, now
				changed = true
			}
		}
		if !found {
			w.LastTransitionTime, w.LastHeartbeatTime = now, now
			n.Status.Conditions = append(n.Status.Conditions, w)
			changed = true
		}
	}
	return changed
}
