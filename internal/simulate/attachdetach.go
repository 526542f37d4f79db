package simulate

import (
	"context"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// attachDetachController is kube-controller-manager's attach/detach controller for CSI volumes,
// with the CSI external attacher of the simulated drivers. For each Node it manages (annotation
// volumes.kubernetes.io/controller-managed-attach-detach, which the kubelet sets), the volumes to
// attach are the CSI PersistentVolumes of the bound claims its pods mount, pods that have not
// finished. A volume to attach gets a VolumeAttachment csi-<sha256(volumeHandle+driver+node)>
// (spec.attacher the driver, spec.source.persistentVolumeName), which the external attacher
// takes (finalizer external-attacher/<driver>) and marks attached; the Node's
// status.volumesAttached then lists it ({name: kubernetes.io/csi/<driver>^<handle>,
// devicePath: ""}). A volume no pod on the node mounts any more is detached once the node's
// kubelet no longer reports it in status.volumesInUse (kubeletvolumes.go): it leaves
// volumesAttached first, then its VolumeAttachment is deleted, and the external attacher lets it
// go. A deleted Node's volumes are detached at once. A volume still reported in use is detached
// anyway, as upstream's reconciler does it, when its node has the node.kubernetes.io/out-of-service
// taint, or when the node is not Ready and 6 minutes (maxWaitForUnmountDuration) have passed since
// the detach was first wanted: a node whose kubelet is gone never unmounts it. Not simulated:
// multi-attach errors, inline CSI volumes.
type attachDetachController struct {
	c   *cluster
	idx int

	mu sync.Mutex
	// detachWanted: since when each VolumeAttachment (by name) no pod needs but its node still
	// mounts, as upstream's actual state of the world keeps a detach request time (in memory:
	// after a restart the wait starts again, as in kube-controller-manager).
	detachWanted map[string]time.Time
}

func newAttachDetachController(c *cluster, idx int) *attachDetachController {
	return &attachDetachController{c: c, idx: idx, detachWanted: map[string]time.Time{}}
}

func (a *attachDetachController) resources() []schema.GroupResource {
	return []schema.GroupResource{podsGR, pvcsGR, pvsGR, nodesGR, volumeAttachmentsGR}
}

func (a *attachDetachController) observe(ch store.Change) {
	switch ch.Resource {
	case podsGR, pvcsGR:
		a.c.enqueueVolumeNodes(a.idx, ch)
	case volumeAttachmentsGR:
		a.c.enqueue(a.idx, changedObject(ch).(*storagev1.VolumeAttachment).Spec.NodeName)
	case nodesGR:
		old, _ := ch.Old.(*corev1.Node)
		node, _ := ch.New.(*corev1.Node)
		if old == nil || node == nil || !slices.Equal(old.Status.VolumesInUse, node.Status.VolumesInUse) ||
			nodeReady(old) != nodeReady(node) || hasTaintKey(old, corev1.TaintNodeOutOfService) != hasTaintKey(node, corev1.TaintNodeOutOfService) {
			a.c.enqueue(a.idx, changedObject(ch).GetName())
		}
	}
}

// attacherFinalizer is the finalizer the CSI external attacher of a driver puts on the
// VolumeAttachments it handles: external-attacher/<driver, every character but letters, digits
// and '-' replaced by '-'>.
func attacherFinalizer(driver string) string {
	return "external-attacher/" + strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		return '-'
	}, driver)
}

// sync reconciles the volumes of one node: detaches first, then attaches, as upstream's
// reconciler, then the node's status.volumesAttached.
func (a *attachDetachController) sync(ctx context.Context, name string) error {
	node, _ := a.c.cache.get(nodesGR, name).(*corev1.Node)
	want := map[corev1.UniqueVolumeName]*corev1.PersistentVolume{}
	inUse := map[corev1.UniqueVolumeName]bool{}
	if node != nil && node.Annotations[annControllerManagedAttach] == "true" {
		want = a.c.nodeVolumes(name)
		for _, v := range node.Status.VolumesInUse {
			inUse[v] = true
		}
	}
	byName := map[string]corev1.UniqueVolumeName{}
	for un, pv := range want {
		byName[attachmentName(pv.Spec.CSI, name)] = un
	}
	attached := map[corev1.UniqueVolumeName]bool{}
	var detach []*storagev1.VolumeAttachment
	existing := map[string]bool{}
	for _, obj := range a.c.cache.list(volumeAttachmentsGR) {
		va := obj.(*storagev1.VolumeAttachment)
		if va.Spec.NodeName != name {
			continue
		}
		existing[va.Name] = true
		finalizer := attacherFinalizer(va.Spec.Attacher)
		if va.DeletionTimestamp != nil {
			// The external attacher detaches it and lets it go.
			if hasFinalizer(va, finalizer) {
				if err := removeFinalizer(ctx, a.c, va, finalizer); err != nil && !apierrors.IsNotFound(err) {
					return err
				}
			}
			continue
		}
		un, wanted := byName[va.Name]
		if !wanted {
			un = a.volumeNameOf(va)
			if un != "" && inUse[un] && !a.forceDetach(node, va.Name) {
				attached[un] = va.Status.Attached // still mounted: it waits for the kubelet
			} else {
				detach = append(detach, va)
			}
			continue
		}
		a.forget(va.Name)
		switch {
		case !hasFinalizer(va, finalizer):
			next := va.DeepCopy()
			next.Finalizers = append(next.Finalizers, finalizer)
			if err := a.c.client.Update(ctx, next); err != nil {
				return err
			}
		case !va.Status.Attached:
			next := va.DeepCopy()
			next.Status.Attached = true
			if err := a.c.client.Status().Update(ctx, next); err != nil {
				return err
			}
			attached[un] = true
		default:
			attached[un] = true
		}
	}
	// The node's status first: a volume leaves volumesAttached before it is detached, and joins
	// it once attached.
	if node != nil {
		if err := a.reportAttached(ctx, node, attached); err != nil {
			return err
		}
	}
	for _, va := range detach {
		if err := a.c.client.Delete(ctx, va, client.Preconditions{UID: &va.UID}); err != nil && !isGone(err) {
			return err
		}
		a.forget(va.Name)
	}
	for vaName, un := range byName {
		if existing[vaName] {
			continue
		}
		pv := want[un]
		va := &storagev1.VolumeAttachment{
			ObjectMeta: metav1.ObjectMeta{Name: vaName},
			Spec: storagev1.VolumeAttachmentSpec{Attacher: pv.Spec.CSI.Driver, NodeName: name,
				Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr.To(pv.Name)}},
		}
		if err := a.c.client.Create(ctx, va); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	return nil
}

// forceDetach reports whether a volume its node still mounts is detached anyway: at once from an
// out-of-service node, from a node that is not Ready once maxWaitForUnmount has passed since the
// detach was first wanted (the node's sync runs again then).
func (a *attachDetachController) forceDetach(node *corev1.Node, vaName string) bool {
	a.mu.Lock()
	since, ok := a.detachWanted[vaName]
	if !ok {
		since = time.Now()
		a.detachWanted[vaName] = since
	}
	a.mu.Unlock()
	if hasTaintKey(node, corev1.TaintNodeOutOfService) {
		return true
	}
	if nodeReady(node) {
		return false
	}
	left := a.c.sim.maxWaitForUnmount() - time.Since(since)
	if left > 0 {
		a.c.after(left, a.idx, node.Name)
		return false
	}
	return true
}

func (a *attachDetachController) forget(vaName string) {
	a.mu.Lock()
	delete(a.detachWanted, vaName)
	a.mu.Unlock()
}

// volumeNameOf is the unique name of the volume a VolumeAttachment attaches, "" when its
// PersistentVolume is gone.
func (a *attachDetachController) volumeNameOf(va *storagev1.VolumeAttachment) corev1.UniqueVolumeName {
	if va.Spec.Source.PersistentVolumeName == nil {
		return ""
	}
	pv, _ := a.c.cache.get(pvsGR, *va.Spec.Source.PersistentVolumeName).(*corev1.PersistentVolume)
	if pv == nil || pv.Spec.CSI == nil {
		return ""
	}
	return csiVolumeName(pv.Spec.CSI)
}

// reportAttached sets the node's status.volumesAttached to the attached volumes, sorted by name.
func (a *attachDetachController) reportAttached(ctx context.Context, node *corev1.Node, attached map[corev1.UniqueVolumeName]bool) error {
	var list []corev1.AttachedVolume
	for un, ok := range attached {
		if ok {
			list = append(list, corev1.AttachedVolume{Name: un})
		}
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Name < list[j].Name })
	if slices.Equal(node.Status.VolumesAttached, list) {
		return nil
	}
	next := node.DeepCopy()
	next.Status.VolumesAttached = list
	return client.IgnoreNotFound(a.c.client.Status().Update(ctx, next))
}

func hasTaintKey(n *corev1.Node, key string) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == key {
			return true
		}
	}
	return false
}
