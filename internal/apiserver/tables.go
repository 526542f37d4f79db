package apiserver

import (
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversionscheme "k8s.io/apimachinery/pkg/apis/meta/internalversion/scheme"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// printer renders one kind as Table rows with the column set `kubectl get` shows for it on a
// real cluster (columns with Priority 1 appear with -o wide).
type printer struct {
	columns []metav1.TableColumnDefinition
	cells   func(obj runtime.Object) []any
}

var (
	colName = metav1.TableColumnDefinition{Name: "Name", Type: "string", Format: "name", Description: "Name must be unique within a namespace."}
	colAge  = metav1.TableColumnDefinition{Name: "Age", Type: "string", Description: "CreationTimestamp is a timestamp representing the server time when this object was created."}
)

func col(name, typ string, priority int32) metav1.TableColumnDefinition {
	return metav1.TableColumnDefinition{Name: name, Type: typ, Priority: priority}
}

// printers is keyed by group/Kind.
var printers = map[schema.GroupKind]printer{
	{Kind: "Node"}: {
		columns: []metav1.TableColumnDefinition{colName, col("Status", "string", 0), col("Roles", "string", 0), colAge,
			col("Version", "string", 0), col("Internal-IP", "string", 1), col("External-IP", "string", 1),
			col("OS-Image", "string", 1), col("Kernel-Version", "string", 1), col("Container-Runtime", "string", 1)},
		cells: func(o runtime.Object) []any {
			n := o.(*corev1.Node)
			info := n.Status.NodeInfo
			return []any{n.Name, nodeStatus(n), nodeRoles(n), age(n.CreationTimestamp), info.KubeletVersion,
				nodeAddress(n, corev1.NodeInternalIP), nodeAddress(n, corev1.NodeExternalIP),
				orUnknown(info.OSImage), orUnknown(info.KernelVersion), orUnknown(info.ContainerRuntimeVersion)}
		},
	},
	{Kind: "Pod"}: {
		columns: []metav1.TableColumnDefinition{colName, col("Ready", "string", 0), col("Status", "string", 0),
			col("Restarts", "string", 0), colAge, col("IP", "string", 1), col("Node", "string", 1),
			col("Nominated Node", "string", 1), col("Readiness Gates", "string", 1)},
		cells: func(o runtime.Object) []any {
			p := o.(*corev1.Pod)
			ready, total, restarts, status := podSummary(p)
			gates := none
			if n := len(p.Spec.ReadinessGates); n > 0 {
				passed := 0
				for _, g := range p.Spec.ReadinessGates {
					for _, c := range p.Status.Conditions {
						if c.Type == g.ConditionType && c.Status == corev1.ConditionTrue {
							passed++
						}
					}
				}
				gates = fmt.Sprintf("%d/%d", passed, n)
			}
			return []any{p.Name, fmt.Sprintf("%d/%d", ready, total), status, restarts, age(p.CreationTimestamp),
				orNone(p.Status.PodIP), orNone(p.Spec.NodeName), orNone(p.Status.NominatedNodeName), gates}
		},
	},
	{Kind: "Namespace"}: {
		columns: []metav1.TableColumnDefinition{colName, col("Status", "string", 0), colAge},
		cells: func(o runtime.Object) []any {
			n := o.(*corev1.Namespace)
			return []any{n.Name, string(n.Status.Phase), age(n.CreationTimestamp)}
		},
	},
	{Kind: "ConfigMap"}: {
		columns: []metav1.TableColumnDefinition{colName, col("Data", "string", 0), colAge},
		cells: func(o runtime.Object) []any {
			c := o.(*corev1.ConfigMap)
			return []any{c.Name, int64(len(c.Data) + len(c.BinaryData)), age(c.CreationTimestamp)}
		},
	},
	{Kind: "Secret"}: {
		columns: []metav1.TableColumnDefinition{colName, col("Type", "string", 0), col("Data", "string", 0), colAge},
		cells: func(o runtime.Object) []any {
			s := o.(*corev1.Secret)
			return []any{s.Name, string(s.Type), int64(len(s.Data) + len(s.StringData)), age(s.CreationTimestamp)}
		},
	},
	{Kind: "Service"}: {
		columns: []metav1.TableColumnDefinition{colName, col("Type", "string", 0), col("Cluster-IP", "string", 0),
			col("External-IP", "string", 0), col("Port(s)", "string", 0), colAge, col("Selector", "string", 1)},
		cells: func(o runtime.Object) []any {
			s := o.(*corev1.Service)
			return []any{s.Name, string(serviceType(s)), orNone(s.Spec.ClusterIP), serviceExternalIP(s),
				servicePorts(s), age(s.CreationTimestamp), selectorString(s.Spec.Selector)}
		},
	},
	{Group: "apps", Kind: "Deployment"}: {
		columns: []metav1.TableColumnDefinition{colName, col("Ready", "string", 0), col("Up-to-date", "string", 0),
			col("Available", "string", 0), colAge, col("Containers", "string", 1), col("Images", "string", 1), col("Selector", "string", 1)},
		cells: func(o runtime.Object) []any {
			d := o.(*appsv1.Deployment)
			names, images := containers(d.Spec.Template.Spec.Containers)
			return []any{d.Name, fmt.Sprintf("%d/%d", d.Status.ReadyReplicas, replicas(d.Spec.Replicas)),
				int64(d.Status.UpdatedReplicas), int64(d.Status.AvailableReplicas), age(d.CreationTimestamp),
				names, images, labelSelector(d.Spec.Selector)}
		},
	},
	{Group: "apps", Kind: "DaemonSet"}: {
		columns: []metav1.TableColumnDefinition{colName, col("Desired", "integer", 0), col("Current", "integer", 0),
			col("Ready", "integer", 0), col("Up-to-date", "integer", 0), col("Available", "integer", 0),
			col("Node Selector", "string", 0), colAge, col("Containers", "string", 1), col("Images", "string", 1), col("Selector", "string", 1)},
		cells: func(o runtime.Object) []any {
			d := o.(*appsv1.DaemonSet)
			names, images := containers(d.Spec.Template.Spec.Containers)
			return []any{d.Name, int64(d.Status.DesiredNumberScheduled), int64(d.Status.CurrentNumberScheduled),
				int64(d.Status.NumberReady), int64(d.Status.UpdatedNumberScheduled), int64(d.Status.NumberAvailable),
				selectorString(d.Spec.Template.Spec.NodeSelector), age(d.CreationTimestamp), names, images, labelSelector(d.Spec.Selector)}
		},
	},
	{Group: "apps", Kind: "ReplicaSet"}: {
		columns: []metav1.TableColumnDefinition{colName, col("Desired", "integer", 0), col("Current", "integer", 0),
			col("Ready", "integer", 0), colAge, col("Containers", "string", 1), col("Images", "string", 1), col("Selector", "string", 1)},
		cells: func(o runtime.Object) []any {
			r := o.(*appsv1.ReplicaSet)
			names, images := containers(r.Spec.Template.Spec.Containers)
			return []any{r.Name, int64(replicas(r.Spec.Replicas)), int64(r.Status.Replicas), int64(r.Status.ReadyReplicas),
				age(r.CreationTimestamp), names, images, labelSelector(r.Spec.Selector)}
		},
	},
	{Group: "apps", Kind: "StatefulSet"}: {
		columns: []metav1.TableColumnDefinition{colName, col("Ready", "string", 0), colAge, col("Containers", "string", 1), col("Images", "string", 1)},
		cells: func(o runtime.Object) []any {
			s := o.(*appsv1.StatefulSet)
			names, images := containers(s.Spec.Template.Spec.Containers)
			return []any{s.Name, fmt.Sprintf("%d/%d", s.Status.ReadyReplicas, replicas(s.Spec.Replicas)), age(s.CreationTimestamp), names, images}
		},
	},
}

// genericPrinter serves every kind without a dedicated printer.
var genericPrinter = printer{
	columns: []metav1.TableColumnDefinition{colName, colAge},
	cells: func(o runtime.Object) []any {
		m, err := meta.Accessor(o)
		if err != nil {
			return []any{"", "<unknown>"}
		}
		return []any{m.GetName(), age(m.GetCreationTimestamp())}
	},
}

// tableOptions reads includeObject and noHeaders like upstream.
func tableOptions(r *http.Request) (*metav1.TableOptions, error) {
	opts := &metav1.TableOptions{}
	if err := metainternalversionscheme.ParameterCodec.DecodeParameters(r.URL.Query(), metav1.SchemeGroupVersion, opts); err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	if errs := metav1validation.ValidateTableOptions(opts); len(errs) > 0 {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("Unable to convert to Table as requested: %v", errs.ToAggregate()))
	}
	return opts, nil
}

// toTable converts an object or a list of them into a meta.k8s.io Table.
func toTable(ri store.ResourceInfo, obj runtime.Object, opts *metav1.TableOptions, gv schema.GroupVersion, noHeaders bool) (*metav1.Table, error) {
	p, ok := printers[schema.GroupKind{Group: ri.GVR.Group, Kind: ri.Kind}]
	if !ok {
		p = genericPrinter
	}
	t := &metav1.Table{}
	t.SetGroupVersionKind(gv.WithKind("Table"))
	if !noHeaders && !opts.NoHeaders {
		t.ColumnDefinitions = p.columns
	}
	addRow := func(item runtime.Object) error {
		row := metav1.TableRow{Cells: safeCells(p, item)}
		switch opts.IncludeObject {
		case metav1.IncludeNone:
		case metav1.IncludeObject:
			item.GetObjectKind().SetGroupVersionKind(ri.GVK())
			row.Object.Object = item
		default:
			pm, err := partialMetadata(item, gv)
			if err != nil {
				return err
			}
			row.Object.Object = pm
		}
		t.Rows = append(t.Rows, row)
		return nil
	}
	if meta.IsListType(obj) {
		if li, err := meta.ListAccessor(obj); err == nil {
			t.ResourceVersion = li.GetResourceVersion()
			t.Continue = li.GetContinue()
			t.RemainingItemCount = li.GetRemainingItemCount()
		}
		t.Rows = []metav1.TableRow{}
		if err := meta.EachListItem(obj, addRow); err != nil {
			return nil, err
		}
		return t, nil
	}
	if m, err := meta.Accessor(obj); err == nil {
		t.ResourceVersion = m.GetResourceVersion()
	}
	if err := addRow(obj); err != nil {
		return nil, err
	}
	return t, nil
}

// safeCells falls back to the generic columns' values if an object is not of the printer's
// Go type (never expected, but a Table must not panic the server).
func safeCells(p printer, o runtime.Object) (cells []any) {
	defer func() {
		if recover() != nil {
			cells = make([]any, len(p.columns))
			for i := range cells {
				cells[i] = ""
			}
		}
	}()
	return p.cells(o)
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
	out := make([]string, 0, len(roles))
	for r := range roles {
		out = append(out, r)
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

func nodeAddress(n *corev1.Node, t corev1.NodeAddressType) string {
	for _, a := range n.Status.Addresses {
		if a.Type == t {
			return a.Address
		}
	}
	return none
}

// podSummary computes READY, RESTARTS and STATUS the way kubectl shows them for the common
// cases: the pod reason or phase, overridden by a waiting/terminated container reason, and
// "Terminating" once deletion started.
func podSummary(p *corev1.Pod) (ready, total int, restarts, status string) {
	total = len(p.Spec.Containers)
	status = string(p.Status.Phase)
	if p.Status.Reason != "" {
		status = p.Status.Reason
	}
	var count int32
	var last time.Time
	for _, c := range p.Status.ContainerStatuses {
		count += c.RestartCount
		if t := c.LastTerminationState.Terminated; t != nil && t.FinishedAt.After(last) {
			last = t.FinishedAt.Time
		}
		switch {
		case c.State.Waiting != nil && c.State.Waiting.Reason != "":
			status = c.State.Waiting.Reason
		case c.State.Terminated != nil && c.State.Terminated.Reason != "":
			status = c.State.Terminated.Reason
		case c.State.Terminated != nil:
			if c.State.Terminated.Signal != 0 {
				status = fmt.Sprintf("Signal:%d", c.State.Terminated.Signal)
			} else {
				status = fmt.Sprintf("ExitCode:%d", c.State.Terminated.ExitCode)
			}
		case c.Ready && c.State.Running != nil:
			ready++
		}
	}
	if p.DeletionTimestamp != nil {
		status = "Terminating"
		if p.Status.Reason == "NodeLost" {
			status = "Unknown"
		}
	}
	restarts = strconv.Itoa(int(count))
	if count > 0 && !last.IsZero() {
		restarts = fmt.Sprintf("%d (%s ago)", count, duration.HumanDuration(time.Since(last)))
	}
	return ready, total, restarts, status
}

// serviceType is the effective type: an unset type means ClusterIP (the API default, which the
// store does not apply).
func serviceType(s *corev1.Service) corev1.ServiceType {
	if s.Spec.Type == "" {
		return corev1.ServiceTypeClusterIP
	}
	return s.Spec.Type
}

func serviceExternalIP(s *corev1.Service) string {
	switch serviceType(s) {
	case corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort:
		if len(s.Spec.ExternalIPs) > 0 {
			return strings.Join(s.Spec.ExternalIPs, ",")
		}
		return none
	case corev1.ServiceTypeLoadBalancer:
		var ips []string
		for _, ing := range s.Status.LoadBalancer.Ingress {
			if ing.IP != "" {
				ips = append(ips, ing.IP)
			} else if ing.Hostname != "" {
				ips = append(ips, ing.Hostname)
			}
		}
		ips = append(ips, s.Spec.ExternalIPs...)
		if len(ips) == 0 {
			return "<pending>"
		}
		return strings.Join(ips, ",")
	case corev1.ServiceTypeExternalName:
		return s.Spec.ExternalName
	}
	return "<unknown>"
}

func servicePorts(s *corev1.Service) string {
	if len(s.Spec.Ports) == 0 {
		return none
	}
	out := make([]string, 0, len(s.Spec.Ports))
	for _, p := range s.Spec.Ports {
		if p.NodePort > 0 {
			out = append(out, fmt.Sprintf("%d:%d/%s", p.Port, p.NodePort, p.Protocol))
		} else {
			out = append(out, fmt.Sprintf("%d/%s", p.Port, p.Protocol))
		}
	}
	return strings.Join(out, ",")
}
