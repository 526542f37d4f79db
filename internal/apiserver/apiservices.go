package apiserver

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/duration"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	metricsv1beta1 "k8s.io/metrics/pkg/apis/metrics/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/kinds"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// The APIServices kube-aggregator keeps, read-only: one Local APIService per served
// group-version (built-in and CRDs', as kube-apiserver's autoregistration creates them) and
// metrics-server's `v1beta1.metrics.k8s.io`, all Available. They are derived from discovery on
// every request, not stored: clients read them to check that an API is available (`kubectl get
// apiservice v1beta1.metrics.k8s.io`, Helm charts and operators waiting for metrics-server).

var apiServicesGVR = apiregistrationv1.SchemeGroupVersion.WithResource("apiservices")

var apiServiceResources = []store.ResourceInfo{{
	GVR: apiServicesGVR, Kind: "APIService", ListKind: "APIServiceList", Singular: "apiservice",
	Verbs: []string{"get", "list"}, Categories: []string{"api-extensions"},
}}

var apiServiceCodecs = sync.OnceValue(func() runtime.NegotiatedSerializer {
	s := runtime.NewScheme()
	utilruntime.Must(apiregistrationv1.AddToScheme(s))
	metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
	return serializer.NewCodecFactory(s).WithoutConversion()
})

// apiServicePriorities are kube-apiserver's priorities of the group-versions Goofy serves (its
// apiVersionPriorities); CRDs' groups get 1000 and 100, metrics-server's manifest 100 and 100.
var apiServicePriorities = map[schema.GroupVersion][2]int32{
	{Version: "v1"}: {18000, 1},
	{Group: "apiregistration.k8s.io", Version: "v1"}:    {18000, 15},
	{Group: "apps", Version: "v1"}:                      {17800, 15},
	{Group: "events.k8s.io", Version: "v1"}:             {17750, 15},
	{Group: "authentication.k8s.io", Version: "v1"}:     {17700, 15},
	{Group: "authorization.k8s.io", Version: "v1"}:      {17600, 15},
	{Group: "batch", Version: "v1"}:                     {17400, 15},
	{Group: "policy", Version: "v1"}:                    {17100, 15},
	{Group: "rbac.authorization.k8s.io", Version: "v1"}: {17000, 15},
	{Group: "storage.k8s.io", Version: "v1"}:            {16800, 15},
	{Group: "apiextensions.k8s.io", Version: "v1"}:      {16700, 15},
	{Group: "coordination.k8s.io", Version: "v1"}:       {16500, 15},
	{Group: "discovery.k8s.io", Version: "v1"}:          {16200, 15},
	metricsv1beta1.SchemeGroupVersion:                   {100, 100},
}

var apiServicePrinter = kinds.Printer{
	Columns: []metav1.TableColumnDefinition{
		{Name: "Name", Type: "string", Format: "name", Description: "Name must be unique within a namespace."},
		{Name: "Service", Type: "string", Description: "The reference to the service that hosts this API endpoint."},
		{Name: "Available", Type: "string", Description: "Whether this service is available."},
		{Name: "Age", Type: "string", Description: "CreationTimestamp is a timestamp representing the server time when this object was created."},
	},
	Cells: func(obj runtime.Object) []any {
		a := obj.(*apiregistrationv1.APIService)
		svc := "Local"
		if a.Spec.Service != nil {
			svc = a.Spec.Service.Namespace + "/" + a.Spec.Service.Name
		}
		available := "Unknown"
		for _, c := range a.Status.Conditions {
			if c.Type == apiregistrationv1.Available {
				available = string(c.Status)
			}
		}
		return []any{a.Name, svc, available, duration.HumanDuration(time.Since(a.CreationTimestamp.Time))}
	},
}

// serveAPIServices answers get and list of APIServices.
func (h *handler) serveAPIServices(rq *reqScope) {
	rq.printer = apiServicePrinter
	labelSel, fieldSel, err := querySelectors(rq.r)
	if err != nil {
		h.writeError(rq.w, rq.r, err)
		return
	}
	all, err := h.apiServices()
	if err != nil {
		h.writeError(rq.w, rq.r, err)
		return
	}
	var out runtime.Object
	if rq.verb == "get" {
		for i := range all {
			if all[i].Name == rq.name {
				out = &all[i]
			}
		}
		if out == nil {
			h.writeError(rq.w, rq.r, apierrors.NewNotFound(apiServicesGVR.GroupResource(), rq.name))
			return
		}
	} else {
		list := &apiregistrationv1.APIServiceList{Items: []apiregistrationv1.APIService{}}
		for _, a := range all {
			if labelSel.Matches(labels.Set(a.Labels)) && fieldSel.Matches(fields.Set{"metadata.name": a.Name}) {
				list.Items = append(list.Items, a)
			}
		}
		out = list
	}
	h.writeWith(rq, http.StatusOK, out, apiServiceCodecs(), apiregistrationv1.SchemeGroupVersion)
}

// apiServices are the cluster's APIServices, as of the cluster's creation (the kube-system
// namespace's), sorted by name as kube-aggregator lists them.
func (h *handler) apiServices() ([]apiregistrationv1.APIService, error) {
	ns, err := h.c.Get(corev1.SchemeGroupVersion.WithResource("namespaces"), "", metav1.NamespaceSystem)
	if err != nil {
		return nil, err
	}
	created := ns.(*corev1.Namespace).CreationTimestamp
	gvs := []schema.GroupVersion{{Version: "v1"}}
	for _, g := range h.discovery().groups {
		for _, v := range g.Versions {
			gvs = append(gvs, schema.GroupVersion{Group: g.Name, Version: v.Version})
		}
	}
	out := make([]apiregistrationv1.APIService, 0, len(gvs))
	for _, gv := range gvs {
		prio, ok := apiServicePriorities[gv]
		if !ok {
			prio = [2]int32{1000, 100}
		}
		a := apiregistrationv1.APIService{
			ObjectMeta: metav1.ObjectMeta{Name: gv.Version + "." + gv.Group, CreationTimestamp: created},
			Spec:       apiregistrationv1.APIServiceSpec{Group: gv.Group, Version: gv.Version, GroupPriorityMinimum: prio[0], VersionPriority: prio[1]},
		}
		cond := apiregistrationv1.APIServiceCondition{Type: apiregistrationv1.Available, Status: apiregistrationv1.ConditionTrue,
			LastTransitionTime: created, Reason: "Local", Message: "Local APIServices are always available"}
		if gv == metricsv1beta1.SchemeGroupVersion {
			// metrics-server's manifest (components.yaml).
			a.Labels = map[string]string{"k8s-app": "metrics-server"}
			a.Spec.Service = &apiregistrationv1.ServiceReference{Namespace: metav1.NamespaceSystem, Name: "metrics-server", Port: ptr.To[int32](443)}
			a.Spec.InsecureSkipTLSVerify = true
			cond.Reason, cond.Message = "Passed", "all checks passed"
		} else {
			// kube-apiserver's autoregistration marks its own.
			a.Labels = map[string]string{"kube-aggregator.kubernetes.io/automanaged": "onstart"}
			if !builtinGroup(gv.Group) {
				a.Labels["kube-aggregator.kubernetes.io/automanaged"] = "true"
			}
		}
		a.UID = types.UID(uuid.NewSHA1(uuid.NameSpaceOID, fmt.Appendf(nil, "%s/apiservices/%s", h.c.Name(), a.Name)).String())
		a.Status.Conditions = []apiregistrationv1.APIServiceCondition{cond}
		out = append(out, a)
	}
	slices.SortFunc(out, func(a, b apiregistrationv1.APIService) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func builtinGroup(g string) bool {
	for gv := range apiServicePriorities {
		if gv.Group == g {
			return true
		}
	}
	return false
}
