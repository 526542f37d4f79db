package workload

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Control-plane components kubeadm runs as static pods, named <component>-<node> in kube-system.
const (
	Etcd                  = "etcd"
	KubeAPIServer         = "kube-apiserver"
	KubeControllerManager = "kube-controller-manager"
	KubeScheduler         = "kube-scheduler"
)

// StaticPodName is the mirror pod name kubelet gives a static pod on a node.
func StaticPodName(component, nodeName string) string { return component + "-" + nodeName }

// StaticPod returns the Running, Ready mirror pod of a control-plane component on a node.
func StaticPod(component, nodeName, kubernetesVersion, nodeIP string, now metav1.Time) *corev1.Pod {
	image := fmt.Sprintf("registry.k8s.io/%s:%s", component, kubernetesVersion)
	if component == Etcd {
		image = "registry.k8s.io/etcd:" + EtcdVersion(kubernetesVersion)
	}
	ready := []corev1.PodCondition{
		{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      StaticPodName(component, nodeName),
			Namespace: metav1.NamespaceSystem,
			Labels:    map[string]string{"component": component, "tier": "control-plane"},
			Annotations: map[string]string{
				"kubernetes.io/config.source": "file",
				"kubernetes.io/config.mirror": component + "-" + nodeName,
			},
		},
		Spec: corev1.PodSpec{
			NodeName:          nodeName,
			HostNetwork:       true,
			PriorityClassName: "system-node-critical",
			Containers:        []corev1.Container{{Name: component, Image: image}},
			Tolerations:       []corev1.Toleration{{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}},
		},
		Status: corev1.PodStatus{
			Phase:      corev1.PodRunning,
			Conditions: ready,
			HostIP:     nodeIP,
			PodIP:      nodeIP,
			StartTime:  &now,
			ContainerStatuses: []corev1.ContainerStatus{{
				Name: component, Image: image, Ready: true, Started: ptrTrue(),
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
			}},
		},
	}
}

func ptrTrue() *bool { t := true; return &t }
