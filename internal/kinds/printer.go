package kinds

import (
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
)

// Printer renders one kind as Table rows with the column set `kubectl get` shows for it on a real
// cluster (columns with Priority 1 appear with -o wide).
type Printer struct {
	Columns []metav1.TableColumnDefinition
	Cells   func(obj runtime.Object) []any
}

var (
	colName = metav1.TableColumnDefinition{Name: "Name", Type: "string", Format: "name", Description: "Name must be unique within a namespace."}
	colAge  = metav1.TableColumnDefinition{Name: "Age", Type: "string", Description: "CreationTimestamp is a timestamp representing the server time when this object was created."}
)

func col(name, typ string, priority int32) metav1.TableColumnDefinition {
	return metav1.TableColumnDefinition{Name: name, Type: typ, Priority: priority}
}

// genericPrinter serves every kind without columns of its own.
var genericPrinter = Printer{
	Columns: []metav1.TableColumnDefinition{colName, colAge},
	Cells: func(o runtime.Object) []any {
		m, err := meta.Accessor(o)
		if err != nil {
			return []any{"", "<unknown>"}
		}
		return []any{m.GetName(), age(m.GetCreationTimestamp())}
	},
}

const none = "<none>"

func orNone(s string) string {
	if s == "" {
		return none
	}
	return s
}

func orUnknown(s string) string {
	if s == "" {
		return "<unknown>"
	}
	return s
}

func age(ts metav1.Time) string {
	if ts.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(time.Since(ts.Time))
}

// replicas reads an optional replica count; unset means 1, the API default.
func replicas(r *int32) int32 {
	if r == nil {
		return 1
	}
	return *r
}

func selectorString(sel map[string]string) string {
	if len(sel) == 0 {
		return none
	}
	return labels.FormatLabels(sel)
}

func labelSelector(sel *metav1.LabelSelector) string {
	if sel == nil {
		return none
	}
	s := metav1.FormatLabelSelector(sel)
	if s == "" {
		return none
	}
	return s
}

func containers(cs []corev1.Container) (string, string) {
	names := make([]string, 0, len(cs))
	images := make([]string, 0, len(cs))
	for _, c := range cs {
		names = append(names, c.Name)
		images = append(images, c.Image)
	}
	return strings.Join(names, ","), strings.Join(images, ",")
}

func sortedKeys(set map[string]bool) []string {
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// readyOf renders a READY column: ready/desired.
func readyOf(ready, desired int32) string { return fmt.Sprintf("%d/%d", ready, desired) }
