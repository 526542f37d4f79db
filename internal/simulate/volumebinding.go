package simulate

import (
	"context"
	"fmt"
	"iter"
	"slices"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-helpers/storage/ephemeral"
)

// The scheduler's part in volumes, kube-scheduler's VolumeBinding plugin
// (pkg/scheduler/framework/plugins/volumebinding):
//
//   - PreFilter: a pod whose claim is missing, Lost or being deleted, or whose claim of Immediate
//     binding (no class, or a class without WaitForFirstConsumer) is not bound yet, fits no node
//     (UnschedulableAndUnresolvable) until the claim changes;
//   - Filter: a node must satisfy the node affinity of the volumes the pod's bound claims have;
//     a claim of a WaitForFirstConsumer class that is not bound yet needs, on that node, an
//     Available volume that satisfies it (and whose node affinity the node matches), or else
//     dynamic provisioning by its class (a provisioner, allowedTopologies the node's labels
//     match); a claim whose volume.kubernetes.io/selected-node names another node fits only there;
//   - and VolumeRestrictions' part in claims: a claim of access mode ReadWriteOncePod another
//     scheduled pod uses rules out every node (Unschedulable: preemption might help);
//   - PreBind: the chosen volumes get the claim's claimRef, the claims to provision the
//     selected-node annotation, and the pod is bound once the PersistentVolume controller has
//     bound every claim (the scheduler holds the node's room for it meanwhile).

const annSelectedNode = "volume.kubernetes.io/selected-node"

// Upstream's reasons for a node the pod's volumes rule out.
const (
	reasonVolumeNodeConflict = "node(s) didn't match PersistentVolume's node affinity"
	reasonVolumeBindConflict = "node(s) didn't find available persistent volumes to bind"
	reasonVolumeNotExist     = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"
	reasonReadWriteOncePod   = "node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode already in-use by another pod"
)

// podClaims are a pod's claims as VolumeBinding's PreFilter sorts them.
type podClaims struct {
	bound   []*corev1.PersistentVolumeClaim // bound and bind-completed
	delayed []*corev1.PersistentVolumeClaim // not bound, of a WaitForFirstConsumer class
	// inUse: a claim of access mode ReadWriteOncePod is used by another scheduled pod.
	inUse bool
}

// preFilterVolumes returns the pod's claims, or upstream's message when the pod fits no node
// because of them.
func (s *scheduler) preFilterVolumes(pod *corev1.Pod) (*podClaims, string) {
	out := &podClaims{}
	immediate := false
	for vc, claim := range s.c.podClaims(pod) {
		name := vc.name
		switch {
		case claim == nil && vc.ephemeral:
			// Normal right after the pod's creation.
			return nil, fmt.Sprintf("waiting for ephemeral volume controller to create the persistentvolumeclaim %q", name)
		case claim == nil:
			return nil, fmt.Sprintf("persistentvolumeclaim %q not found", name)
		case claim.Status.Phase == corev1.ClaimLost:
			return nil, fmt.Sprintf("persistentvolumeclaim %q bound to non-existent persistentvolume %q", claim.Name, claim.Spec.VolumeName)
		case claim.DeletionTimestamp != nil:
			return nil, fmt.Sprintf("persistentvolumeclaim %q is being deleted", claim.Name)
		}
		if vc.ephemeral {
			if err := ephemeral.VolumeIsForPod(pod, claim); err != nil {
				return nil, err.Error()
			}
		}
		if slices.Contains(claim.Spec.AccessModes, corev1.ReadWriteOncePod) && s.claimInUse(pod, name) {
			out.inUse = true
		}
		switch {
		case claimFullyBound(claim):
			out.bound = append(out.bound, claim)
		case claim.Spec.VolumeName == "" && s.c.delayBinding(claim):
			out.delayed = append(out.delayed, claim)
		default:
			// Upstream checks every claim before it reports the unbound ones.
			immediate = true
		}
	}
	if immediate {
		return nil, "pod has unbound immediate PersistentVolumeClaims"
	}
	return out, ""
}

// podClaims yields each claim a pod mounts, with the claim of that name (nil when missing; for
// an ephemeral volume, whoever owns it).
func (c *cluster) podClaims(pod *corev1.Pod) iter.Seq2[volumeClaim, *corev1.PersistentVolumeClaim] {
	return func(yield func(volumeClaim, *corev1.PersistentVolumeClaim) bool) {
		for vc := range podClaimNames(pod) {
			claim, _ := c.cache.get(pvcsGR, pod.Namespace+"/"+vc.name).(*corev1.PersistentVolumeClaim)
			if !yield(vc, claim) {
				return
			}
		}
	}
}

// claimInUse: a scheduled pod other than pod that has not finished (or one placed while its
// claims are bound) mounts the claim, as VolumeRestrictions counts them.
func (s *scheduler) claimInUse(pod *corev1.Pod, claim string) bool {
	for _, p := range s.c.cache.podsIn(pod.Namespace) {
		if p.UID != pod.UID && (p.Spec.NodeName != "" && !isTerminal(p) || s.isAssumed(keyOf(p))) && usesClaim(p, claim) {
			return true
		}
	}
	return false
}

func (s *scheduler) isAssumed(key string) bool {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	return s.assumed[key] != ""
}

func claimFullyBound(claim *corev1.PersistentVolumeClaim) bool {
	return claim.Spec.VolumeName != "" && metav1.HasAnnotation(claim.ObjectMeta, annBindCompleted)
}

// delayBinding is upstream's IsDelayBindingMode: the claim's class exists and waits for the
// first consumer.
func (c *cluster) delayBinding(claim *corev1.PersistentVolumeClaim) bool {
	name := claimClass(claim)
	if name == "" {
		return false
	}
	class, _ := c.cache.get(storageClassesGR, name).(*storagev1.StorageClass)
	return class != nil && class.VolumeBindingMode != nil && *class.VolumeBindingMode == storagev1.VolumeBindingWaitForFirstConsumer
}

// volumePlan is what PreBind writes for a pod on one node: volumes to pre-bind to claims,
// claims to provision there.
type volumePlan struct {
	static    map[*corev1.PersistentVolumeClaim]*corev1.PersistentVolume
	provision []*corev1.PersistentVolumeClaim
}

// filterVolumes is VolumeBinding's Filter for one node: the reasons the node does not fit the
// pod's volumes (none when it does), and what binding them there takes.
func (s *scheduler) filterVolumes(claims *podClaims, node *corev1.Node) ([]string, *volumePlan) {
	if claims.inUse {
		return []string{reasonReadWriteOncePod}, nil // VolumeRestrictions, before VolumeBinding
	}
	var reasons []string
	for _, claim := range claims.bound {
		pv, _ := s.c.cache.get(pvsGR, claim.Spec.VolumeName).(*corev1.PersistentVolume)
		if pv == nil {
			reasons = append(reasons, reasonVolumeNotExist)
			break
		}
		if !volumeAllows(pv, node) {
			reasons = append(reasons, reasonVolumeNodeConflict)
			break
		}
	}
	if len(claims.delayed) == 0 {
		return reasons, nil
	}
	plan := &volumePlan{static: map[*corev1.PersistentVolumeClaim]*corev1.PersistentVolume{}}
	var toMatch []*corev1.PersistentVolumeClaim
	for _, claim := range claims.delayed {
		if selected, ok := claim.Annotations[annSelectedNode]; ok {
			if selected != node.Name {
				return append(reasons, reasonVolumeBindConflict), nil
			}
			plan.provision = append(plan.provision, claim)
		} else {
			toMatch = append(toMatch, claim)
		}
	}
	// The smallest requests first, each taking the smallest Available volume that fits it.
	slices.SortStableFunc(toMatch, func(a, b *corev1.PersistentVolumeClaim) int {
		qa, qb := requested(a), requested(b)
		return qa.Cmp(qb)
	})
	chosen := map[string]bool{}
	for _, claim := range toMatch {
		if pv := s.c.matchingVolume(claim, node, chosen, true); pv != nil {
			chosen[pv.Name] = true
			plan.static[claim] = pv
		} else {
			plan.provision = append(plan.provision, claim)
		}
	}
	for _, claim := range plan.provision {
		if !metav1.HasAnnotation(claim.ObjectMeta, annSelectedNode) && !s.provisionable(claim, node) {
			return append(reasons, reasonVolumeBindConflict), nil
		}
	}
	return reasons, plan
}

// provisionable is upstream's checkVolumeProvisions for one claim: its class provisions
// dynamically, in a topology the node is in.
func (s *scheduler) provisionable(claim *corev1.PersistentVolumeClaim, node *corev1.Node) bool {
	class, _ := s.c.cache.get(storageClassesGR, claimClass(claim)).(*storagev1.StorageClass)
	if class == nil || class.Provisioner == "" || class.Provisioner == noProvisioner {
		return false
	}
	if len(class.AllowedTopologies) == 0 {
		return true
	}
	for _, term := range class.AllowedTopologies {
		ok := true
		for _, expr := range term.MatchLabelExpressions {
			v, has := node.Labels[expr.Key]
			ok = ok && has && slices.Contains(expr.Values, v)
		}
		if ok {
			return true
		}
	}
	return false
}

// volumeAllows is upstream's CheckNodeAffinity: a volume without required node affinity may be
// used anywhere, else on the nodes one of its terms matches.
func volumeAllows(pv *corev1.PersistentVolume, node *corev1.Node) bool {
	if pv.Spec.NodeAffinity == nil || pv.Spec.NodeAffinity.Required == nil {
		return true
	}
	for _, term := range pv.Spec.NodeAffinity.Required.NodeSelectorTerms {
		if termMatches(term, node) {
			return true
		}
	}
	return false
}

// preBind writes the plan: the chosen volumes' claimRef (bound by the scheduler, as upstream's
// bindAPIUpdate), then the claims to provision get the selected node. The PersistentVolume
// controller does the rest.
func (s *scheduler) preBind(ctx context.Context, plan *volumePlan, node string) error {
	for claim, pv := range plan.static {
		if _, err := s.c.claimVolume(ctx, pv, claim); err != nil {
			return err
		}
	}
	for _, claim := range plan.provision {
		if claim.Annotations[annSelectedNode] == node {
			continue
		}
		next := claim.DeepCopy()
		metav1.SetMetaDataAnnotation(&next.ObjectMeta, annSelectedNode, node)
		if err := s.c.client.Update(ctx, next); err != nil {
			return err
		}
	}
	return nil
}

// claimsBound is upstream's checkBindings, simplified: every claim of the pod is bound and
// bind-completed, to a volume the node may use. false with no error: not yet; an error: the
// binding failed (a claim's selected node moved, a volume the node cannot use) and the pod is
// scheduled again.
func (s *scheduler) claimsBound(pod *corev1.Pod, node *corev1.Node) (bool, error) {
	for vc, claim := range s.c.podClaims(pod) {
		switch {
		case claim == nil || claim.DeletionTimestamp != nil:
			return false, fmt.Errorf("persistentvolumeclaim %q not found", vc.name)
		case vc.ephemeral && ephemeral.VolumeIsForPod(pod, claim) != nil:
			return false, ephemeral.VolumeIsForPod(pod, claim)
		case !claimFullyBound(claim):
			if sel, ok := claim.Annotations[annSelectedNode]; claim.Spec.VolumeName == "" && !s.preBoundVolume(claim) && (!ok || sel != node.Name) {
				return false, fmt.Errorf("claim %q was not provisioned on node %q", claim.Name, node.Name)
			}
			return false, nil
		}
		pv, _ := s.c.cache.get(pvsGR, claim.Spec.VolumeName).(*corev1.PersistentVolume)
		if pv == nil {
			return false, nil
		}
		if !volumeAllows(pv, node) {
			return false, fmt.Errorf("pv %q node affinity doesn't match node %q", pv.Name, node.Name)
		}
	}
	return true, nil
}

// preBoundVolume: a volume's claimRef names the claim (the scheduler pre-bound it).
func (s *scheduler) preBoundVolume(claim *corev1.PersistentVolumeClaim) bool {
	for _, obj := range s.c.cache.list(pvsGR) {
		if pv := obj.(*corev1.PersistentVolume); boundToClaim(pv, claim) && pv.Spec.ClaimRef.UID == claim.UID {
			return true
		}
	}
	return false
}
