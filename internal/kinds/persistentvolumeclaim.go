package kinds

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// persistentVolumeClaimStrategy: a new PersistentVolumeClaim reads back Pending (upstream stores
// an empty status and its defaults fill in the phase), with upstream's default volume mode.
type persistentVolumeClaimStrategy struct{ base }

func init() {
	register(persistentVolumeClaimStrategy{newBase(resource{corev1.SchemeGroupVersion, "persistentvolumeclaims",
		"PersistentVolumeClaim", true, []string{"pvc"}, nil, []string{"status"}})})
}

// Default is upstream's SetDefaults_PersistentVolumeClaim and SetDefaults_PersistentVolumeClaimSpec.
func (persistentVolumeClaimStrategy) Default(obj runtime.Object) {
	pvc := obj.(*corev1.PersistentVolumeClaim)
	if pvc.Status.Phase == "" {
		pvc.Status.Phase = corev1.ClaimPending
	}
	if pvc.Spec.VolumeMode == nil {
		mode := corev1.PersistentVolumeFilesystem
		pvc.Spec.VolumeMode = &mode
	}
}

func (s persistentVolumeClaimStrategy) PrepareForCreate(ctx context.Context, obj runtime.Object) {
	s.base.PrepareForCreate(ctx, obj)
	obj.(*corev1.PersistentVolumeClaim).Status.Phase = corev1.ClaimPending
}

func (persistentVolumeClaimStrategy) Printer() Printer { return persistentVolumeClaimPrinter }

var persistentVolumeClaimPrinter = Printer{
	Columns: []metav1.TableColumnDefinition{colName, col("Status", "string", 0), col("Volume", "string", 0),
		col("Capacity", "string", 0), col("Access Modes", "string", 0), col("StorageClass", "string", 0),
		col("VolumeAttributesClass", "string", 0), colAge, col("VolumeMode", "string", 1)},
	Cells: func(o runtime.Object) []any {
		pvc := o.(*corev1.PersistentVolumeClaim)
		phase := string(pvc.Status.Phase)
		if pvc.DeletionTimestamp != nil {
			phase = "Terminating"
		}
		capacity, modes := "", ""
		if pvc.Spec.VolumeName != "" {
			q := pvc.Status.Capacity[corev1.ResourceStorage]
			capacity, modes = q.String(), accessModes(pvc.Status.AccessModes)
		}
		class := ""
		if c, ok := pvc.Annotations[corev1.BetaStorageClassAnnotation]; ok {
			class = c
		} else if pvc.Spec.StorageClassName != nil {
			class = *pvc.Spec.StorageClassName
		}
		return []any{pvc.Name, phase, pvc.Spec.VolumeName, capacity, modes, class,
			orUnset(pvc.Spec.VolumeAttributesClassName), age(pvc.CreationTimestamp), volumeModeCell(pvc.Spec.VolumeMode)}
	},
}
