package kinds

import (
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// volumeAttachmentStrategy: a VolumeAttachment's status comes through /status (the external
// attacher's), and kubectl shows its attacher, volume, node and whether it is attached.
type volumeAttachmentStrategy struct{ base }

func init() {
	register(volumeAttachmentStrategy{newBase(resource{storagev1.SchemeGroupVersion, "volumeattachments",
		"VolumeAttachment", false, nil, nil, []string{"status"}})})
}

func (volumeAttachmentStrategy) Printer() Printer { return volumeAttachmentPrinter }

var volumeAttachmentPrinter = Printer{
	Columns: []metav1.TableColumnDefinition{colName, col("Attacher", "string", 0), col("PV", "string", 0),
		col("Node", "string", 0), col("Attached", "boolean", 0), colAge},
	Cells: func(o runtime.Object) []any {
		va := o.(*storagev1.VolumeAttachment)
		pv := ""
		if va.Spec.Source.PersistentVolumeName != nil {
			pv = *va.Spec.Source.PersistentVolumeName
		}
		return []any{va.Name, va.Spec.Attacher, pv, va.Spec.NodeName, va.Status.Attached, age(va.CreationTimestamp)}
	},
}
