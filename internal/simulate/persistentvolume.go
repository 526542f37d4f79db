package simulate

import (
	"context"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// persistentVolumeController is kube-controller-manager's PersistentVolume controller and its
// pvc-protection controller, with the CSI external provisioner of the simulated drivers.
//
// A claim that is not bound gets the best Available PersistentVolume that satisfies it (its
// class, access modes, volume mode, selector and the smallest capacity that holds the request)
// or one pre-bound to it (claimRef, or the claim's volumeName); failing that it is provisioned:
// the claim gets volume.kubernetes.io/storage-provisioner (and the beta annotation), then the
// provisioner creates PersistentVolume pvc-<claim uid> with pv.kubernetes.io/provisioned-by, the
// requested capacity, the claim's access modes, volume mode and class, a claimRef to the claim
// (uid and resourceVersion, as reference.GetReference fills it), reclaim policy Delete (or the
// class's) and a CSI source (driver: the class's provisioner, else CSIDriver; volumeHandle: the
// claim's uid), which the controller then binds as upstream's bind does: the volume's claimRef
// and phase Bound, the claim's volumeName with pv.kubernetes.io/bind-completed and
// pv.kubernetes.io/bound-by-controller, and its status Bound with the volume's capacity and
// access modes.
//
// Which claims are provisioned: kubeadm's clusters have no StorageClass, so upstream would leave
// a claim without a class Pending; the simulator provisions it (class "" on the volume) as if a
// provisioner served every claim, without inventing a default StorageClass. A claim naming an
// existing StorageClass is provisioned by the class's provisioner with its reclaim policy and
// mount options (not kubernetes.io/no-provisioner); one naming a class that does not exist, by
// CSIDriver. A claim of storageClassName "" asks for a pre-provisioned volume and only binds one;
// so does a claim with a selector (dynamic provisioning does not support selectors). A default
// StorageClass (storageclass.kubernetes.io/is-default-class), when a client created one, is
// assigned to a claim without a class first, as upstream. A claim of a class with
// volumeBindingMode WaitForFirstConsumer binds only a volume pre-bound to it (the scheduler
// pre-binds the volume it chose for the claim's first pod) and is provisioned only once the
// scheduler named its node (volume.kubernetes.io/selected-node); until then it stays Pending.
//
// A claim a scheduled pod mounts keeps kubernetes.io/pvc-protection (the controller adds it to
// every claim, where upstream's admission adds it at creation) until no such pod is left, so its
// deletion waits for its pods. Once the claim is gone its volume is Released and reclaimed: with
// policy Delete it is deleted once no VolumeAttachment refers to it any more (upstream's external
// attacher holds the volume with a finalizer until it is detached), with Retain it stays Released.
type persistentVolumeController struct {
	c   *cluster
	idx int
}

const (
	annBindCompleted          = "pv.kubernetes.io/bind-completed"
	annBoundByController      = "pv.kubernetes.io/bound-by-controller"
	annProvisionedBy          = "pv.kubernetes.io/provisioned-by"
	annStorageProvisioner     = "volume.kubernetes.io/storage-provisioner"
	annBetaStorageProvisioner = "volume.beta.kubernetes.io/storage-provisioner"
	annDefaultStorageClass    = "storageclass.kubernetes.io/is-default-class"
	pvcProtectionFinalizer    = "kubernetes.io/pvc-protection"
	noProvisioner             = "kubernetes.io/no-provisioner"
	// fsTypeParameter is the StorageClass parameter the CSI provisioner reads the fsType from.
	fsTypeParameter = "csi.storage.k8s.io/fstype"

	claimKeyPrefix  = "claim:"
	volumeKeyPrefix = "volume:"
)

func newPersistentVolumeController(c *cluster, idx int) *persistentVolumeController {
	return &persistentVolumeController{c: c, idx: idx}
}

func (p *persistentVolumeController) resources() []schema.GroupResource {
	return []schema.GroupResource{pvcsGR, pvsGR, storageClassesGR, volumeAttachmentsGR, podsGR}
}

func (p *persistentVolumeController) observe(ch store.Change) {
	switch ch.Resource {
	case pvcsGR:
		p.c.enqueue(p.idx, claimKeyPrefix+changedKey(ch))
		if old, _ := ch.Old.(*corev1.PersistentVolumeClaim); ch.New == nil && old != nil && old.Spec.VolumeName != "" {
			p.c.enqueue(p.idx, volumeKeyPrefix+old.Spec.VolumeName) // released
		}
	case pvsGR:
		pv := changedObject(ch).(*corev1.PersistentVolume)
		if ch.New == nil {
			return
		}
		p.c.enqueue(p.idx, volumeKeyPrefix+pv.Name)
		if ref := pv.Spec.ClaimRef; ref != nil {
			// A volume provisioned for or pre-bound to a claim: the claim binds it.
			p.c.enqueue(p.idx, claimKeyPrefix+ref.Namespace+"/"+ref.Name)
		} else if old, _ := ch.Old.(*corev1.PersistentVolume); old == nil || old.Spec.ClaimRef != nil || old.Status.Phase != pv.Status.Phase {
			// A volume free (again): the claims waiting for one may take it.
			for _, obj := range p.c.cache.list(pvcsGR) {
				if claim := obj.(*corev1.PersistentVolumeClaim); !metav1.HasAnnotation(claim.ObjectMeta, annBindCompleted) {
					p.c.enqueue(p.idx, claimKeyPrefix+keyOf(claim))
				}
			}
		}
	case volumeAttachmentsGR:
		if va, _ := ch.Old.(*storagev1.VolumeAttachment); ch.New == nil && va != nil && va.Spec.Source.PersistentVolumeName != nil {
			p.c.enqueue(p.idx, volumeKeyPrefix+*va.Spec.Source.PersistentVolumeName) // detached
		}
	case podsGR:
		// A scheduled pod gone: the claims it held from deletion may go.
		if old, _ := ch.Old.(*corev1.Pod); ch.New == nil && old != nil && old.Spec.NodeName != "" {
			for vc := range podClaimNames(old) {
				key := old.Namespace + "/" + vc.name
				if claim := p.c.cache.get(pvcsGR, key); claim != nil && claim.GetDeletionTimestamp() != nil {
					p.c.enqueue(p.idx, claimKeyPrefix+key)
				}
			}
		}
	}
}

func (p *persistentVolumeController) sync(ctx context.Context, key string) error {
	if name, ok := strings.CutPrefix(key, volumeKeyPrefix); ok {
		return p.syncVolume(ctx, name)
	}
	claim, _ := p.c.cache.get(pvcsGR, strings.TrimPrefix(key, claimKeyPrefix)).(*corev1.PersistentVolumeClaim)
	switch {
	case claim == nil:
		return nil
	case claim.DeletionTimestamp != nil:
		return p.releaseClaim(ctx, claim)
	case !hasFinalizer(claim, pvcProtectionFinalizer):
		next := claim.DeepCopy()
		next.Finalizers = append(next.Finalizers, pvcProtectionFinalizer)
		return p.c.client.Update(ctx, next) // its change syncs the claim again
	case !metav1.HasAnnotation(claim.ObjectMeta, annBindCompleted):
		return p.syncUnboundClaim(ctx, claim)
	}
	return p.syncBoundClaim(ctx, claim)
}

// releaseClaim takes kubernetes.io/pvc-protection off a deleted claim once no scheduled pod
// mounts it (upstream's pvc-protection controller; a pod's deletion queues the claim again).
func (p *persistentVolumeController) releaseClaim(ctx context.Context, claim *corev1.PersistentVolumeClaim) error {
	if !hasFinalizer(claim, pvcProtectionFinalizer) {
		return nil
	}
	for _, pod := range p.c.cache.podsIn(claim.Namespace) {
		if pod.Spec.NodeName != "" && usesClaim(pod, claim.Name) {
			return nil
		}
	}
	return client.IgnoreNotFound(removeFinalizer(ctx, p.c, claim, pvcProtectionFinalizer))
}

// syncUnboundClaim is upstream's syncUnboundClaim: bind the claim's volume, the best match or a
// volume pre-bound to it, else provision one.
func (p *persistentVolumeController) syncUnboundClaim(ctx context.Context, claim *corev1.PersistentVolumeClaim) error {
	if claim.Spec.VolumeName != "" {
		// The user asked for a volume.
		pv, _ := p.c.cache.get(pvsGR, claim.Spec.VolumeName).(*corev1.PersistentVolume)
		switch {
		case pv == nil:
			return nil // Pending until it exists (its creation queues the claims waiting)
		case pv.Spec.ClaimRef == nil:
			if !satisfies(pv, claim) {
				return nil
			}
			return p.bind(ctx, pv, claim)
		case boundToClaim(pv, claim):
			return p.bind(ctx, pv, claim)
		}
		return nil // bound to another claim
	}
	delay := p.c.delayBinding(claim)
	if pv := p.findVolume(claim, delay); pv != nil {
		return p.bind(ctx, pv, claim)
	}
	if delay && !metav1.HasAnnotation(claim.ObjectMeta, annSelectedNode) {
		return nil // Pending until the scheduler places its first pod
	}
	if claim.Spec.StorageClassName == nil {
		if class := p.defaultClass(); class != nil {
			next := claim.DeepCopy()
			next.Spec.StorageClassName = &class.Name
			return p.c.client.Update(ctx, next) // its change syncs the claim again
		}
	}
	provisioner, class, ok := p.provisionerFor(claim)
	if !ok {
		return nil // Pending until a volume that matches it is created
	}
	if claim.Annotations[annStorageProvisioner] != provisioner {
		// Upstream's setClaimProvisioner: the sign for the external provisioner.
		next := claim.DeepCopy()
		metav1.SetMetaDataAnnotation(&next.ObjectMeta, annBetaStorageProvisioner, provisioner)
		metav1.SetMetaDataAnnotation(&next.ObjectMeta, annStorageProvisioner, provisioner)
		return p.c.client.Update(ctx, next) // its change syncs the claim again
	}
	return p.provision(ctx, claim, provisioner, class)
}

// provision is the CSI external provisioner's part: it creates the claim's volume, pre-bound to
// it; the volume's creation queues the claim, which then binds it.
func (p *persistentVolumeController) provision(ctx context.Context, claim *corev1.PersistentVolumeClaim, provisioner string, class *storagev1.StorageClass) error {
	name := "pvc-" + string(claim.UID)
	if p.c.cache.get(pvsGR, name) != nil {
		return nil
	}
	policy := corev1.PersistentVolumeReclaimDelete
	src := &corev1.CSIPersistentVolumeSource{Driver: provisioner, VolumeHandle: string(claim.UID)}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{annProvisionedBy: provisioner}},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: requested(claim)},
			AccessModes:                   slices.Clone(claim.Spec.AccessModes),
			ClaimRef:                      claimRef(claim),
			PersistentVolumeReclaimPolicy: policy,
			StorageClassName:              claimClass(claim),
			VolumeMode:                    ptr.To(volumeMode(claim.Spec.VolumeMode)),
			PersistentVolumeSource:        corev1.PersistentVolumeSource{CSI: src},
		},
	}
	if class != nil {
		if class.ReclaimPolicy != nil {
			pv.Spec.PersistentVolumeReclaimPolicy = *class.ReclaimPolicy
		}
		pv.Spec.MountOptions = slices.Clone(class.MountOptions)
		src.FSType = class.Parameters[fsTypeParameter]
	}
	if err := p.c.client.Create(ctx, pv); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// provisionerFor returns who provisions a claim's volume, and its StorageClass when one exists;
// false when the claim is not provisioned (see persistentVolumeController).
func (p *persistentVolumeController) provisionerFor(claim *corev1.PersistentVolumeClaim) (string, *storagev1.StorageClass, bool) {
	if claim.Spec.Selector != nil || claim.Spec.StorageClassName != nil && *claim.Spec.StorageClassName == "" {
		return "", nil, false
	}
	if claim.Spec.StorageClassName == nil {
		return CSIDriver, nil, true
	}
	class, _ := p.c.cache.get(storageClassesGR, *claim.Spec.StorageClassName).(*storagev1.StorageClass)
	switch {
	case class == nil:
		return CSIDriver, nil, true
	case class.Provisioner == noProvisioner || class.Provisioner == "":
		return "", nil, false
	}
	return class.Provisioner, class, true
}

// defaultClass is the default StorageClass, the newest of several, as upstream's GetDefaultClass.
func (p *persistentVolumeController) defaultClass() *storagev1.StorageClass {
	var out *storagev1.StorageClass
	for _, obj := range p.c.cache.list(storageClassesGR) {
		class := obj.(*storagev1.StorageClass)
		if class.Annotations[annDefaultStorageClass] != "true" {
			continue
		}
		if out == nil || class.CreationTimestamp.After(out.CreationTimestamp.Time) ||
			class.CreationTimestamp.Equal(&out.CreationTimestamp) && class.Name < out.Name {
			out = class
		}
	}
	return out
}

// findVolume is upstream's findBestMatchForClaim: a volume pre-bound to the claim, else (unless
// the claim's binding waits for its first consumer: the scheduler chooses) the smallest
// Available volume that satisfies it.
func (p *persistentVolumeController) findVolume(claim *corev1.PersistentVolumeClaim, delay bool) *corev1.PersistentVolume {
	return p.c.matchingVolume(claim, nil, nil, delay)
}

// matchingVolume is upstream's FindMatchingVolume: a volume pre-bound to the claim, else the
// smallest Available volume that satisfies it, not among chosen, that the node (when set) may
// use; without a node, a claim whose binding waits for its first consumer gets only a pre-bound
// one.
func (c *cluster) matchingVolume(claim *corev1.PersistentVolumeClaim, node *corev1.Node, chosen map[string]bool, delay bool) *corev1.PersistentVolume {
	var best *corev1.PersistentVolume
	for _, obj := range c.cache.list(pvsGR) {
		pv := obj.(*corev1.PersistentVolume)
		if pv.DeletionTimestamp != nil || chosen[pv.Name] || node != nil && !volumeAllows(pv, node) {
			continue
		}
		if pv.Spec.ClaimRef != nil {
			if boundToClaim(pv, claim) && volumeMode(pv.Spec.VolumeMode) == volumeMode(claim.Spec.VolumeMode) {
				return pv
			}
			continue
		}
		if node == nil && delay || pv.Status.Phase != corev1.VolumeAvailable || !satisfies(pv, claim) {
			continue
		}
		if capacity := quantity(pv.Spec.Capacity, corev1.ResourceStorage); best == nil || capacity.Cmp(quantity(best.Spec.Capacity, corev1.ResourceStorage)) < 0 {
			best = pv
		}
	}
	return best
}

// satisfies: the volume is of the claim's class, volume mode and selector, offers every access
// mode the claim asks for and holds the requested storage.
func satisfies(pv *corev1.PersistentVolume, claim *corev1.PersistentVolumeClaim) bool {
	if pv.Spec.StorageClassName != claimClass(claim) || volumeMode(pv.Spec.VolumeMode) != volumeMode(claim.Spec.VolumeMode) {
		return false
	}
	if claim.Spec.Selector != nil {
		sel, err := metav1.LabelSelectorAsSelector(claim.Spec.Selector)
		if err != nil || !sel.Matches(labels.Set(pv.Labels)) {
			return false
		}
	}
	for _, mode := range claim.Spec.AccessModes {
		found := false
		for _, m := range pv.Spec.AccessModes {
			found = found || m == mode
		}
		if !found {
			return false
		}
	}
	capacity := quantity(pv.Spec.Capacity, corev1.ResourceStorage)
	return capacity.Cmp(requested(claim)) >= 0
}

// boundToClaim is upstream's IsVolumeBoundToClaim: the volume's claimRef names the claim, with
// its uid or none (pre-bound).
func boundToClaim(pv *corev1.PersistentVolume, claim *corev1.PersistentVolumeClaim) bool {
	ref := pv.Spec.ClaimRef
	return ref != nil && ref.Name == claim.Name && ref.Namespace == claim.Namespace && (ref.UID == "" || ref.UID == claim.UID)
}

func claimClass(claim *corev1.PersistentVolumeClaim) string {
	if claim.Spec.StorageClassName != nil {
		return *claim.Spec.StorageClassName
	}
	return ""
}

func volumeMode(m *corev1.PersistentVolumeMode) corev1.PersistentVolumeMode {
	if m == nil {
		return corev1.PersistentVolumeFilesystem
	}
	return *m
}

func requested(claim *corev1.PersistentVolumeClaim) resource.Quantity {
	return quantity(claim.Spec.Resources.Requests, corev1.ResourceStorage)
}

// claimRef is the reference a volume keeps to its claim, as reference.GetReference makes it.
func claimRef(claim *corev1.PersistentVolumeClaim) *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: claim.Namespace,
		Name: claim.Name, UID: claim.UID, ResourceVersion: claim.ResourceVersion}
}

// bind is upstream's bind: the volume first (claimRef, then phase Bound), then the claim
// (volumeName and annotations, then status Bound).
func (p *persistentVolumeController) bind(ctx context.Context, pv *corev1.PersistentVolume, claim *corev1.PersistentVolumeClaim) error {
	pv, err := p.c.claimVolume(ctx, pv, claim)
	if err != nil {
		return err
	}
	pv, err = p.setVolumePhase(ctx, pv, corev1.VolumeBound, "")
	if err != nil {
		return err
	}
	if claim.Spec.VolumeName != pv.Name || !metav1.HasAnnotation(claim.ObjectMeta, annBindCompleted) {
		next := claim.DeepCopy()
		if next.Spec.VolumeName != pv.Name {
			next.Spec.VolumeName = pv.Name
			if !metav1.HasAnnotation(next.ObjectMeta, annBoundByController) {
				metav1.SetMetaDataAnnotation(&next.ObjectMeta, annBoundByController, "yes")
			}
		}
		metav1.SetMetaDataAnnotation(&next.ObjectMeta, annBindCompleted, "yes")
		if err := p.c.client.Update(ctx, next); err != nil {
			return err
		}
		claim = next
	}
	return p.setClaimPhase(ctx, claim, corev1.ClaimBound, pv)
}

// claimVolume is upstream's GetBindVolumeToClaim and the volume's update: its claimRef names
// the claim with its uid (pv.kubernetes.io/bound-by-controller unless the volume was pre-bound
// to it). It returns the volume as it is now.
func (c *cluster) claimVolume(ctx context.Context, pv *corev1.PersistentVolume, claim *corev1.PersistentVolumeClaim) (*corev1.PersistentVolume, error) {
	if ref := pv.Spec.ClaimRef; ref != nil && ref.Name == claim.Name && ref.Namespace == claim.Namespace && ref.UID == claim.UID {
		return pv, nil
	}
	next := pv.DeepCopy()
	if !boundToClaim(pv, claim) {
		metav1.SetMetaDataAnnotation(&next.ObjectMeta, annBoundByController, "yes")
	}
	next.Spec.ClaimRef = claimRef(claim)
	if err := c.client.Update(ctx, next); err != nil {
		return nil, err
	}
	return next, nil
}

// syncBoundClaim is upstream's syncBoundClaim: a claim whose volume is gone or bound elsewhere
// is Lost; otherwise the binding is completed if a step of it is missing.
func (p *persistentVolumeController) syncBoundClaim(ctx context.Context, claim *corev1.PersistentVolumeClaim) error {
	if claim.Spec.VolumeName == "" {
		return p.setClaimPhase(ctx, claim, corev1.ClaimLost, nil)
	}
	pv, _ := p.c.cache.get(pvsGR, claim.Spec.VolumeName).(*corev1.PersistentVolume)
	switch {
	case pv == nil:
		return p.setClaimPhase(ctx, claim, corev1.ClaimLost, nil)
	case pv.Spec.ClaimRef == nil || pv.Spec.ClaimRef.UID == claim.UID:
		return p.bind(ctx, pv, claim)
	}
	return p.setClaimPhase(ctx, claim, corev1.ClaimLost, nil)
}

// setClaimPhase is upstream's updateClaimStatus: the phase, and the volume's access modes and
// (when the claim becomes bound) capacity, or none without a volume.
func (p *persistentVolumeController) setClaimPhase(ctx context.Context, claim *corev1.PersistentVolumeClaim, phase corev1.PersistentVolumeClaimPhase, pv *corev1.PersistentVolume) error {
	next := claim.DeepCopy()
	next.Status.Phase = phase
	if pv == nil {
		next.Status.AccessModes, next.Status.Capacity = nil, nil
	} else {
		next.Status.AccessModes = slices.Clone(pv.Spec.AccessModes)
		if claim.Status.Phase != phase {
			next.Status.Capacity = pv.Spec.Capacity.DeepCopy()
		}
	}
	if next.Status.String() == claim.Status.String() {
		return nil
	}
	return p.c.client.Status().Update(ctx, next)
}

// setVolumePhase is upstream's updateVolumePhase.
func (p *persistentVolumeController) setVolumePhase(ctx context.Context, pv *corev1.PersistentVolume, phase corev1.PersistentVolumePhase, message string) (*corev1.PersistentVolume, error) {
	if pv.Status.Phase == phase {
		return pv, nil
	}
	next := pv.DeepCopy()
	next.Status.Phase, next.Status.Message = phase, message
	next.Status.LastPhaseTransitionTime = nil // the API server sets it
	if err := p.c.client.Status().Update(ctx, next); err != nil {
		return nil, err
	}
	return next, nil
}

// syncVolume is upstream's syncVolume: a free volume is Available; one whose claim is gone is
// Released and reclaimed; one bound to a claim that is bound elsewhere is given up.
func (p *persistentVolumeController) syncVolume(ctx context.Context, name string) error {
	pv, _ := p.c.cache.get(pvsGR, name).(*corev1.PersistentVolume)
	if pv == nil {
		return nil
	}
	ref := pv.Spec.ClaimRef
	if ref == nil || ref.UID == "" {
		_, err := p.setVolumePhase(ctx, pv, corev1.VolumeAvailable, "")
		return err
	}
	claim, _ := p.c.cache.get(pvcsGR, ref.Namespace+"/"+ref.Name).(*corev1.PersistentVolumeClaim)
	if claim != nil && claim.UID != ref.UID {
		claim = nil // deleted, and another claim of the name made
	}
	switch {
	case claim == nil:
		return p.release(ctx, pv)
	case claim.Spec.VolumeName == "":
		p.c.enqueue(p.idx, claimKeyPrefix+keyOf(claim)) // the claim finishes the binding
		return nil
	case claim.Spec.VolumeName == pv.Name:
		_, err := p.setVolumePhase(ctx, pv, corev1.VolumeBound, "")
		return err
	case metav1.HasAnnotation(pv.ObjectMeta, annProvisionedBy) && pv.Spec.PersistentVolumeReclaimPolicy == corev1.PersistentVolumeReclaimDelete:
		return p.release(ctx, pv) // provisioned for a claim that got another volume
	}
	// Bound to a claim that is bound elsewhere: upstream's unbindVolume.
	next := pv.DeepCopy()
	if metav1.HasAnnotation(pv.ObjectMeta, annBoundByController) {
		next.Spec.ClaimRef = nil
		delete(next.Annotations, annBoundByController)
	} else {
		next.Spec.ClaimRef.UID = ""
	}
	if err := p.c.client.Update(ctx, next); err != nil {
		return err
	}
	_, err := p.setVolumePhase(ctx, next, corev1.VolumeAvailable, "")
	return err
}

// release marks a volume whose claim is gone Released and reclaims it: Retain keeps it, Delete
// deletes it once it is detached everywhere; a volume of another policy (Recycle: no recycler
// serves CSI volumes) fails.
func (p *persistentVolumeController) release(ctx context.Context, pv *corev1.PersistentVolume) error {
	if pv.Status.Phase != corev1.VolumeReleased && pv.Status.Phase != corev1.VolumeFailed {
		var err error
		if pv, err = p.setVolumePhase(ctx, pv, corev1.VolumeReleased, ""); err != nil {
			return err
		}
	}
	switch pv.Spec.PersistentVolumeReclaimPolicy {
	case corev1.PersistentVolumeReclaimRetain:
		return nil
	case corev1.PersistentVolumeReclaimDelete:
		if pv.DeletionTimestamp != nil || p.attached(pv.Name) {
			return nil // its VolumeAttachments' removal queues it again
		}
		return client.IgnoreNotFound(p.c.client.Delete(ctx, pv, client.Preconditions{UID: &pv.UID}))
	case corev1.PersistentVolumeReclaimRecycle:
		_, err := p.setVolumePhase(ctx, pv, corev1.VolumeFailed, "No recycler plugin found for the volume!")
		return err
	}
	_, err := p.setVolumePhase(ctx, pv, corev1.VolumeFailed, "Volume has unrecognized PersistentVolumeReclaimPolicy")
	return err
}

// attached: a VolumeAttachment still refers to the volume.
func (p *persistentVolumeController) attached(pv string) bool {
	for _, obj := range p.c.cache.list(volumeAttachmentsGR) {
		if src := obj.(*storagev1.VolumeAttachment).Spec.Source.PersistentVolumeName; src != nil && *src == pv {
			return true
		}
	}
	return false
}
