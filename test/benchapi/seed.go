package benchapi

import (
	"encoding/json"
	"fmt"
	"os"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/workload"
)

// The simulated cluster both servers hold: what kubeadm and kubelet put into a cluster of three
// control-plane and three worker machines, plus the ConfigMaps the watch fan-out writes.
const (
	KubernetesVersion = "v1.36.3"
	ControlPlanes     = 3
	Workers           = 3
	// PodNamespace holds the pods LIST reads: 12 static pods, 6 kube-proxy and 2 CoreDNS pods.
	PodNamespace = metav1.NamespaceSystem
	// MissingPod is the name GET of a missing object asks for.
	MissingPod = "does-not-exist"
	// WatchNamespace holds WatchObjects ConfigMaps, one per watch writer.
	WatchNamespace = "bench-watch"
	WatchObjects   = 8
)

// NodeName names machine i: control planes first, then workers.
func NodeName(i int) string {
	if i < ControlPlanes {
		return fmt.Sprintf("bench-cp-%d", i)
	}
	return fmt.Sprintf("bench-md-%d", i-ControlPlanes)
}

// WatchObjectName names the ConfigMap watch writer i patches.
func WatchObjectName(i int) string { return fmt.Sprintf("w-%d", i) }

// APIServerPod is the kube-apiserver static pod the servers register their API server as.
func APIServerPod() string { return workload.StaticPodName(workload.KubeAPIServer, NodeName(0)) }

// Seed returns the objects both servers start with, defaulted by Goofy's scheme so that both
// hold the same bytes (CAPD's in-memory store applies no defaults, Goofy's applies a few).
func Seed(now metav1.Time) []client.Object {
	var objs []client.Object
	for _, ns := range []string{metav1.NamespaceDefault, metav1.NamespacePublic, metav1.NamespaceSystem, corev1.NamespaceNodeLease, WatchNamespace} {
		objs = append(objs, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	}
	cluster := workload.ClusterObjects(workload.ClusterSpec{
		ClusterName: "bench-api", KubernetesVersion: KubernetesVersion,
		// Neutral endpoint: the seed is the same for both servers, whatever their ports.
		ControlPlaneEndpoint: "127.0.0.1:6443",
		DNSDomain:            "cluster.local", PodSubnet: "192.168.0.0/16", ServiceSubnet: "10.96.0.0/12",
	})
	for i := range ControlPlanes + Workers {
		node, ip := NodeName(i), fmt.Sprintf("10.0.0.%d", 10+i)
		objs = append(objs, workload.Node(workload.NodeSpec{
			Name: node, ProviderID: "goofy://bench/bench-api/" + node, KubeletVersion: KubernetesVersion,
			InternalIP: ip, ControlPlane: i < ControlPlanes, Ready: true,
		}, now))
		if i < ControlPlanes {
			for _, c := range []string{workload.Etcd, workload.KubeAPIServer, workload.KubeControllerManager, workload.KubeScheduler} {
				objs = append(objs, workload.StaticPod(c, node, KubernetesVersion, ip, now))
			}
		}
		objs = append(objs, replicaPod(fmt.Sprintf("kube-proxy-%d", i), node, ip, templateOf(cluster, "kube-proxy"), now))
		if i >= ControlPlanes && i < ControlPlanes+2 {
			objs = append(objs, replicaPod(fmt.Sprintf("coredns-7c65d6cfc9-%d", i), node, fmt.Sprintf("192.168.%d.2", i), templateOf(cluster, "coredns"), now))
		}
	}
	objs = append(objs, cluster...)
	for i := range WatchObjects {
		objs = append(objs, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: WatchObjectName(i), Namespace: WatchNamespace},
			Data:       map[string]string{"n": "0"},
		})
	}
	for _, o := range objs {
		store.Scheme().Default(o)
	}
	return objs
}

// templateOf returns the pod template of kubeadm's DaemonSet or Deployment called name.
func templateOf(objs []client.Object, name string) corev1.PodTemplateSpec {
	for _, o := range objs {
		switch w := o.(type) {
		case *appsv1.DaemonSet:
			if w.Name == name {
				return *w.Spec.Template.DeepCopy()
			}
		case *appsv1.Deployment:
			if w.Name == name {
				return *w.Spec.Template.DeepCopy()
			}
		}
	}
	panic("workload.ClusterObjects has no workload " + name)
}

// replicaPod is a Running, Ready pod of a DaemonSet or Deployment on node.
func replicaPod(name, node, ip string, t corev1.PodTemplateSpec, now metav1.Time) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceSystem, Labels: t.Labels},
		Spec:       t.Spec,
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning, HostIP: ip, PodIP: ip, StartTime: &now,
			Conditions: []corev1.PodCondition{
				{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
				{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
				{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
			},
		},
	}
	p.Spec.NodeName = node
	for _, c := range p.Spec.Containers {
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, Ready: true,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		})
	}
	return p
}

// WriteSeed writes objs as one JSON v1 List, the file both server programs read.
func WriteSeed(path string, objs []client.Object) error {
	list := corev1.List{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "List"}}
	for _, o := range objs {
		gvk, err := apiutil.GVKForObject(o, scheme.Scheme)
		if err != nil {
			return err
		}
		o = o.DeepCopyObject().(client.Object)
		o.GetObjectKind().SetGroupVersionKind(gvk)
		raw, err := json.Marshal(o)
		if err != nil {
			return err
		}
		list.Items = append(list.Items, runtime.RawExtension{Raw: raw})
	}
	b, err := json.MarshalIndent(list, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// ReadSeed decodes a file written by WriteSeed into typed objects.
func ReadSeed(path string) ([]client.Object, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var list corev1.List
	if err := json.Unmarshal(b, &list); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	objs := make([]client.Object, 0, len(list.Items))
	for i, item := range list.Items {
		o, _, err := scheme.Codecs.UniversalDeserializer().Decode(item.Raw, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("%s: item %d: %w", path, i, err)
		}
		objs = append(objs, o.(client.Object))
	}
	return objs, nil
}
