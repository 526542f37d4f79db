package apiserver

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/endpoints/handlers/negotiation"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/kinds"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/store"
)

// kubeletSubresources are served by a kubelet (or a proxy to a running process) upstream; a
// simulated cluster runs no containers, so they get a clear 400 instead of a bare 404.
var kubeletSubresources = map[string]map[string]bool{
	"pods":     {"exec": true, "attach": true, "proxy": true},
	"nodes":    {"proxy": true},
	"services": {"proxy": true},
}

func (h *handler) serveSubresource(rq *reqScope) {
	if rq.gvr.Group == "" && kubeletSubresources[rq.gvr.Resource][rq.sub] && rq.name != "" {
		if _, err := h.c.Get(rq.gvr, rq.ns, rq.name); err != nil {
			h.writeError(rq.w, rq.r, err)
			return
		}
		h.writeError(rq.w, rq.r, badRequestf("%s %q: %s is not available in a simulated workload cluster: no containers or processes run behind it",
			rq.gvr.Resource, rq.name, rq.sub))
		return
	}
	if !rq.ri.HasSubresource(rq.sub) || rq.name == "" {
		h.writeError(rq.w, rq.r, notFound())
		return
	}
	notSupported := func() {
		h.writeError(rq.w, rq.r, apierrors.NewMethodNotSupported(schema.GroupResource{Group: rq.gvr.Group, Resource: rq.gvr.Resource + "/" + rq.sub}, rq.verb))
	}
	switch rq.sub {
	case "status":
		switch rq.verb {
		case "get":
			h.serveGet(rq)
		case "update":
			h.serveUpdate(rq)
		case "patch":
			h.servePatch(rq)
		default:
			notSupported()
		}
	case "scale":
		switch rq.verb {
		case "get", "update", "patch":
			h.serveScale(rq)
		default:
			notSupported()
		}
	case "eviction":
		if rq.verb != "create" {
			notSupported()
			return
		}
		h.serveEviction(rq)
	case "binding":
		if rq.verb != "create" {
			notSupported()
			return
		}
		h.serveBinding(rq)
	case "log":
		if rq.verb != "get" {
			notSupported()
			return
		}
		h.serveLog(rq)
	case "portforward":
		if rq.verb != "get" && rq.verb != "create" {
			notSupported()
			return
		}
		if h.opts.PortForward == nil {
			h.writeError(rq.w, rq.r, notFound())
			return
		}
		if err := h.checkPortForwardCreate(rq); err != nil {
			h.writeError(rq.w, rq.r, err)
			return
		}
		if _, parsed := apirequest.RequestInfoFrom(rq.r.Context()); parsed {
			h.opts.PortForward.ServeHTTP(rq.w, rq.r)
			return
		}
		info, _ := h.infoFact.NewRequestInfo(rq.r)
		h.opts.PortForward.ServeHTTP(rq.w, rq.r.WithContext(apirequest.WithRequestInfo(rq.r.Context(), info)))
	default:
		h.writeError(rq.w, rq.r, notFound())
	}
}

// --- scale ---

// scaleOf reads the autoscaling/v1 Scale view of a scalable workload (or custom resource).
func scaleOf(rq *reqScope, obj runtime.Object) (*autoscalingv1.Scale, *kinds.Scale, error) {
	if rq.scale == nil {
		return nil, nil, apierrors.NewInternalError(fmt.Errorf("%v has no scale subresource", rq.gvr))
	}
	return rq.scale.ScaleOf(obj), rq.scale, nil
}

// serveScale translates the scale subresource onto the workload's spec.replicas.
func (h *handler) serveScale(rq *reqScope) {
	sv := getServing()
	scaleGV := autoscalingv1.SchemeGroupVersion
	obj, err := h.c.Get(rq.gvr, rq.ns, rq.name)
	if err != nil {
		h.writeError(rq.w, rq.r, err)
		return
	}
	cur, scale, err := scaleOf(rq, obj)
	if err != nil {
		h.writeError(rq.w, rq.r, err)
		return
	}
	if rq.verb == "get" {
		h.writeWith(rq, http.StatusOK, cur, sv.scale, scaleGV)
		return
	}

	var want *autoscalingv1.Scale
	var dryRun []string
	if rq.verb == "update" {
		opts := &metav1.UpdateOptions{}
		if err := decodeQuery(rq.r, opts); err != nil {
			h.writeError(rq.w, rq.r, err)
			return
		}
		dryRun = opts.DryRun
		if want, err = h.decodeScale(rq); err != nil {
			h.writeError(rq.w, rq.r, err)
			return
		}
	} else {
		opts := &metav1.PatchOptions{}
		pt, err := patchType(rq.r)
		if err == nil {
			err = decodeQuery(rq.r, opts)
		}
		if err == nil {
			if errs := metav1validation.ValidatePatchOptions(opts, pt); len(errs) > 0 {
				err = invalidOptions("PatchOptions", errs)
			}
		}
		if err != nil {
			h.writeError(rq.w, rq.r, err)
			return
		}
		dryRun = opts.DryRun
		body, err := h.readBody(rq.r)
		if err != nil {
			h.writeError(rq.w, rq.r, err)
			return
		}
		if want, err = patchScale(cur, pt, body, fieldValidation(opts.FieldValidation)); err != nil {
			h.writeError(rq.w, rq.r, err)
			return
		}
	}
	if want.Name != "" && want.Name != rq.name {
		h.writeError(rq.w, rq.r, badRequestf("the name of the object (%s) does not match the name on the URL (%s)", want.Name, rq.name))
		return
	}
	// The Scale's resourceVersion, when given, is a precondition on the workload.
	if want.ResourceVersion != "" {
		if err := setResourceVersion(obj, want.ResourceVersion); err != nil {
			h.writeError(rq.w, rq.r, err)
			return
		}
	}
	scale.SetReplicas(obj, want.Spec.Replicas)
	out, err := h.c.Update(rq.gvr, rq.ns, obj, store.UpdateOptions{DryRun: len(dryRun) > 0, FieldManager: "scale"})
	if err != nil {
		h.writeError(rq.w, rq.r, err)
		return
	}
	h.writeWith(rq, http.StatusOK, scale.ScaleOf(out), sv.scale, scaleGV)
}

func setResourceVersion(obj runtime.Object, rv string) error {
	m, ok := obj.(metav1.Object)
	if !ok {
		return apierrors.NewInternalError(fmt.Errorf("%T has no metadata", obj))
	}
	m.SetResourceVersion(rv)
	return nil
}

func (h *handler) decodeScale(rq *reqScope) (*autoscalingv1.Scale, error) {
	sv := getServing()
	info, err := negotiation.NegotiateInputSerializer(rq.r, false, sv.scale)
	if err != nil {
		return nil, err
	}
	body, err := h.readBody(rq.r)
	if err != nil {
		return nil, err
	}
	gvk := autoscalingv1.SchemeGroupVersion.WithKind("Scale")
	s := &autoscalingv1.Scale{}
	obj, got, err := info.Serializer.Decode(body, &gvk, s)
	if err != nil {
		return nil, badRequestf("the object provided is unrecognized (must be of type Scale): %v (%s)", err, summarize(body, 30))
	}
	if obj != s || got.Kind != "Scale" {
		return nil, badRequestf("the kind in the data (%s) does not match the expected kind (Scale)", got.Kind)
	}
	return s, nil
}

// patchScale applies a patch to the Scale view through the store's one patch path, with the Scale
// as the schema. Server-side apply on scale is a merge of the applied fields (the Scale view keeps
// no managed fields).
func patchScale(cur *autoscalingv1.Scale, pt types.PatchType, body []byte, directive string) (*autoscalingv1.Scale, error) {
	if pt == types.ApplyYAMLPatchType {
		js, err := yaml.YAMLToJSON(body)
		if err != nil {
			return nil, apierrors.NewBadRequest(err.Error())
		}
		pt, body = types.MergePatchType, js
	}
	out, _, err := store.PatchTyped(cur, pt, body, directive)
	if err != nil {
		return nil, err
	}
	return out.(*autoscalingv1.Scale), nil
}

// --- binding ---

// serveBinding assigns a pod to a node, as kube-scheduler does through pods/binding.
func (h *handler) serveBinding(rq *reqScope) {
	createOpts := &metav1.CreateOptions{}
	if err := decodeQuery(rq.r, createOpts); err != nil {
		h.writeError(rq.w, rq.r, err)
		return
	}
	if errs := metav1validation.ValidateCreateOptions(createOpts); len(errs) > 0 {
		h.writeError(rq.w, rq.r, invalidOptions("CreateOptions", errs))
		return
	}
	binding := &corev1.Binding{}
	if err := h.decodeSubresourceBody(rq, corev1.SchemeGroupVersion.WithKind("Binding"), binding); err != nil {
		h.writeError(rq.w, rq.r, err)
		return
	}
	if binding.Name != rq.name {
		h.writeError(rq.w, rq.r, badRequestf("name in URL does not match name in Binding object"))
		return
	}
	if binding.Namespace != "" && binding.Namespace != rq.ns {
		h.writeError(rq.w, rq.r, badRequestf("the namespace of the provided object does not match the namespace sent on the request"))
		return
	}
	if err := h.c.Bind(rq.ns, binding, store.CreateOptions{DryRun: len(createOpts.DryRun) > 0}); err != nil {
		h.writeError(rq.w, rq.r, err)
		return
	}
	h.writeObject(rq, http.StatusCreated, &metav1.Status{Status: metav1.StatusSuccess, Code: http.StatusCreated})
}

// decodeSubresourceBody decodes a request body that must hold an object of kind gvk into into.
func (h *handler) decodeSubresourceBody(rq *reqScope, gvk schema.GroupVersionKind, into runtime.Object) error {
	info, err := negotiation.NegotiateInputSerializer(rq.r, false, getServing().objects)
	if err != nil {
		return err
	}
	body, err := h.readBody(rq.r)
	if err != nil {
		return err
	}
	obj, got, err := info.Serializer.Decode(body, &gvk, into)
	if err != nil {
		return badRequestf("the object provided is unrecognized (must be of type %s): %v (%s)", gvk.Kind, err, summarize(body, 30))
	}
	if obj != into || got.Kind != gvk.Kind {
		return badRequestf("the kind in the data (%s) does not match the expected kind (%s)", got.Kind, gvk.Kind)
	}
	return nil
}

// --- eviction ---

var podsGVR = corev1.SchemeGroupVersion.WithResource("pods")
var pdbsGVR = policyv1.SchemeGroupVersion.WithResource("poddisruptionbudgets")

// serveEviction deletes a pod unless that would violate a PodDisruptionBudget, in which case it
// answers 429 like the real eviction subresource; an allowed eviction consumes one disruption.
func (h *handler) serveEviction(rq *reqScope) {
	createOpts := &metav1.CreateOptions{}
	if err := decodeQuery(rq.r, createOpts); err != nil {
		h.writeError(rq.w, rq.r, err)
		return
	}
	if errs := metav1validation.ValidateCreateOptions(createOpts); len(errs) > 0 {
		h.writeError(rq.w, rq.r, invalidOptions("CreateOptions", errs))
		return
	}
	ev := &policyv1.Eviction{}
	if err := h.decodeSubresourceBody(rq, policyv1.SchemeGroupVersion.WithKind("Eviction"), ev); err != nil {
		h.writeError(rq.w, rq.r, err)
		return
	}
	if ev.Name != rq.name {
		h.writeError(rq.w, rq.r, badRequestf("name in URL does not match name in Eviction object"))
		return
	}
	if ev.Namespace != "" && ev.Namespace != rq.ns {
		h.writeError(rq.w, rq.r, badRequestf("the namespace of the provided object does not match the namespace sent on the request"))
		return
	}
	podObj, err := h.c.Get(podsGVR, rq.ns, rq.name)
	if err != nil {
		h.writeError(rq.w, rq.r, err)
		return
	}
	pod, ok := podObj.(*corev1.Pod)
	if !ok {
		h.writeError(rq.w, rq.r, apierrors.NewInternalError(fmt.Errorf("store returned %T for a pod", podObj)))
		return
	}
	deleteOpts, err := evictionDeleteOptions(ev, createOpts)
	if err != nil {
		h.writeError(rq.w, rq.r, err)
		return
	}
	dryRun := len(deleteOpts.DryRun) > 0
	if !canIgnorePDB(pod) {
		if err := h.consumeDisruption(pod, dryRun); err != nil {
			h.writeError(rq.w, rq.r, err)
			return
		}
	}
	opts := store.DeleteOptions{DryRun: dryRun, Preconditions: deleteOpts.Preconditions,
		GracePeriodSeconds: deleteOpts.GracePeriodSeconds, PropagationPolicy: deleteOpts.PropagationPolicy}
	if !dryRun {
		if opts.Preconditions, err = h.markEvicted(rq.ns, rq.name, deleteOpts.Preconditions); err != nil {
			h.writeError(rq.w, rq.r, err)
			return
		}
	}
	if _, err := h.c.Delete(podsGVR, rq.ns, rq.name, opts); err != nil {
		h.writeError(rq.w, rq.r, err)
		return
	}
	h.writeObject(rq, http.StatusCreated, &metav1.Status{Status: metav1.StatusSuccess, Code: http.StatusCreated})
}

// markEvicted gives the pod about to be evicted the condition upstream's eviction REST adds
// before it deletes it (addConditionAndDeletePod): DisruptionTarget True, reason
// EvictionByEvictionAPI, so a Job's podFailurePolicy can tell the eviction from a failure. As
// upstream, the delete's preconditions are checked against the latest pod first (409 on a
// mismatch), the condition is written to the latest pod whatever changed meanwhile, and a
// resourceVersion precondition moves to the version that write made.
func (h *handler) markEvicted(ns, name string, pre *metav1.Preconditions) (*metav1.Preconditions, error) {
	for attempt := 1; ; attempt++ {
		obj, err := h.c.Get(podsGVR, ns, name)
		if err != nil {
			return nil, err
		}
		pod, ok := obj.(*corev1.Pod)
		if !ok {
			return nil, apierrors.NewInternalError(fmt.Errorf("store returned %T for a pod", obj))
		}
		if pre != nil {
			// Upstream's getLatestPod: the errors name the resource "Pod".
			gr := schema.GroupResource{Resource: "Pod"}
			if uid := pre.UID; uid != nil && *uid != "" && *uid != pod.UID {
				return nil, apierrors.NewConflict(gr, name, fmt.Errorf("the UID in the precondition (%s) does not match the UID in record (%s). The object might have been deleted and then recreated", *uid, pod.UID))
			}
			if rv := pre.ResourceVersion; rv != nil && *rv != "" && *rv != pod.ResourceVersion {
				return nil, apierrors.NewConflict(gr, name, fmt.Errorf("the ResourceVersion in the precondition (%s) does not match the ResourceVersion in record (%s). The object might have been modified", *rv, pod.ResourceVersion))
			}
		}
		next := pod.DeepCopy()
		setPodCondition(&next.Status, corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
			Reason: "EvictionByEvictionAPI", Message: "Eviction API: evicting"})
		out, err := h.c.Update(podsGVR, ns, next, store.UpdateOptions{Subresource: "status", FieldManager: "eviction"})
		if apierrors.IsConflict(err) && attempt < 10 {
			continue // written meanwhile: upstream's GuaranteedUpdate tries again on the latest pod
		}
		if err != nil {
			return nil, err
		}
		if pre != nil && pre.ResourceVersion != nil {
			pre = pre.DeepCopy()
			pre.ResourceVersion = ptr.To(out.(metav1.Object).GetResourceVersion())
		}
		return pre, nil
	}
}

// setPodCondition is upstream's podutil.UpdatePodCondition: a new condition, or the existing one
// of its type replaced, keeping its lastTransitionTime while its status stays.
func setPodCondition(status *corev1.PodStatus, c corev1.PodCondition) {
	c.LastTransitionTime = metav1.Now().Rfc3339Copy()
	for i := range status.Conditions {
		if old := &status.Conditions[i]; old.Type == c.Type {
			if old.Status == c.Status {
				c.LastTransitionTime = old.LastTransitionTime
			}
			*old = c
			return
		}
	}
	status.Conditions = append(status.Conditions, c)
}

// evictionDeleteOptions are the delete options an eviction deletes with: the Eviction's, with the
// request's dryRun (the query's CreateOptions) when the Eviction names none, as upstream's eviction
// REST propagates it; both naming different ones is an error.
func evictionDeleteOptions(ev *policyv1.Eviction, opts *metav1.CreateOptions) (*metav1.DeleteOptions, error) {
	if ev.DeleteOptions == nil {
		return &metav1.DeleteOptions{DryRun: opts.DryRun}, nil
	}
	if len(ev.DeleteOptions.DryRun) == 0 {
		d := ev.DeleteOptions.DeepCopy()
		d.DryRun = opts.DryRun
		return d, nil
	}
	if len(opts.DryRun) > 0 && !slices.Equal(opts.DryRun, ev.DeleteOptions.DryRun) {
		//lint:ignore ST1005 upstream's message
		return nil, fmt.Errorf("Non-matching dry-run options in request and content: %v and %v", opts.DryRun, ev.DeleteOptions.DryRun)
	}
	return ev.DeleteOptions, nil
}

// canIgnorePDB: pods that are not running (or already going away) do not count against a budget.
func canIgnorePDB(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed ||
		p.Status.Phase == corev1.PodPending || p.DeletionTimestamp != nil
}

func tooManyRequests(cause string, retryAfterSeconds int) error {
	err := apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", retryAfterSeconds)
	err.ErrStatus.Details.Causes = append(err.ErrStatus.Details.Causes, metav1.StatusCause{Type: policyv1.DisruptionBudgetCause, Message: cause})
	return err
}

// consumeDisruption finds the pod's budget and takes one allowed disruption from it, retrying on
// write conflicts with concurrent evictions.
func (h *handler) consumeDisruption(pod *corev1.Pod, dryRun bool) error {
	for attempt := 0; attempt < 5; attempt++ {
		list, err := h.c.List(pdbsGVR, pod.Namespace, store.ListOptions{})
		if err != nil {
			return err
		}
		var matched []policyv1.PodDisruptionBudget
		pdbs, ok := list.(*policyv1.PodDisruptionBudgetList)
		if !ok {
			return apierrors.NewInternalError(fmt.Errorf("store returned %T for a PodDisruptionBudget list", list))
		}
		for _, pdb := range pdbs.Items {
			sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
			if err != nil || sel.Empty() || !sel.Matches(labels.Set(pod.Labels)) {
				continue
			}
			matched = append(matched, pdb)
		}
		switch {
		case len(matched) == 0:
			return nil
		case len(matched) > 1:
			return apierrors.NewInternalError(fmt.Errorf("this pod has more than one PodDisruptionBudget, which the eviction subresource does not support"))
		}
		pdb := matched[0].DeepCopy()
		if pdb.Status.ObservedGeneration < pdb.Generation {
			return tooManyRequests(fmt.Sprintf("The disruption budget %s is still being processed by the server.", pdb.Name), 10)
		}
		if pdb.Status.DisruptionsAllowed < 0 {
			return apierrors.NewForbidden(pdbsGVR.GroupResource(), pdb.Name, fmt.Errorf("pdb disruptions allowed is negative"))
		}
		if pdb.Status.DisruptionsAllowed == 0 {
			return tooManyRequests(fmt.Sprintf("The disruption budget %s needs %d healthy pods and has %d currently",
				pdb.Name, pdb.Status.DesiredHealthy, pdb.Status.CurrentHealthy), 0)
		}
		pdb.Status.DisruptionsAllowed--
		if pdb.Status.DisruptedPods == nil {
			pdb.Status.DisruptedPods = map[string]metav1.Time{}
		}
		pdb.Status.DisruptedPods[pod.Name] = metav1.Now()
		_, err = h.c.Update(pdbsGVR, pdb.Namespace, pdb, store.UpdateOptions{DryRun: dryRun, Subresource: "status", FieldManager: "eviction"})
		if apierrors.IsConflict(err) {
			continue
		}
		return err
	}
	return apierrors.NewConflict(pdbsGVR.GroupResource(), "", fmt.Errorf("too many concurrent evictions, please retry"))
}

// --- log ---

// serveLog answers pods/log with a short synthesized log: the simulated pods run no processes,
// but `kubectl logs` (and tooling that tails control-plane pods) must get a real text stream.
func (h *handler) serveLog(rq *reqScope) {
	obj, err := h.c.Get(podsGVR, rq.ns, rq.name)
	if err != nil {
		h.writeError(rq.w, rq.r, err)
		return
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		h.writeError(rq.w, rq.r, apierrors.NewInternalError(fmt.Errorf("store returned %T for a pod", obj)))
		return
	}
	q := rq.r.URL.Query()
	container := q.Get("container")
	var names []string
	for _, c := range pod.Spec.Containers {
		names = append(names, c.Name)
	}
	var ctr *corev1.Container
	switch {
	case container == "" && len(pod.Spec.Containers) == 1:
		ctr = &pod.Spec.Containers[0]
	case container == "":
		h.writeError(rq.w, rq.r, badRequestf("a container name must be specified for pod %s, choose one of: %v", pod.Name, names))
		return
	default:
		for i := range pod.Spec.Containers {
			if pod.Spec.Containers[i].Name == container {
				ctr = &pod.Spec.Containers[i]
			}
		}
		for i := range pod.Spec.InitContainers {
			if pod.Spec.InitContainers[i].Name == container {
				ctr = &pod.Spec.InitContainers[i]
			}
		}
		if ctr == nil {
			h.writeError(rq.w, rq.r, badRequestf("container %s is not valid for pod %s", container, pod.Name))
			return
		}
	}
	start := pod.CreationTimestamp.Time
	if pod.Status.StartTime != nil {
		start = pod.Status.StartTime.Time
	}
	lines := []string{
		fmt.Sprintf("goofy: simulated container %q of pod %s/%s on node %q", ctr.Name, pod.Namespace, pod.Name, pod.Spec.NodeName),
		fmt.Sprintf("goofy: image %s", ctr.Image),
	}
	if len(ctr.Command) > 0 || len(ctr.Args) > 0 {
		lines = append(lines, "goofy: command "+strings.Join(append(append([]string{}, ctr.Command...), ctr.Args...), " "))
	}
	lines = append(lines, fmt.Sprintf("goofy: started at %s; no real process runs in a simulated cluster", start.UTC().Format(time.RFC3339)))
	if v := q.Get("tailLines"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			h.writeError(rq.w, rq.r, badRequestf("invalid tailLines %q", v))
			return
		}
		if n < len(lines) {
			lines = lines[len(lines)-n:]
		}
	}
	var b strings.Builder
	for i, l := range lines {
		if q.Get("timestamps") == "true" {
			b.WriteString(start.Add(time.Duration(i)*time.Millisecond).UTC().Format(time.RFC3339Nano) + " ")
		}
		b.WriteString(l + "\n")
	}
	out := b.String()
	if v := q.Get("limitBytes"); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n >= 0 && n < len(out) {
			out = out[:n]
		}
	}
	rq.w.Header().Set("Content-Type", "text/plain")
	rq.w.WriteHeader(http.StatusOK)
	_, _ = rq.w.Write([]byte(out))
}
