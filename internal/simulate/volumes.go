package simulate

import (
	"crypto/sha256"
	"fmt"
	"iter"
	"slices"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/component-helpers/storage/ephemeral"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// Volume facts the storage components share (persistentvolume.go, attachdetach.go,
// kubeletvolumes.go and the kubelet's wait for a pod's volumes), as upstream's volume utilities
// state them.

var (
	pvcsGR              = corev1.SchemeGroupVersion.WithResource("persistentvolumeclaims").GroupResource()
	pvsGR               = corev1.SchemeGroupVersion.WithResource("persistentvolumes").GroupResource()
	storageClassesGR    = storagev1.SchemeGroupVersion.WithResource("storageclasses").GroupResource()
	volumeAttachmentsGR = storagev1.SchemeGroupVersion.WithResource("volumeattachments").GroupResource()
)

// CSIDriver is the simulated CSI driver that provisions and attaches the volumes of claims no
// StorageClass describes (a claim without storageClassName, or naming a class that does not
// exist); a claim of an existing StorageClass gets a volume of the class's provisioner, which
// the simulator plays as well.
const CSIDriver = "csi.goofy.infrastructure.cluster.x-k8s.io"

// annControllerManagedAttach marks a Node whose volumes the attach/detach controller attaches
// (the kubelet's --enable-controller-attach-detach, on by default; workload.Node sets it).
const annControllerManagedAttach = "volumes.kubernetes.io/controller-managed-attach-detach"

// volumeClaim is the PersistentVolumeClaim a pod's volume mounts: the claim it names, or for a
// generic ephemeral volume the one the ephemeral volume controller creates for the pod,
// <pod>-<volume>, which is the pod's only if the pod is its controller.
type volumeClaim struct {
	name      string
	ephemeral bool
}

// claimOf returns the claim a volume mounts; ok is false for volumes of other sources.
func claimOf(p *corev1.Pod, vol *corev1.Volume) (_ volumeClaim, ok bool) {
	switch {
	case vol.PersistentVolumeClaim != nil:
		return volumeClaim{name: vol.PersistentVolumeClaim.ClaimName}, true
	case vol.Ephemeral != nil:
		return volumeClaim{name: ephemeral.VolumeClaimName(p, vol), ephemeral: true}, true
	}
	return volumeClaim{}, false
}

// podClaimNames yields the claim of each of a pod's volumes that mounts one.
func podClaimNames(p *corev1.Pod) iter.Seq[volumeClaim] {
	return func(yield func(volumeClaim) bool) {
		for i := range p.Spec.Volumes {
			if vc, ok := claimOf(p, &p.Spec.Volumes[i]); ok && !yield(vc) {
				return
			}
		}
	}
}

// usableClaim returns the pod's claim of that volume from the cache: nil when it is missing,
// or when it is an ephemeral volume's claim the pod does not own.
func (c *cluster) usableClaim(p *corev1.Pod, vc volumeClaim) *corev1.PersistentVolumeClaim {
	claim, _ := c.cache.get(pvcsGR, p.Namespace+"/"+vc.name).(*corev1.PersistentVolumeClaim)
	if claim == nil || vc.ephemeral && ephemeral.VolumeIsForPod(p, claim) != nil {
		return nil
	}
	return claim
}

// claimVolumes: whether a pod mounts any PersistentVolumeClaim.
func claimVolumes(p *corev1.Pod) bool {
	for range podClaimNames(p) {
		return true
	}
	return false
}

// usesClaim: whether a pod mounts the claim of that name (of its namespace).
func usesClaim(p *corev1.Pod, claim string) bool {
	for vc := range podClaimNames(p) {
		if vc.name == claim {
			return true
		}
	}
	return false
}

// csiVolumeName is the unique name the attach/detach controller and the kubelet give a CSI
// volume (node.status.volumesAttached and volumesInUse): kubernetes.io/csi/<driver>^<handle>.
func csiVolumeName(src *corev1.CSIPersistentVolumeSource) corev1.UniqueVolumeName {
	return corev1.UniqueVolumeName("kubernetes.io/csi/" + src.Driver + "^" + src.VolumeHandle)
}

// attachmentName is the name of the VolumeAttachment of a CSI volume on a node, as the CSI
// attacher names it: csi-<sha256 of volume handle, driver and node name>.
func attachmentName(src *corev1.CSIPersistentVolumeSource, node string) string {
	return fmt.Sprintf("csi-%x", sha256.Sum256([]byte(src.VolumeHandle+src.Driver+node)))
}

// podCSIVolumes returns the CSI PersistentVolumes of a pod's bound claims, by unique name; a
// claim that is missing or not bound yet has none.
func (c *cluster) podCSIVolumes(p *corev1.Pod, into map[corev1.UniqueVolumeName]*corev1.PersistentVolume) {
	for vc := range podClaimNames(p) {
		claim := c.usableClaim(p, vc)
		if claim == nil || claim.Spec.VolumeName == "" {
			continue
		}
		if pv, _ := c.cache.get(pvsGR, claim.Spec.VolumeName).(*corev1.PersistentVolume); pv != nil && pv.Spec.CSI != nil {
			into[csiVolumeName(pv.Spec.CSI)] = pv
		}
	}
}

// nodeVolumes returns the CSI volumes the pods on a node mount, those that have not finished
// (a finished pod's volumes are unmounted, as upstream's kubelet and attach/detach controller
// drop a terminated pod's).
func (c *cluster) nodeVolumes(node string) map[corev1.UniqueVolumeName]*corev1.PersistentVolume {
	out := map[corev1.UniqueVolumeName]*corev1.PersistentVolume{}
	for _, p := range c.cache.podsOn(node) {
		if !isTerminal(p) && claimVolumes(p) {
			c.podCSIVolumes(p, out)
		}
	}
	return out
}

// enqueueVolumeNodes queues, for the controller at index ctrl, the nodes whose volumes a change
// of a pod or a claim may alter.
func (c *cluster) enqueueVolumeNodes(ctrl int, ch store.Change) {
	for _, node := range c.volumeNodes(ch) {
		c.enqueue(ctrl, node)
	}
}

// volumeNodes returns the nodes whose volumes a change may alter: a pod with claims that is
// bound, deleted, moves or finishes; a claim bound to another volume or deleted (the nodes of
// the pods that mount it).
func (c *cluster) volumeNodes(ch store.Change) []string {
	switch ch.Resource {
	case podsGR:
		old, _ := ch.Old.(*corev1.Pod)
		pod, _ := ch.New.(*corev1.Pod)
		switch {
		case pod == nil:
			if old != nil && old.Spec.NodeName != "" && claimVolumes(old) {
				return []string{old.Spec.NodeName}
			}
		case pod.Spec.NodeName == "" || !claimVolumes(pod):
		case old == nil || old.Spec.NodeName != pod.Spec.NodeName || isTerminal(old) != isTerminal(pod):
			return []string{pod.Spec.NodeName}
		}
	case pvcsGR:
		old, _ := ch.Old.(*corev1.PersistentVolumeClaim)
		claim, _ := ch.New.(*corev1.PersistentVolumeClaim)
		before, after := "", ""
		if old != nil {
			before = old.Spec.VolumeName
		}
		if claim != nil {
			after = claim.Spec.VolumeName
		}
		if before == after {
			return nil
		}
		obj := changedObject(ch)
		var nodes []string
		for _, p := range c.cache.podsIn(obj.GetNamespace()) {
			if p.Spec.NodeName != "" && usesClaim(p, obj.GetName()) && !slices.Contains(nodes, p.Spec.NodeName) {
				nodes = append(nodes, p.Spec.NodeName)
			}
		}
		return nodes
	}
	return nil
}
