package kinds

import (
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
)

// nodeStrategy: a node keeps the status it is created with (the kubelet registers with it) and is
// selected by spec.unschedulable.
type nodeStrategy struct{ base }

func init() {
	register(nodeStrategy{newBase(resource{corev1.SchemeGroupVersion, "nodes", "Node", false,
		[]string{"no"}, nil, []string{"status"}}, keepStatusOnCreate)})
}

// keepStatusOnCreate: the kind's create keeps the status the client sent.
func keepStatusOnCreate(b *base) { b.dropStatusOnCreate = false }

func (nodeStrategy) FieldLabel(label string) (string, bool) {
	return label, label == "metadata.name" || label == "spec.unschedulable"
}

func (nodeStrategy) SelectableFields(obj runtime.Object) fields.Set {
	n := obj.(*corev1.Node)
	s := metaFields(n, false)
	s["spec.unschedulable"] = strconv.FormatBool(n.Spec.Unschedulable)
	return s
}

func (nodeStrategy) Printer() Printer { return nodePrinter }

var nodePrinter = Printer{
	Columns: []metav1.TableColumnDefinition{colName, col("Status", "string", 0), col("Roles", "string", 0), colAge,
		col("Version", "string", 0), col("Internal-IP", "string", 1), col("External-IP", "string", 1),
		col("OS-Image", "string", 1), col("Kernel-Version", "string", 1), col("Container-Runtime", "string", 1)},
	Cells: func(o runtime.Object) []any {
		n := o.(*corev1.Node)
		info := n.Status.NodeInfo
		return []any{n.Name, nodeStatus(n), nodeRoles(n), age(n.CreationTimestamp), info.KubeletVersion,
			nodeAddress(n, corev1.NodeInternalIP), nodeAddress(n, corev1.NodeExternalIP),
			orUnknown(info.OSImage), orUnknown(info.KernelVersion), orUnknown(info.ContainerRuntimeVersion)}
	},
}

func nodeStatus(n *corev1.Node) string {
	status := "Unknown"
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			switch c.Status {
			case corev1.ConditionTrue:
				status = "Ready"
			case corev1.ConditionFalse:
				status = "NotReady"
			}
		}
	}
	if n.Spec.Unschedulable {
		status += ",SchedulingDisabled"
	}
	return status
}

func nodeRoles(n *corev1.Node) string {
	roles := map[string]bool{}
	for k, v := range n.Labels {
		switch {
		case strings.HasPrefix(k, "node-role.kubernetes.io/"):
			if role := strings.TrimPrefix(k, "node-role.kubernetes.io/"); role != "" {
				roles[role] = true
			}
		case k == "kubernetes.io/role" && v != "":
			roles[v] = true
		}
	}
	if len(roles) == 0 {
		return none
	}
	return strings.Join(sortedKeys(roles), ",")
}

func nodeAddress(n *corev1.Node, t corev1.NodeAddressType) string {
	for _, a := range n.Status.Addresses {
		if a.Type == t {
			return a.Address
		}
	}
	return none
}
