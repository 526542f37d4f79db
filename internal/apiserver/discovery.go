package apiserver

import (
	"net/http"
	"sort"
	"strings"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apiserver/pkg/endpoints/handlers/negotiation"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	metricsv1beta1 "k8s.io/metrics/pkg/apis/metrics/v1beta1"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// groupOrder is the order in which a real kube-apiserver lists the groups we serve (by its
// group priority); discovery clients use the first listed version as the preferred one and
// kubectl prints api-resources in this order.
var groupOrder = []string{
	"", "apiregistration.k8s.io", "apps", "events.k8s.io", "authentication.k8s.io", "authorization.k8s.io", "batch", "policy", "rbac.authorization.k8s.io", "storage.k8s.io",
	"apiextensions.k8s.io", "coordination.k8s.io", "discovery.k8s.io",
}

// subresourceShape says what kind a subresource returns and which verbs it accepts, as a real
// API server advertises it.
type subresourceShape struct {
	gvk   *schema.GroupVersionKind // nil: the parent's kind
	verbs []string
}

var subresourceShapes = map[string]subresourceShape{
	"status":      {verbs: []string{"get", "patch", "update"}},
	"binding":     {gvk: &schema.GroupVersionKind{Version: "v1", Kind: "Binding"}, verbs: []string{"create"}},
	"scale":       {gvk: &schema.GroupVersionKind{Group: "autoscaling", Version: "v1", Kind: "Scale"}, verbs: []string{"get", "patch", "update"}},
	"eviction":    {gvk: &schema.GroupVersionKind{Group: "policy", Version: "v1", Kind: "Eviction"}, verbs: []string{"create"}},
	"log":         {verbs: []string{"get"}},
	"portforward": {gvk: &schema.GroupVersionKind{Version: "v1", Kind: "PodPortForwardOptions"}, verbs: []string{"create", "get"}},
}

// discoveryDocs are the discovery documents, computed once from the store's resource table.
type discoveryDocs struct {
	groups       []metav1.APIGroup                                  // /apis, in groupOrder
	resources    map[schema.GroupVersion]*metav1.APIResourceList    // /api/v1, /apis/<g>/<v>
	aggregated   map[bool]*apidiscoveryv2.APIGroupDiscoveryList     // key: legacy (/api) or not (/apis)
	byGVR        map[schema.GroupVersionResource]store.ResourceInfo // routing
	servedGroups map[string]bool
	codecs       runtime.NegotiatedSerializer // apidiscovery.k8s.io/v2 in JSON and protobuf
}

func groupRank(g string) int {
	if g == metricsv1beta1.GroupName {
		// metrics-server's APIService has groupPriorityMinimum 100, below the 1000 of CRD groups.
		return len(groupOrder) + 1
	}
	for i, o := range groupOrder {
		if o == g {
			return i
		}
	}
	return len(groupOrder)
}

func buildDiscovery(infos []store.ResourceInfo) *discoveryDocs {
	d := &discoveryDocs{
		resources:    map[schema.GroupVersion]*metav1.APIResourceList{},
		aggregated:   map[bool]*apidiscoveryv2.APIGroupDiscoveryList{},
		byGVR:        map[schema.GroupVersionResource]store.ResourceInfo{},
		servedGroups: map[string]bool{},
	}
	s := runtime.NewScheme()
	utilruntime.Must(apidiscoveryv2.AddToScheme(s))
	d.codecs = serializer.NewCodecFactory(s).WithoutConversion()

	infos = append([]store.ResourceInfo(nil), infos...)
	sort.SliceStable(infos, func(i, j int) bool {
		a, b := infos[i].GVR, infos[j].GVR
		if ra, rb := groupRank(a.Group), groupRank(b.Group); ra != rb {
			return ra < rb
		}
		if a.Group != b.Group {
			return a.Group < b.Group
		}
		return a.Resource < b.Resource
	})

	var gvOrder []schema.GroupVersion
	aggVersions := map[schema.GroupVersion]*apidiscoveryv2.APIVersionDiscovery{}
	for _, ri := range infos {
		gv := ri.GVR.GroupVersion()
		d.byGVR[ri.GVR] = ri
		d.servedGroups[gv.Group] = true
		list, ok := d.resources[gv]
		if !ok {
			list = &metav1.APIResourceList{GroupVersion: gv.String()}
			list.Kind, list.APIVersion = "APIResourceList", "v1"
			d.resources[gv] = list
			gvOrder = append(gvOrder, gv)
			aggVersions[gv] = &apidiscoveryv2.APIVersionDiscovery{Version: gv.Version, Freshness: apidiscoveryv2.DiscoveryFreshnessCurrent}
		}
		list.APIResources = append(list.APIResources, metav1.APIResource{
			Name: ri.GVR.Resource, SingularName: ri.Singular, Namespaced: ri.Namespaced, Kind: ri.Kind,
			Verbs: ri.Verbs, ShortNames: ri.ShortNames, Categories: ri.Categories,
		})
		scope := apidiscoveryv2.ScopeCluster
		if ri.Namespaced {
			scope = apidiscoveryv2.ScopeNamespace
		}
		ar := apidiscoveryv2.APIResourceDiscovery{
			Resource:         ri.GVR.Resource,
			ResponseKind:     &metav1.GroupVersionKind{Group: gv.Group, Version: gv.Version, Kind: ri.Kind},
			Scope:            scope,
			SingularResource: ri.Singular,
			Verbs:            ri.Verbs,
			ShortNames:       ri.ShortNames,
			Categories:       ri.Categories,
		}
		subs := append([]string(nil), ri.Subresources...)
		sort.Strings(subs)
		for _, sub := range subs {
			shape, ok := subresourceShapes[sub]
			if !ok {
				continue
			}
			gvk := gv.WithKind(ri.Kind)
			res := metav1.APIResource{Name: ri.GVR.Resource + "/" + sub, Namespaced: ri.Namespaced, Kind: ri.Kind, Verbs: shape.verbs}
			if shape.gvk != nil {
				gvk = *shape.gvk
				res.Kind = gvk.Kind
				if gvk.GroupVersion() != gv {
					res.Group, res.Version = gvk.Group, gvk.Version
				}
			}
			list.APIResources = append(list.APIResources, res)
			ar.Subresources = append(ar.Subresources, apidiscoveryv2.APISubresourceDiscovery{
				Subresource:  sub,
				ResponseKind: &metav1.GroupVersionKind{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind},
				Verbs:        shape.verbs,
			})
		}
		aggVersions[gv].Resources = append(aggVersions[gv].Resources, ar)
	}

	for _, legacy := range []bool{true, false} {
		l := &apidiscoveryv2.APIGroupDiscoveryList{}
		l.Kind, l.APIVersion = "APIGroupDiscoveryList", apidiscoveryv2.SchemeGroupVersion.String()
		d.aggregated[legacy] = l
	}
	groupIdx := map[string]int{}
	for _, gv := range gvOrder {
		legacy := gv.Group == ""
		agg := d.aggregated[legacy]
		i, ok := groupIdx[gv.Group]
		if !ok {
			i = len(agg.Items)
			groupIdx[gv.Group] = i
			g := apidiscoveryv2.APIGroupDiscovery{}
			g.Name = gv.Group
			agg.Items = append(agg.Items, g)
			if !legacy {
				gvd := metav1.GroupVersionForDiscovery{GroupVersion: gv.String(), Version: gv.Version}
				d.groups = append(d.groups, metav1.APIGroup{Name: gv.Group, Versions: []metav1.GroupVersionForDiscovery{gvd}, PreferredVersion: gvd})
			}
		} else if !legacy {
			for gi := range d.groups {
				if d.groups[gi].Name == gv.Group {
					d.groups[gi].Versions = append(d.groups[gi].Versions, metav1.GroupVersionForDiscovery{GroupVersion: gv.String(), Version: gv.Version})
				}
			}
		}
		agg.Items[i].Versions = append(agg.Items[i].Versions, *aggVersions[gv])
	}
	return d
}

// aggregatedRestrictions accept plain media types and the apidiscovery.k8s.io/v2
// APIGroupDiscoveryList transform, nothing else.
type aggregatedRestrictions struct{}

func (aggregatedRestrictions) AllowsMediaTypeTransform(_, _ string, gvk *schema.GroupVersionKind) bool {
	return gvk == nil || (*gvk == apidiscoveryv2.SchemeGroupVersion.WithKind("APIGroupDiscoveryList"))
}
func (aggregatedRestrictions) AllowsServerVersion(string) bool  { return false }
func (aggregatedRestrictions) AllowsStreamSchema(s string) bool { return false }

// serveGroupDiscovery answers /api and /apis: the aggregated document when the client asks for
// it (first acceptable clause wins, as upstream), else the legacy list.
func (h *handler) serveGroupDiscovery(w http.ResponseWriter, r *http.Request, legacy bool) {
	sv := getServing()
	d := h.discovery()
	mt, ok := negotiation.NegotiateMediaTypeOptions(r.Header.Get("Accept"), d.codecs.SupportedMediaTypes(), aggregatedRestrictions{})
	if ok && mt.Convert != nil {
		info := mt.Accepted
		enc := d.codecs.EncoderForVersion(info.Serializer, apidiscoveryv2.SchemeGroupVersion)
		cp := *d.aggregated[legacy]
		data, err := runtime.Encode(enc, &cp)
		if err != nil {
			h.writeError(w, r, err)
			return
		}
		w.Header().Set("Content-Type", info.MediaType+";g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList")
		w.Header().Set("Vary", "Accept")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(data)
		return
	}
	var obj runtime.Object
	if legacy {
		obj = &metav1.APIVersions{
			TypeMeta: metav1.TypeMeta{Kind: "APIVersions"},
			Versions: []string{"v1"},
			ServerAddressByClientCIDRs: []metav1.ServerAddressByClientCIDR{
				{ClientCIDR: "0.0.0.0/0", ServerAddress: r.Host},
			},
		}
	} else {
		obj = &metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}, Groups: d.groups}
	}
	responsewriters.WriteObjectNegotiated(sv.meta, negotiation.DefaultEndpointRestrictions, schema.GroupVersion{}, w, r, http.StatusOK, obj, false)
}

// serveDiscoveryPath answers /api/v1, /apis/<g> and /apis/<g>/<v>; false when the path is not
// a served discovery path.
func (h *handler) serveDiscoveryPath(w http.ResponseWriter, r *http.Request, parts []string) bool {
	sv := getServing()
	d := h.discovery()
	var obj runtime.Object
	switch {
	case len(parts) == 2 && parts[0] == "api":
		l, ok := d.resources[schema.GroupVersion{Version: parts[1]}]
		if !ok {
			return false
		}
		cp := *l // the encoder stamps the kind on what it encodes; never hand it shared state
		obj = &cp
	case len(parts) == 2 && parts[0] == "apis":
		for i := range d.groups {
			if d.groups[i].Name == parts[1] {
				g := d.groups[i]
				g.Kind, g.APIVersion = "APIGroup", "v1"
				obj = &g
			}
		}
		if obj == nil {
			return false
		}
	case len(parts) == 3 && parts[0] == "apis":
		l, ok := d.resources[schema.GroupVersion{Group: parts[1], Version: parts[2]}]
		if !ok {
			return false
		}
		cp := *l
		obj = &cp
	default:
		return false
	}
	responsewriters.WriteObjectNegotiated(sv.meta, negotiation.DefaultEndpointRestrictions, schema.GroupVersion{}, w, r, http.StatusOK, obj, false)
	return true
}

// splitPath splits a URL path into its non-empty segments.
func splitPath(p string) []string {
	p = strings.Trim(p, "/")
	if p == "" {
		return nil
	}
	return strings.Split(p, "/")
}

// customDiscovery is the discovery of a cluster whose CRDs define resources.
type customDiscovery struct {
	generation uint64 // store.Cluster.CustomResourcesGeneration it was built for
	docs       *discoveryDocs
}

// discovery returns the cluster's discovery documents: the shared ones while no CRD defines a
// resource, else the built-in and custom resources together, rebuilt when the CRDs change.
func (h *handler) discovery() *discoveryDocs {
	gen := h.c.CustomResourcesGeneration()
	if gen == 0 {
		return getServing().disc
	}
	if cur := h.custom.Load(); cur != nil && cur.generation == gen {
		return cur.docs
	}
	infos, gen := h.c.CustomResources()
	if len(infos) == 0 {
		return getServing().disc
	}
	docs := buildDiscovery(append(servedResources(), infos...))
	h.custom.Store(&customDiscovery{generation: gen, docs: docs})
	return docs
}
