package store

import (
	"fmt"
	"reflect"
	"runtime"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// TestEqualValuesAreStoredOnce: the same ClusterRole stored in two clusters holds one labels map
// and one rule list; a patch in one cluster changes only that cluster's object.
func TestEqualValuesAreStoredOnce(t *testing.T) {
	g := NewWithT(t)
	gvr := rbacv1.SchemeGroupVersion.WithResource("clusterroles")
	role := func() *rbacv1.ClusterRole {
		return &rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: "view-widgets", Labels: map[string]string{"kubernetes.io/bootstrapping": "rbac-defaults"}},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"example.com"}, Resources: []string{"widgets"}, Verbs: []string{"get", "list", "watch"}}},
		}
	}
	a, b := newTestCluster(t), newTestCluster(t)
	for _, c := range []*Cluster{a, b} {
		_, err := c.Create(gvr, "", role(), CreateOptions{FieldManager: "test"})
		g.Expect(err).NotTo(HaveOccurred())
	}
	inA := a.getLocked(gvr.GroupResource(), "view-widgets").(*rbacv1.ClusterRole)
	inB := b.getLocked(gvr.GroupResource(), "view-widgets").(*rbacv1.ClusterRole)
	g.Expect(inA).NotTo(BeIdenticalTo(inB))
	g.Expect(reflect.ValueOf(inA.Labels).Pointer()).To(Equal(reflect.ValueOf(inB.Labels).Pointer()), "one labels map")
	g.Expect(&inA.Rules[0]).To(BeIdenticalTo(&inB.Rules[0]), "one rule list")

	_, err := a.Patch(gvr, "", "view-widgets", types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"team":"a"}},"rules":[{"apiGroups":["example.com"],"resources":["widgets"],"verbs":["*"]}]}`), PatchOptions{FieldManager: "test"})
	g.Expect(err).NotTo(HaveOccurred())
	got, err := b.Get(gvr, "", "view-widgets")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.(*rbacv1.ClusterRole).Labels).To(Equal(map[string]string{"kubernetes.io/bootstrapping": "rbac-defaults"}))
	g.Expect(got.(*rbacv1.ClusterRole).Rules[0].Verbs).To(Equal([]string{"get", "list", "watch"}))
	got, err = a.Get(gvr, "", "view-widgets")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.(*rbacv1.ClusterRole).Labels).To(HaveKeyWithValue("team", "a"))
	g.Expect(got.(*rbacv1.ClusterRole).Rules[0].Verbs).To(Equal([]string{"*"}))
}

// TestPodsShareTheirTemplatesParts: two pods of one template, in two clusters, hold one container
// list, one toleration list and one owner reference; a write to one pod's containers changes only
// that pod, and a status update keeps the pod's shared parts.
func TestPodsShareTheirTemplatesParts(t *testing.T) {
	g := NewWithT(t)
	gvr := corev1.SchemeGroupVersion.WithResource("pods")
	pod := func(name string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{"app": "web"},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-1", UID: "rs-uid", Controller: ptr.To(true)}}},
			Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "app", Image: "nginx:1.27", Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m")}}}},
				Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			},
		}
	}
	a, b := newTestCluster(t), newTestCluster(t)
	for i, c := range []*Cluster{a, a, b} {
		_, err := c.Create(gvr, "default", pod(fmt.Sprintf("web-%d", i)), CreateOptions{FieldManager: "test"})
		g.Expect(err).NotTo(HaveOccurred())
	}
	p0 := a.getLocked(gvr.GroupResource(), "default/web-0").(*corev1.Pod)
	p1 := a.getLocked(gvr.GroupResource(), "default/web-1").(*corev1.Pod)
	p2 := b.getLocked(gvr.GroupResource(), "default/web-2").(*corev1.Pod)
	for _, p := range []*corev1.Pod{p1, p2} {
		g.Expect(&p.Spec.Containers[0]).To(BeIdenticalTo(&p0.Spec.Containers[0]), "one container list")
		g.Expect(&p.Spec.Tolerations[0]).To(BeIdenticalTo(&p0.Spec.Tolerations[0]), "one toleration list")
		g.Expect(&p.OwnerReferences[0]).To(BeIdenticalTo(&p0.OwnerReferences[0]), "one owner reference")
	}
	g.Expect(cap(p0.Spec.Containers)).To(Equal(len(p0.Spec.Containers)), "no spare capacity to append into")

	// A status update: the new version keeps the shared parts.
	next := p1.DeepCopy()
	next.Status.Phase = corev1.PodRunning
	_, err := a.Update(gvr, "default", next, UpdateOptions{FieldManager: "test", Subresource: "status"})
	g.Expect(err).NotTo(HaveOccurred())
	p1 = a.getLocked(gvr.GroupResource(), "default/web-1").(*corev1.Pod)
	g.Expect(p1.Status.Phase).To(Equal(corev1.PodRunning))
	g.Expect(&p1.Spec.Containers[0]).To(BeIdenticalTo(&p0.Spec.Containers[0]))

	// A label change on one pod (containers are immutable in a pod: labels stand in for a change):
	// the others keep their values.
	next = p2.DeepCopy()
	next.Labels = map[string]string{"app": "web", "canary": "true"}
	next.Spec.Tolerations = append(next.Spec.Tolerations, corev1.Toleration{Key: "k", Operator: corev1.TolerationOpExists})
	_, err = b.Update(gvr, "default", next, UpdateOptions{FieldManager: "test"})
	g.Expect(err).NotTo(HaveOccurred())
	got, err := a.Get(gvr, "default", "web-0")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.(*corev1.Pod).Labels).To(Equal(map[string]string{"app": "web"}))
	g.Expect(got.(*corev1.Pod).Spec.Tolerations).To(HaveLen(1))
	got, err = b.Get(gvr, "default", "web-2")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.(*corev1.Pod).Spec.Tolerations).To(HaveLen(2))
}

// TestWeakTableForgetsUnusedValues: a value nothing uses any more is not kept by the table.
func TestWeakTableForgetsUnusedValues(t *testing.T) {
	g := NewWithT(t)
	var table weakTable[corev1.Toleration]
	for i := range 2000 {
		v := internProto(&table, []corev1.Toleration{{Key: fmt.Sprintf("key-%d", i), Operator: corev1.TolerationOpExists}})
		g.Expect(v[0].Key).To(Equal(fmt.Sprintf("key-%d", i)))
		runtime.KeepAlive(v)
		if i%100 == 0 {
			runtime.GC()
		}
	}
	runtime.GC()
	// One more insertion sweeps once the table has doubled since the last sweep.
	kept := internProto(&table, []corev1.Toleration{{Key: "kept", Operator: corev1.TolerationOpExists}})
	table.mu.Lock()
	n := len(table.values)
	table.mu.Unlock()
	g.Expect(n).To(BeNumerically("<", 2000), "collected values are swept")
	again := internProto(&table, []corev1.Toleration{{Key: "kept", Operator: corev1.TolerationOpExists}})
	g.Expect(&again[0]).To(BeIdenticalTo(&kept[0]))
}

// TestSharingOutlastsUniqueValues: a fleet's unique labels (every node's hostname) are many;
// labels that pods share are shared still once thousands of unique ones were stored, and a map
// nothing uses any more is not kept.
func TestSharingOutlastsUniqueValues(t *testing.T) {
	g := NewWithT(t)
	unique := make([]map[string]string, 0, 10000)
	for i := range cap(unique) {
		unique = append(unique, internMap(map[string]string{"kubernetes.io/hostname": fmt.Sprintf("node-%d", i)}))
	}
	a := internMap(map[string]string{"app": "web", "pod-template-hash": "5d9c7b8f4"})
	b := internMap(map[string]string{"pod-template-hash": "5d9c7b8f4", "app": "web"})
	g.Expect(reflect.ValueOf(b).Pointer()).To(Equal(reflect.ValueOf(a).Pointer()), "one labels map")
	g.Expect(b).To(Equal(map[string]string{"app": "web", "pod-template-hash": "5d9c7b8f4"}))
	runtime.KeepAlive(unique)

	// A map nothing uses any more is not kept: the next equal one is the caller's own.
	internMap(map[string]string{"gone": "soon"})
	runtime.GC()
	fresh := map[string]string{"gone": "soon"}
	g.Expect(reflect.ValueOf(internMap(fresh)).Pointer()).To(Equal(reflect.ValueOf(fresh).Pointer()))
	runtime.KeepAlive(a)
}

// testNode is a Node as a kubelet registers it: its name and address its own, its capacity,
// conditions and system information those of its siblings.
func testNode(name, ip string, at metav1.Time) *corev1.Node {
	capacity := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("8Gi")}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}},
		Spec:       corev1.NodeSpec{Taints: []corev1.Taint{{Key: "node.cluster.x-k8s.io/uninitialized", Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{
			Capacity: capacity, Allocatable: capacity.DeepCopy(),
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: at, LastTransitionTime: at}},
			Addresses:  []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}},
			NodeInfo:   corev1.NodeSystemInfo{KubeletVersion: "v1.36.3", OSImage: "Goofy Simulated Linux", MachineID: name},
		},
	}
}

// TestNodesShareTheirSiblingsParts: two Nodes of one capacity, in two clusters, hold one capacity
// map (allocatable too), one condition list and one taint list, and a change to one Node's
// capacity changes only that Node.
func TestNodesShareTheirSiblingsParts(t *testing.T) {
	g := NewWithT(t)
	gvr := corev1.SchemeGroupVersion.WithResource("nodes")
	at := metav1.Unix(1_780_000_000, 0)
	a, b := newTestCluster(t), newTestCluster(t)
	_, err := a.Create(gvr, "", testNode("a-0", "10.0.0.1", at), CreateOptions{FieldManager: "test"})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = b.Create(gvr, "", testNode("b-0", "10.0.1.1", at), CreateOptions{FieldManager: "test"})
	g.Expect(err).NotTo(HaveOccurred())
	na := a.getLocked(gvr.GroupResource(), "a-0").(*corev1.Node)
	nb := b.getLocked(gvr.GroupResource(), "b-0").(*corev1.Node)
	g.Expect(reflect.ValueOf(nb.Status.Capacity).Pointer()).To(Equal(reflect.ValueOf(na.Status.Capacity).Pointer()), "one capacity map")
	g.Expect(reflect.ValueOf(na.Status.Allocatable).Pointer()).To(Equal(reflect.ValueOf(na.Status.Capacity).Pointer()), "allocatable equal to capacity: the same map")
	g.Expect(&nb.Status.Conditions[0]).To(BeIdenticalTo(&na.Status.Conditions[0]), "one condition list")
	g.Expect(&nb.Spec.Taints[0]).To(BeIdenticalTo(&na.Spec.Taints[0]), "one taint list")
	g.Expect(nb.Status.Addresses[0].Address).To(Equal("10.0.1.1"))

	next := nb.DeepCopy()
	next.Status.Capacity[corev1.ResourceCPU] = resource.MustParse("4")
	_, err = b.Update(gvr, "", next, UpdateOptions{FieldManager: "test", Subresource: "status"})
	g.Expect(err).NotTo(HaveOccurred())
	got, err := a.Get(gvr, "", "a-0")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.(*corev1.Node).Status.Capacity.Cpu().String()).To(Equal("2"))
	got, err = b.Get(gvr, "", "b-0")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.(*corev1.Node).Status.Capacity.Cpu().String()).To(Equal("4"))
	g.Expect(got.(*corev1.Node).Status.Allocatable.Cpu().String()).To(Equal("2"))
}

// TestPodsOfANodeShareItsAddresses: the static pods of one node, started in the same second,
// hold one host IP list, one pod IP list and, per component, one container status list.
func TestPodsOfANodeShareItsAddresses(t *testing.T) {
	g := NewWithT(t)
	gvr := corev1.SchemeGroupVersion.WithResource("pods")
	at := metav1.Unix(1_780_000_000, 0)
	pod := func(name, component string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kube-system"},
			Spec:       corev1.PodSpec{NodeName: "cp-0", HostNetwork: true, Containers: []corev1.Container{{Name: component, Image: "registry.k8s.io/" + component + ":v1.36.3"}}},
			Status: corev1.PodStatus{
				Phase: corev1.PodRunning, HostIPs: []corev1.HostIP{{IP: "10.0.0.1"}}, PodIPs: []corev1.PodIP{{IP: "10.0.0.1"}},
				ContainerStatuses: []corev1.ContainerStatus{{Name: component, Image: "registry.k8s.io/" + component + ":v1.36.3", Ready: true,
					State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: at}}}},
			},
		}
	}
	// Created, then its status written, as kubelet does (create ignores status).
	createWithStatus := func(c *Cluster, p *corev1.Pod) {
		created, err := c.Create(gvr, p.Namespace, p.DeepCopy(), CreateOptions{FieldManager: "test"})
		g.Expect(err).NotTo(HaveOccurred())
		p.ResourceVersion, p.UID = created.(*corev1.Pod).ResourceVersion, created.(*corev1.Pod).UID
		_, err = c.Update(gvr, p.Namespace, p, UpdateOptions{FieldManager: "test", Subresource: "status"})
		g.Expect(err).NotTo(HaveOccurred())
	}
	a, b := newTestCluster(t), newTestCluster(t)
	for _, c := range []*Cluster{a, b} {
		createWithStatus(c, pod("etcd-cp-0", "etcd"))
		createWithStatus(c, pod("kube-apiserver-cp-0", "kube-apiserver"))
	}
	etcdA := a.getLocked(gvr.GroupResource(), "kube-system/etcd-cp-0").(*corev1.Pod)
	apiA := a.getLocked(gvr.GroupResource(), "kube-system/kube-apiserver-cp-0").(*corev1.Pod)
	etcdB := b.getLocked(gvr.GroupResource(), "kube-system/etcd-cp-0").(*corev1.Pod)
	g.Expect(&apiA.Status.HostIPs[0]).To(BeIdenticalTo(&etcdA.Status.HostIPs[0]), "one host IP list")
	g.Expect(&apiA.Status.PodIPs[0]).To(BeIdenticalTo(&etcdA.Status.PodIPs[0]), "one pod IP list")
	g.Expect(&etcdB.Status.ContainerStatuses[0]).To(BeIdenticalTo(&etcdA.Status.ContainerStatuses[0]), "one container status list per component")
	g.Expect(apiA.Status.ContainerStatuses[0].Name).To(Equal("kube-apiserver"))

	// A pod on the pod network, its container named: its addresses and its status are its own,
	// and the tables are not asked (an entry per pod would cost more than it shares).
	entries := func() int {
		n := 0
		for _, t := range []interface{ size() int }{&internedPodIPs, &internedContainerStatuses} {
			n += t.size()
		}
		return n
	}
	before := entries()
	web := pod("web-0", "web")
	web.Spec.HostNetwork = false
	web.Status.PodIPs = []corev1.PodIP{{IP: "192.168.1.7"}}
	web.Status.ContainerStatuses[0].ContainerID = "containerd://0f3c"
	createWithStatus(a, web)
	stored := a.getLocked(gvr.GroupResource(), "kube-system/web-0").(*corev1.Pod)
	g.Expect(stored.Status.PodIPs[0].IP).To(Equal("192.168.1.7"))
	g.Expect(stored.Status.ContainerStatuses[0].ContainerID).To(Equal("containerd://0f3c"))
	g.Expect(entries()).To(Equal(before))
}

// size is the number of entries, collected ones included until the next sweep.
func (t *weakTable[T]) size() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.values)
}
