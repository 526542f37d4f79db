package kinds

import (
	"context"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/rest"
)

// persistentVolumeStrategy: a new PersistentVolume starts Pending with its phase's transition
// time; upstream's defaults (reclaim policy Retain, volume mode Filesystem).
type persistentVolumeStrategy struct{ base }

func init() {
	register(persistentVolumeStrategy{newBase(resource{corev1.SchemeGroupVersion, "persistentvolumes",
		"PersistentVolume", false, []string{"pv"}, nil, []string{"status"}})})
}

// Default is upstream's SetDefaults_PersistentVolume.
func (persistentVolumeStrategy) Default(obj runtime.Object) {
	pv := obj.(*corev1.PersistentVolume)
	if pv.Status.Phase == "" {
		pv.Status.Phase = corev1.VolumePending
	}
	if pv.Spec.PersistentVolumeReclaimPolicy == "" {
		pv.Spec.PersistentVolumeReclaimPolicy = corev1.PersistentVolumeReclaimRetain
	}
	if pv.Spec.VolumeMode == nil {
		mode := corev1.PersistentVolumeFilesystem
		pv.Spec.VolumeMode = &mode
	}
}

func (s persistentVolumeStrategy) PrepareForCreate(ctx context.Context, obj runtime.Object) {
	s.base.PrepareForCreate(ctx, obj)
	pv := obj.(*corev1.PersistentVolume)
	pv.Status.Phase = corev1.VolumePending
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	pv.Status.LastPhaseTransitionTime = &now
}

func (s persistentVolumeStrategy) StatusStrategy() rest.RESTUpdateStrategy {
	return persistentVolumeStatusStrategy{statusStrategy(s)}
}

// persistentVolumeStatusStrategy moves status.lastPhaseTransitionTime when a status update
// changes the phase and the client did not set the time itself, as upstream.
type persistentVolumeStatusStrategy struct{ statusStrategy }

func (s persistentVolumeStatusStrategy) PrepareForUpdate(ctx context.Context, obj, old runtime.Object) {
	s.statusStrategy.PrepareForUpdate(ctx, obj, old)
	pv, oldPV := obj.(*corev1.PersistentVolume), old.(*corev1.PersistentVolume)
	switch {
	case pv.Status.Phase == oldPV.Status.Phase && pv.Status.LastPhaseTransitionTime == nil:
		pv.Status.LastPhaseTransitionTime = oldPV.Status.LastPhaseTransitionTime
	case pv.Status.Phase != oldPV.Status.Phase && (pv.Status.LastPhaseTransitionTime == nil ||
		pv.Status.LastPhaseTransitionTime.Equal(oldPV.Status.LastPhaseTransitionTime)):
		now := metav1.NewTime(time.Now().Truncate(time.Second))
		pv.Status.LastPhaseTransitionTime = &now
	}
}

func (persistentVolumeStrategy) Printer() Printer { return persistentVolumePrinter }

var persistentVolumePrinter = Printer{
	Columns: []metav1.TableColumnDefinition{colName, col("Capacity", "string", 0), col("Access Modes", "string", 0),
		col("Reclaim Policy", "string", 0), col("Status", "string", 0), col("Claim", "string", 0), col("StorageClass", "string", 0),
		col("VolumeAttributesClass", "string", 0), col("Reason", "string", 0), colAge, col("VolumeMode", "string", 1)},
	Cells: func(o runtime.Object) []any {
		pv := o.(*corev1.PersistentVolume)
		claim := ""
		if ref := pv.Spec.ClaimRef; ref != nil {
			claim = ref.Namespace + "/" + ref.Name
		}
		capacity := pv.Spec.Capacity[corev1.ResourceStorage]
		phase := string(pv.Status.Phase)
		if pv.DeletionTimestamp != nil {
			phase = "Terminating"
		}
		class := pv.Spec.StorageClassName
		if c, ok := pv.Annotations[corev1.BetaStorageClassAnnotation]; ok {
			class = c
		}
		return []any{pv.Name, capacity.String(), accessModes(pv.Spec.AccessModes), string(pv.Spec.PersistentVolumeReclaimPolicy),
			phase, claim, class, orUnset(pv.Spec.VolumeAttributesClassName), pv.Status.Reason, age(pv.CreationTimestamp),
			volumeModeCell(pv.Spec.VolumeMode)}
	},
}

// accessModes is how kubectl shows access modes: RWO,ROX,RWX,RWOP, in that order.
func accessModes(modes []corev1.PersistentVolumeAccessMode) string {
	var out []string
	for _, m := range []struct {
		mode  corev1.PersistentVolumeAccessMode
		short string
	}{{corev1.ReadWriteOnce, "RWO"}, {corev1.ReadOnlyMany, "ROX"}, {corev1.ReadWriteMany, "RWX"}, {corev1.ReadWriteOncePod, "RWOP"}} {
		for _, x := range modes {
			if x == m.mode {
				out = append(out, m.short)
				break
			}
		}
	}
	return strings.Join(out, ",")
}

func orUnset(s *string) string {
	if s == nil {
		return "<unset>"
	}
	return *s
}

func volumeModeCell(m *corev1.PersistentVolumeMode) string {
	if m == nil {
		return "<unset>"
	}
	return string(*m)
}
