package kinds

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// persistentVolumeStrategy: a new PersistentVolume starts Pending.
type persistentVolumeStrategy struct{ base }

func init() {
	register(persistentVolumeStrategy{newBase(resource{corev1.SchemeGroupVersion, "persistentvolumes",
		"PersistentVolume", false, []string{"pv"}, nil, []string{"status"}})})
}

func (s persistentVolumeStrategy) PrepareForCreate(ctx context.Context, obj runtime.Object) {
	s.base.PrepareForCreate(ctx, obj)
	obj.(*corev1.PersistentVolume).Status.Phase = corev1.VolumePending
}
