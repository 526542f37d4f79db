package workload

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
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

// Images are where kubeadm takes the control-plane images from: its ClusterConfiguration's
// imageRepository and etcd.local.imageRepository/imageTag (KCP sets them, e.g. to upgrade etcd).
type Images struct {
	Repository     string // "" is kubeadm's default, registry.k8s.io
	EtcdRepository string // "" is Repository
	EtcdTag        string // "" is the etcd version kubeadm pins for the Kubernetes version
}

// image is the image kubeadm writes into a component's static pod manifest.
func (i Images) image(component, kubernetesVersion string) string {
	repo := i.Repository
	if repo == "" {
		repo = "registry.k8s.io"
	}
	if component != Etcd {
		return fmt.Sprintf("%s/%s:%s", repo, component, kubernetesVersion)
	}
	if i.EtcdRepository != "" {
		repo = i.EtcdRepository
	}
	tag := i.EtcdTag
	if tag == "" {
		tag = EtcdVersion(kubernetesVersion)
	}
	return repo + "/etcd:" + tag
}

// ImagesFromClusterConfiguration reads the image settings of a ClusterConfiguration document (the
// kubeadm-config ConfigMap's ClusterConfiguration key).
func ImagesFromClusterConfiguration(doc string) (Images, error) {
	var cfg struct {
		ImageRepository string `json:"imageRepository"`
		Etcd            struct {
			Local *struct {
				ImageRepository string `json:"imageRepository"`
				ImageTag        string `json:"imageTag"`
			} `json:"local"`
		} `json:"etcd"`
	}
	if err := yaml.Unmarshal([]byte(doc), &cfg); err != nil {
		return Images{}, err
	}
	out := Images{Repository: cfg.ImageRepository}
	if cfg.Etcd.Local != nil {
		out.EtcdRepository, out.EtcdTag = cfg.Etcd.Local.ImageRepository, cfg.Etcd.Local.ImageTag
	}
	return out, nil
}

// StaticPod returns the Running, Ready mirror pod of a control-plane component on a node, with
// kubeadm's default images.
func StaticPod(component, nodeName, kubernetesVersion, nodeIP string, now metav1.Time) *corev1.Pod {
	return StaticPodWithImages(component, nodeName, kubernetesVersion, nodeIP, now, Images{})
}

// StaticPodWithImages is StaticPod with the images a ClusterConfiguration sets.
func StaticPodWithImages(component, nodeName, kubernetesVersion, nodeIP string, now metav1.Time, images Images) *corev1.Pod {
	image := images.image(component, kubernetesVersion)
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
