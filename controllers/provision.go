package controllers

import (
	"context"
	"crypto"
	"crypto/x509"
	"fmt"
	"net/netip"
	"sync"
	"weak"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/certs"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/secret"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/goofy-capi/cluster-api-provider-goofy/api/v1alpha1"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/mux"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/workload"
)

// simNode is one simulated node as the node unit (nodeProvisioner) makes it: what a GoofyMachine,
// and later an instance of a machine pool, asks for. Everything the unit records about it is keyed
// by owner, the UID of the object it is provisioned for; its name is the Node's name in the
// workload cluster (and that of its static pods and etcd member), which clients of the workload
// cluster (kubectl, KCP) see.
type simNode struct {
	owner      types.UID          // the GoofyMachine's (or pool instance's) UID
	key        string             // the workload cluster in the mux
	cluster    *clusterv1.Cluster // its CAs and network; nil when released without its Cluster
	name       string             // the Node's name
	providerID string
	version    string
	ip         string // InternalIP, once the VM has one
	// controlPlane nodes run etcd and the API server as static pods.
	controlPlane bool
	capacity     corev1.ResourceList
	// Faults: notReady (nodeNotReady, or the VM gone), vmFailed, etcdUnhealthy.
	notReady, vmFailed, etcdUnhealthy bool
	// provisioned: the owner's own record says the Node was registered (its NodeProvisioned
	// condition), which proves ownership when the Node is gone.
	provisioned bool
	// obs is what the current reconcile read of the node (nil: read again each time).
	obs *nodeObservation
}

// node is the simulated node of the machine in s.
func (s *machineScope) node() simNode {
	n := simNode{
		owner: s.gm.UID, key: s.key, cluster: s.cluster, name: s.nodeName(),
		providerID: s.gm.Spec.ProviderID, ip: internalIP(s.gm), controlPlane: s.controlPlane(),
		capacity: machineCapacity(&s.gm.Spec),
		notReady: s.faults.nodeNotReady || s.vmGone != "", vmFailed: s.faults.vmFailed, etcdUnhealthy: s.faults.etcdUnhealthy,
		provisioned: s.gm.Spec.ProviderID != "" && conditions.IsTrue(s.gm, infrav1.NodeProvisionedCondition),
		obs:         &s.observed,
	}
	if s.machine != nil {
		n.version = s.machine.Spec.Version
	}
	return n
}

// nodeProvisioner is the provisioning unit of one simulated node: its InternalIP, its Node (as
// kubelet registers it, with the node faults), and on control-plane nodes the static pods, the etcd
// member (with its serving certificate) and the API server (with kubeadm's cluster objects).
// GoofyMachines of both backends use it; machine-pool instances will.
type nodeProvisioner struct {
	client client.Reader // the management cluster: the CA secrets
	mux    *mux.WorkloadClustersMux
	clock  clock.PassiveClock
	ips    ipAllocator

	mu      sync.Mutex
	records map[types.UID]nodeRecord // by owner

	// workloadClient is the client on a workload cluster's store (tests count its requests).
	workloadClient func(*mux.WorkloadClusterListener) (client.Client, error)
}

func newNodeProvisioner(c client.Reader, m *mux.WorkloadClustersMux, clk clock.PassiveClock) *nodeProvisioner {
	return &nodeProvisioner{client: c, mux: m, clock: clk,
		workloadClient: func(l *mux.WorkloadClusterListener) (client.Client, error) { return l.GetClient() }}
}

// nodeIP returns n's InternalIP: recorded (the one in the owner's status), reserved again for
// it, else a new one unique in the cluster, avoiding what taken returns (the IPs other owners
// recorded; asked only when an address is allocated). Allocations are the owner UID's: an IP that
// an earlier version allocated under the machine's name is found in the machine's status and
// adopted here, on the first reconcile after the upgrade.
func (p *nodeProvisioner) nodeIP(n simNode, recorded string, taken func() (map[netip.Addr]bool, error)) (netip.Addr, error) {
	if recorded != "" {
		ip, err := netip.ParseAddr(recorded)
		if err != nil {
			return netip.Addr{}, fmt.Errorf("recorded InternalIP %q: %w", recorded, err)
		}
		return ip, p.ips.reserve(n.key, string(n.owner), ip)
	}
	others, err := taken()
	if err != nil {
		return netip.Addr{}, err
	}
	return p.ips.allocate(n.key, string(n.owner), func(ip netip.Addr) bool { return others[ip] })
}

// release forgets n's records (its IP, what it provisioned); teardown removed what it made.
func (p *nodeProvisioner) release(n simNode) {
	p.ips.release(n.key, string(n.owner))
	p.forget(n)
}

// nodeRecord is what the unit recorded of a control-plane node it provisioned in full (its API
// server and kubeadm's cluster objects): the workload cluster's store it did so in (a store
// replaced since, by a restart or a re-created GoofyCluster, invalidates it). With a record, a
// reconcile of the node leaves kubeadm's cluster objects alone unless its API server starts again,
// and re-checks only what a user or a fault can change: the Node (one get), the static pods (one
// list), the etcd member and API server (in the mux's memory).
type nodeRecord struct {
	store weak.Pointer[store.Cluster]
}

// recorded reports whether n was provisioned in full in l's store.
func (p *nodeProvisioner) recorded(n simNode, l *mux.WorkloadClusterListener) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	r, ok := p.records[n.owner]
	return ok && r.store.Value() == l.Store()
}

func (p *nodeProvisioner) record(n simNode, l *mux.WorkloadClusterListener) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.records == nil {
		p.records = map[types.UID]nodeRecord{}
	}
	p.records[n.owner] = nodeRecord{store: weak.Make(l.Store())}
}

func (p *nodeProvisioner) forget(n simNode) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.records, n.owner)
}

// nodeObservation is what one reconcile read of a node's workload objects, so that its phases
// read each at most once: the node's static pods (one list), kubeadm's images.
type nodeObservation struct {
	pods   map[string]*corev1.Pod // by name; nil until listed
	images *workload.Images
}

// staticPods lists the pods bound to n's Node in kube-system, once per reconcile.
func (p *nodeProvisioner) staticPods(ctx context.Context, c client.Client, n simNode) (map[string]*corev1.Pod, error) {
	if n.obs != nil && n.obs.pods != nil {
		return n.obs.pods, nil
	}
	list := &corev1.PodList{}
	if err := c.List(ctx, list, client.InNamespace(metav1.NamespaceSystem), client.MatchingFields{"spec.nodeName": n.name}); err != nil {
		return nil, err
	}
	pods := make(map[string]*corev1.Pod, len(list.Items))
	for i := range list.Items {
		pods[list.Items[i].Name] = &list.Items[i]
	}
	if n.obs != nil {
		n.obs.pods = pods
	}
	return pods, nil
}

// kubeadmImages is kubeadmImages, once per reconcile.
func (p *nodeProvisioner) kubeadmImages(ctx context.Context, c client.Client, n simNode) (workload.Images, error) {
	if n.obs != nil && n.obs.images != nil {
		return *n.obs.images, nil
	}
	images, err := kubeadmImages(ctx, c)
	if err == nil && n.obs != nil {
		n.obs.images = &images
	}
	return images, err
}

// ensureNode registers the Node as kubelet would, and keeps its Ready condition in line with the
// node faults.
func (p *nodeProvisioner) ensureNode(ctx context.Context, n simNode, l *mux.WorkloadClusterListener) error {
	c, err := p.workloadClient(l)
	if err != nil {
		return err
	}
	ready := !n.notReady && !n.vmFailed
	now := metav1.NewTime(p.clock.Now())
	node := &corev1.Node{}
	err = c.Get(ctx, client.ObjectKey{Name: n.name}, node)
	if apierrors.IsNotFound(err) {
		node = workload.Node(workload.NodeSpec{
			Name:           n.name,
			ProviderID:     n.providerID,
			KubeletVersion: n.version,
			InternalIP:     n.ip,
			ControlPlane:   n.controlPlane,
			Capacity:       n.capacity,
			Ready:          ready,
		}, now)
		if n.vmFailed {
			markNodeUnreachable(node, now)
		}
		metav1.SetMetaDataAnnotation(&node.ObjectMeta, MachineUIDAnnotation, string(n.owner))
		return createWithStatus(ctx, c, node)
	}
	if err != nil {
		return err
	}
	if node.Annotations[MachineUIDAnnotation] != string(n.owner) {
		// A Node made before the annotation existed, or by a GoofyMachine the Machine named
		// before: the Machine's infrastructure owns its Node.
		metav1.SetMetaDataAnnotation(&node.ObjectMeta, MachineUIDAnnotation, string(n.owner))
		if err := c.Update(ctx, node); err != nil {
			return err
		}
	}
	if n.vmFailed {
		// The kubelet is gone with the VM: nobody posts the Node's status any more.
		if markNodeUnreachable(node, now) {
			return c.Status().Update(ctx, node)
		}
		return nil
	}
	if workload.SetNodeReady(node, ready, now) {
		return c.Status().Update(ctx, node)
	}
	return nil
}

// ensureEtcd runs the etcd static pod and its member in the fake etcd.
func (p *nodeProvisioner) ensureEtcd(ctx context.Context, n simNode, l *mux.WorkloadClusterListener) error {
	podName := workload.StaticPodName(workload.Etcd, n.name)
	if err := p.ensureStaticPod(ctx, n, l, workload.Etcd); err != nil {
		return err
	}
	if !p.mux.HasEtcdMember(n.key, podName) {
		ca, key, err := p.clusterCA(ctx, n, secret.EtcdCA)
		if err != nil {
			return err
		}
		if err := p.mux.AddEtcdMember(n.key, podName, ca, key); err != nil {
			return err
		}
	}
	// An unhealthy member (or one on a failed VM) fails its calls and its pod is not ready, as
	// kubelet reports a member whose health probe fails.
	unhealthy := n.etcdUnhealthy || n.vmFailed
	if err := p.mux.SetEtcdMemberUnhealthy(n.key, podName, unhealthy); err != nil {
		return err
	}
	c, err := p.workloadClient(l)
	if err != nil {
		return err
	}
	pods, err := p.staticPods(ctx, c, n)
	if err != nil {
		return err
	}
	pod, ok := pods[podName]
	if !ok {
		return nil
	}
	return setPodReadiness(ctx, c, pod, !unhealthy, metav1.NewTime(p.clock.Now()))
}

// ensureAPIServer runs the API server (the first one starts serving), the other control-plane
// static pods, and what kubeadm init creates cluster-wide.
func (p *nodeProvisioner) ensureAPIServer(ctx context.Context, n simNode, l *mux.WorkloadClusterListener) error {
	podName := workload.StaticPodName(workload.KubeAPIServer, n.name)
	for _, component := range []string{workload.KubeAPIServer, workload.KubeControllerManager, workload.KubeScheduler} {
		if err := p.ensureStaticPod(ctx, n, l, component); err != nil {
			return err
		}
	}
	starts := !p.mux.HasAPIServer(n.key, podName)
	// kubeadm's cluster objects: when the API server starts (also after a restart of Goofy), and
	// until this node ensured them all in this store; a Ready node's reconcile leaves them alone.
	objects := starts || !p.recorded(n, l)
	if starts {
		ca, key, err := p.clusterCA(ctx, n, secret.ClusterCA)
		if err != nil {
			return err
		}
		if err := p.mux.AddAPIServer(n.key, podName, ca, key); err != nil {
			return err
		}
	}
	// The cluster reports the newest control-plane version on /version.
	if v, err := version.ParseSemantic(n.version); err == nil {
		if cur, err := version.ParseSemantic(l.Store().KubernetesVersion()); err != nil || cur.LessThan(v) {
			l.Store().SetKubernetesVersion(n.version)
		}
	}
	if !objects {
		return nil
	}
	c, err := p.workloadClient(l)
	if err != nil {
		return err
	}
	network := n.cluster.Spec.ClusterNetwork
	spec := workload.ClusterSpec{
		ClusterName:       n.cluster.Name,
		KubernetesVersion: n.version,
		// The listener, not Cluster.spec.controlPlaneEndpoint: CAPI copies that once, so it keeps
		// an old host after the endpoint was repaired.
		ControlPlaneEndpoint: l.HostPort(),
		DNSDomain:            network.ServiceDomain,
	}
	if len(network.Pods.CIDRBlocks) > 0 {
		spec.PodSubnet = network.Pods.CIDRBlocks[0]
	}
	if len(network.Services.CIDRBlocks) > 0 {
		spec.ServiceSubnet = network.Services.CIDRBlocks[0]
	}
	for _, obj := range workload.ClusterObjects(spec) {
		// An API server that starts (here, or again after a restart of Goofy) brings
		// kube-apiserver's default RBAC policy up to date, as every kube-apiserver start does;
		// the rest is kubeadm's, created once.
		if starts && isBootstrapPolicy(obj) {
			err = reconcileBootstrapPolicy(ctx, c, obj)
		} else {
			err = createIfAbsent(ctx, c, obj)
		}
		if err != nil {
			return err
		}
	}
	p.record(n, l)
	return nil
}

func (p *nodeProvisioner) ensureStaticPod(ctx context.Context, n simNode, l *mux.WorkloadClusterListener, component string) error {
	c, err := p.workloadClient(l)
	if err != nil {
		return err
	}
	pods, err := p.staticPods(ctx, c, n)
	if err != nil {
		return err
	}
	if _, ok := pods[workload.StaticPodName(component, n.name)]; ok {
		return nil
	}
	images, err := p.kubeadmImages(ctx, c, n)
	if err != nil {
		return err
	}
	pod := workload.StaticPodWithImages(component, n.name, n.version, n.ip, metav1.NewTime(p.clock.Now()), images)
	if err := createWithStatus(ctx, c, pod); err != nil {
		return err
	}
	if n.obs != nil {
		n.obs.pods = nil // listed again when needed, with the new pod as stored
	}
	return nil
}

// clusterCA reads a CA CAPI generated for the cluster (<cluster>-ca or <cluster>-etcd).
func (p *nodeProvisioner) clusterCA(ctx context.Context, n simNode, purpose secret.Purpose) (*x509.Certificate, crypto.Signer, error) {
	sec, err := secret.GetFromNamespacedName(ctx, p.client, client.ObjectKey{Namespace: n.cluster.Namespace, Name: n.cluster.Name}, purpose)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the %s secret: %w", secret.Name(n.cluster.Name, purpose), err)
	}
	cert, err := certs.DecodeCertPEM(sec.Data[secret.TLSCrtDataName])
	if err != nil || cert == nil {
		return nil, nil, fmt.Errorf("decoding %s: invalid certificate", sec.Name)
	}
	key, err := certs.DecodePrivateKeyPEM(sec.Data[secret.TLSKeyDataName])
	if err != nil || key == nil {
		return nil, nil, fmt.Errorf("decoding %s: invalid key", sec.Name)
	}
	return cert, key, nil
}

// MachineUIDAnnotation on a workload cluster's Node records the UID of the GoofyMachine that
// registered it: a GoofyMachine releasing without its Machine (owns) proves with it that the Node
// of that name is its own. It is kept in the workload cluster's state, so it survives restarts.
const MachineUIDAnnotation = "goofy.infrastructure.cluster.x-k8s.io/machine-uid"

// owns reports whether n's Node, and the control-plane members named after it, are n.owner's: the
// Node carries the owner's UID. Without a Node (deleted in the workload cluster), the owner's own
// record decides (n.provisioned: a copy's create cannot carry status).
func (p *nodeProvisioner) owns(ctx context.Context, n simNode, l *mux.WorkloadClusterListener) (bool, error) {
	c, err := p.workloadClient(l)
	if err != nil {
		return false, err
	}
	node := &corev1.Node{}
	err = c.Get(ctx, client.ObjectKey{Name: n.name}, node)
	if apierrors.IsNotFound(err) {
		return n.provisioned, nil
	}
	if err != nil {
		return false, err
	}
	return node.Annotations[MachineUIDAnnotation] == string(n.owner), nil
}

// teardown removes what n added to the workload cluster: Node, static pods, etcd member
// (leadership moves if it led) and API server (the last one stops the listener).
func (p *nodeProvisioner) teardown(ctx context.Context, n simNode, l *mux.WorkloadClusterListener) error {
	c, err := p.workloadClient(l)
	if err != nil {
		return err
	}
	p.forget(n)
	if err := client.IgnoreNotFound(c.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name}})); err != nil {
		return err
	}
	if !n.controlPlane {
		return nil
	}
	for _, component := range []string{workload.KubeScheduler, workload.KubeControllerManager, workload.KubeAPIServer, workload.Etcd} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: workload.StaticPodName(component, n.name)}}
		// Kubelet removes a mirror pod at once: there are no containers to wait for.
		if err := client.IgnoreNotFound(c.Delete(ctx, pod, client.GracePeriodSeconds(0))); err != nil {
			return err
		}
	}
	if err := p.mux.DeleteEtcdMember(n.key, workload.StaticPodName(workload.Etcd, n.name)); err != nil {
		return err
	}
	return p.mux.DeleteAPIServer(n.key, workload.StaticPodName(workload.KubeAPIServer, n.name))
}

func internalIP(gm *infrav1.GoofyMachine) string {
	for _, a := range gm.Status.Addresses {
		if a.Type == clusterv1.MachineInternalIP {
			return a.Address
		}
	}
	return ""
}

// createWithStatus creates obj and then writes its status, as kubelet does for Nodes and pods
// (the API server ignores status on create).
func createWithStatus(ctx context.Context, c client.Client, obj client.Object) error {
	withStatus := obj.DeepCopyObject().(client.Object)
	if err := c.Create(ctx, obj); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	}
	withStatus.SetResourceVersion(obj.GetResourceVersion())
	withStatus.SetUID(obj.GetUID())
	withStatus.SetCreationTimestamp(obj.GetCreationTimestamp())
	// CAPI's Machine controller patches a new Node (its annotations, the uninitialized taint) as
	// soon as it sees it, often between the create and this write: as kubelet does with its
	// status updates, take the latest version and write the status again instead of failing.
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		err := c.Status().Update(ctx, withStatus)
		if apierrors.IsConflict(err) {
			if rerr := rebaseStatus(ctx, c, withStatus); rerr != nil {
				return rerr
			}
		}
		return err
	})
}

// rebaseStatus puts obj's status onto the latest version of obj.
func rebaseStatus(ctx context.Context, c client.Client, obj client.Object) error {
	latest := obj.DeepCopyObject().(client.Object)
	if err := c.Get(ctx, client.ObjectKeyFromObject(obj), latest); err != nil {
		return err
	}
	switch o := obj.(type) {
	case *corev1.Node:
		l := latest.(*corev1.Node)
		l.Status = o.Status
		*o = *l
	case *corev1.Pod:
		l := latest.(*corev1.Pod)
		l.Status = o.Status
		*o = *l
	default:
		return fmt.Errorf("no status to carry over for %T", obj)
	}
	return nil
}

func createIfAbsent(ctx context.Context, c client.Client, obj client.Object) error {
	existing := obj.DeepCopyObject().(client.Object)
	err := c.Get(ctx, client.ObjectKeyFromObject(obj), existing)
	if apierrors.IsNotFound(err) {
		err = c.Create(ctx, obj)
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
	}
	return err
}

// kubeadmImages reads the images kubeadm would use on a node that joins now: the ClusterConfiguration
// in the workload cluster's kubeadm-config, which KCP updates before it rolls out machines (e.g. a
// new etcd image tag). Before the first control plane wrote it, kubeadm's defaults.
func kubeadmImages(ctx context.Context, c client.Client) (workload.Images, error) {
	cm := &corev1.ConfigMap{}
	err := c.Get(ctx, client.ObjectKey{Namespace: metav1.NamespaceSystem, Name: "kubeadm-config"}, cm)
	if apierrors.IsNotFound(err) {
		return workload.Images{}, nil
	}
	if err != nil {
		return workload.Images{}, err
	}
	images, err := workload.ImagesFromClusterConfiguration(cm.Data["ClusterConfiguration"])
	if err != nil {
		return workload.Images{}, fmt.Errorf("reading kube-system/kubeadm-config: %w", err)
	}
	return images, nil
}
