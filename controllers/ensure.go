package controllers

import (
	"context"
	"crypto"
	"crypto/x509"
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/certs"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/secret"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/goofy-capi/cluster-api-provider-goofy/api/v1alpha1"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/mux"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/workload"
)

// ensureVM gives the machine its identity: provider ID, addresses and failure domain.
func (r *GoofyMachineReconciler) ensureVM(ctx context.Context, s *machineScope, _ *mux.WorkloadClusterListener) error {
	gm := s.gm
	if gm.Spec.ProviderID == "" {
		gm.Spec.ProviderID = simulatedProviderID(s)
	}
	if s.instance != nil {
		// Azure: the instance's own identity.
		gm.Status.Addresses = []clusterv1.MachineAddress{
			{Type: clusterv1.MachineHostName, Address: s.instance.Name},
			{Type: clusterv1.MachineInternalIP, Address: s.instance.VPCIP},
		}
		if s.instance.Zone != "" {
			gm.Status.FailureDomain = s.instance.Zone
		}
		gm.Status.Initialization.Provisioned = ptr.To(true)
		return nil
	}
	if s.azure() {
		return nil // bound instance gone: keep the recorded identity
	}
	ip, err := r.nodeIP(ctx, s)
	if err != nil {
		return err
	}
	gm.Status.Addresses = []clusterv1.MachineAddress{
		{Type: clusterv1.MachineHostName, Address: s.nodeName()},
		{Type: clusterv1.MachineInternalIP, Address: ip.String()},
	}
	if s.machine.Spec.FailureDomain != "" {
		gm.Status.FailureDomain = s.machine.Spec.FailureDomain
	}
	gm.Status.Initialization.Provisioned = ptr.To(true)
	return nil
}

// nodeIP returns the machine's InternalIP: the one recorded in its status, else a new one unique in
// the cluster (checked against the other machines' recorded IPs, for the first machine after a restart).
func (r *GoofyMachineReconciler) nodeIP(ctx context.Context, s *machineScope) (netip.Addr, error) {
	for _, a := range s.gm.Status.Addresses {
		if a.Type == clusterv1.MachineInternalIP {
			ip, err := netip.ParseAddr(a.Address)
			if err != nil {
				return netip.Addr{}, fmt.Errorf("recorded InternalIP %q: %w", a.Address, err)
			}
			return ip, r.ips.reserve(s.key, s.gm.Name, ip)
		}
	}
	others := &infrav1.GoofyMachineList{}
	if err := r.Client.List(ctx, others, client.InNamespace(s.gm.Namespace), client.MatchingLabels{clusterv1.ClusterNameLabel: s.cluster.Name}); err != nil {
		return netip.Addr{}, err
	}
	taken := map[netip.Addr]bool{}
	for _, o := range others.Items {
		if o.Name == s.gm.Name {
			continue
		}
		for _, a := range o.Status.Addresses {
			if ip, err := netip.ParseAddr(a.Address); err == nil && a.Type == clusterv1.MachineInternalIP {
				taken[ip] = true
			}
		}
	}
	return r.ips.allocate(s.key, s.gm.Name, func(ip netip.Addr) bool { return taken[ip] })
}

// simulatedProviderID is the provider ID of a simulated machine.
func simulatedProviderID(s *machineScope) string {
	return fmt.Sprintf("goofy://%s/%s/%s", s.gm.Namespace, s.cluster.Name, s.gm.Name)
}

func internalIP(gm *infrav1.GoofyMachine) string {
	for _, a := range gm.Status.Addresses {
		if a.Type == clusterv1.MachineInternalIP {
			return a.Address
		}
	}
	return ""
}

// ensureNode registers the Node as kubelet would, and keeps its Ready condition in line with the
// failure-injection annotation.
func (r *GoofyMachineReconciler) ensureNode(ctx context.Context, s *machineScope, l *mux.WorkloadClusterListener) error {
	c, err := l.GetClient()
	if err != nil {
		return err
	}
	ready := !s.faults.nodeNotReady && !s.faults.vmFailed && !s.instanceGone
	now := metav1.NewTime(r.Clock.Now())
	node := &corev1.Node{}
	err = c.Get(ctx, client.ObjectKey{Name: s.nodeName()}, node)
	if apierrors.IsNotFound(err) {
		node = workload.Node(workload.NodeSpec{
			Name:           s.nodeName(),
			ProviderID:     s.gm.Spec.ProviderID,
			KubeletVersion: s.machine.Spec.Version,
			InternalIP:     internalIP(s.gm),
			ControlPlane:   s.controlPlane(),
			Capacity:       machineCapacity(&s.gm.Spec),
			Ready:          ready,
		}, now)
		if s.faults.vmFailed {
			markNodeUnreachable(node, now)
		}
		metav1.SetMetaDataAnnotation(&node.ObjectMeta, MachineUIDAnnotation, string(s.gm.UID))
		return createWithStatus(ctx, c, node)
	}
	if err != nil {
		return err
	}
	if node.Annotations[MachineUIDAnnotation] != string(s.gm.UID) {
		// A Node made before the annotation existed, or by a GoofyMachine the Machine named
		// before: the Machine's infrastructure owns its Node.
		metav1.SetMetaDataAnnotation(&node.ObjectMeta, MachineUIDAnnotation, string(s.gm.UID))
		if err := c.Update(ctx, node); err != nil {
			return err
		}
	}
	if s.faults.vmFailed {
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
func (r *GoofyMachineReconciler) ensureEtcd(ctx context.Context, s *machineScope, l *mux.WorkloadClusterListener) error {
	podName := workload.StaticPodName(workload.Etcd, s.nodeName())
	if err := r.ensureStaticPod(ctx, s, l, workload.Etcd); err != nil {
		return err
	}
	if !r.Mux.HasEtcdMember(s.key, podName) {
		ca, key, err := r.clusterCA(ctx, s, secret.EtcdCA)
		if err != nil {
			return err
		}
		if err := r.Mux.AddEtcdMember(s.key, podName, ca, key); err != nil {
			return err
		}
	}
	// An unhealthy member (or one on a failed VM) fails its calls and its pod is not ready, as
	// kubelet reports a member whose health probe fails.
	unhealthy := s.faults.etcdUnhealthy || s.faults.vmFailed
	if err := r.Mux.SetEtcdMemberUnhealthy(s.key, podName, unhealthy); err != nil {
		return err
	}
	c, err := l.GetClient()
	if err != nil {
		return err
	}
	return setPodReady(ctx, c, metav1.NamespaceSystem, podName, !unhealthy, metav1.NewTime(r.Clock.Now()))
}

// ensureAPIServer runs the API server (the first one starts serving), the other control-plane
// static pods, and what kubeadm init creates cluster-wide.
func (r *GoofyMachineReconciler) ensureAPIServer(ctx context.Context, s *machineScope, l *mux.WorkloadClusterListener) error {
	podName := workload.StaticPodName(workload.KubeAPIServer, s.nodeName())
	for _, component := range []string{workload.KubeAPIServer, workload.KubeControllerManager, workload.KubeScheduler} {
		if err := r.ensureStaticPod(ctx, s, l, component); err != nil {
			return err
		}
	}
	starts := !r.Mux.HasAPIServer(s.key, podName)
	if starts {
		ca, key, err := r.clusterCA(ctx, s, secret.ClusterCA)
		if err != nil {
			return err
		}
		if err := r.Mux.AddAPIServer(s.key, podName, ca, key); err != nil {
			return err
		}
	}
	// The cluster reports the newest control-plane version on /version.
	if v, err := version.ParseSemantic(s.machine.Spec.Version); err == nil {
		if cur, err := version.ParseSemantic(l.Store().KubernetesVersion()); err != nil || cur.LessThan(v) {
			l.Store().SetKubernetesVersion(s.machine.Spec.Version)
		}
	}
	c, err := l.GetClient()
	if err != nil {
		return err
	}
	network := s.cluster.Spec.ClusterNetwork
	spec := workload.ClusterSpec{
		ClusterName:       s.cluster.Name,
		KubernetesVersion: s.machine.Spec.Version,
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
	return nil
}

func (r *GoofyMachineReconciler) ensureStaticPod(ctx context.Context, s *machineScope, l *mux.WorkloadClusterListener, component string) error {
	c, err := l.GetClient()
	if err != nil {
		return err
	}
	images, err := kubeadmImages(ctx, c)
	if err != nil {
		return err
	}
	pod := workload.StaticPodWithImages(component, s.nodeName(), s.machine.Spec.Version, internalIP(s.gm), metav1.NewTime(r.Clock.Now()), images)
	err = c.Get(ctx, client.ObjectKeyFromObject(pod), &corev1.Pod{})
	if apierrors.IsNotFound(err) {
		return createWithStatus(ctx, c, pod)
	}
	return err
}

// clusterCA reads a CA CAPI generated for the cluster (<cluster>-ca or <cluster>-etcd).
func (r *GoofyMachineReconciler) clusterCA(ctx context.Context, s *machineScope, purpose secret.Purpose) (*x509.Certificate, crypto.Signer, error) {
	sec, err := secret.GetFromNamespacedName(ctx, r.Client, client.ObjectKey{Namespace: s.cluster.Namespace, Name: s.cluster.Name}, purpose)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the %s secret: %w", secret.Name(s.cluster.Name, purpose), err)
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
// registered it: a GoofyMachine releasing without its Machine (ownsWorkloadNode) proves with it
// that the Node of that name is its own. It is kept in the workload cluster's state, so it
// survives restarts.
const MachineUIDAnnotation = "goofy.infrastructure.cluster.x-k8s.io/machine-uid"

// ownsWorkloadNode reports whether the machine's Node, and the control-plane members named after
// it, are gm's: the Node carries gm's UID. Without a Node (deleted in the workload cluster), gm's
// own status decides: phases that gm's reconciles completed (a copy's create cannot carry status).
func ownsWorkloadNode(ctx context.Context, s *machineScope, l *mux.WorkloadClusterListener) (bool, error) {
	c, err := l.GetClient()
	if err != nil {
		return false, err
	}
	node := &corev1.Node{}
	err = c.Get(ctx, client.ObjectKey{Name: s.nodeName()}, node)
	if apierrors.IsNotFound(err) {
		return s.gm.Spec.ProviderID != "" && conditions.IsTrue(s.gm, infrav1.NodeProvisionedCondition), nil
	}
	if err != nil {
		return false, err
	}
	return node.Annotations[MachineUIDAnnotation] == string(s.gm.UID), nil
}

// teardown removes what the machine added to the workload cluster: Node, static pods, etcd member
// (leadership moves if it led) and API server (the last one stops the listener).
func (r *GoofyMachineReconciler) teardown(ctx context.Context, s *machineScope, l *mux.WorkloadClusterListener) error {
	c, err := l.GetClient()
	if err != nil {
		return err
	}
	if err := client.IgnoreNotFound(c.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: s.nodeName()}})); err != nil {
		return err
	}
	if !s.controlPlane() {
		return nil
	}
	for _, component := range []string{workload.KubeScheduler, workload.KubeControllerManager, workload.KubeAPIServer, workload.Etcd} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: workload.StaticPodName(component, s.nodeName())}}
		// Kubelet removes a mirror pod at once: there are no containers to wait for.
		if err := client.IgnoreNotFound(c.Delete(ctx, pod, client.GracePeriodSeconds(0))); err != nil {
			return err
		}
	}
	if err := r.Mux.DeleteEtcdMember(s.key, workload.StaticPodName(workload.Etcd, s.nodeName())); err != nil {
		return err
	}
	return r.Mux.DeleteAPIServer(s.key, workload.StaticPodName(workload.KubeAPIServer, s.nodeName()))
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
	return c.Status().Update(ctx, withStatus)
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
