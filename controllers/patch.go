package controllers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/annotations"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

// objectPatcher writes what one reconcile changed on a Goofy object in at most two requests: a
// merge patch on /status, then one on the object (metadata and spec). Nothing is sent when
// nothing changed. A finalizer the object lacks goes first, in an object patch of that reconcile's
// own (persistFinalizer).
//
// CAPI's patch helper sends conditions, status and spec as three requests, and its conditions
// request carries the resourceVersion the reconcile started from; at fleet scale those requests
// are the provider's main load on the management API server (docs/performance.md). Goofy owns
// every condition and status field of its objects, so one status patch carries them all.
//
// Both patches are guarded by the resourceVersion (optimistic lock): a reconcile that read a stale
// cache must not write its older view over a newer one (a merge patch replaces whole lists such as
// conditions and finalizers). Status goes first so that the object's watch event, which the
// reconcilers react to, shows the finished write.
type objectPatcher struct {
	client client.Client
	before client.Object
}

func newObjectPatcher(c client.Client, obj client.Object) *objectPatcher {
	return &objectPatcher{client: c, before: obj.DeepCopyObject().(client.Object)}
}

// staleRetry is how soon an object is reconciled again after its patch found it changed (a stale
// cache read, or a concurrent write by CAPI); by then the cache has the newer version.
const staleRetry = 250 * time.Millisecond

// errStaleObject reports that the object changed since the reconcile read it; the caller requeues.
type errStaleObject struct{ err error }

func (e errStaleObject) Error() string { return e.err.Error() }
func (e errStaleObject) Unwrap() error { return e.err }

// finish is the deferred end of a reconcile: it writes obj's changes; a stale read turns into a
// short requeue, any other error joins the reconcile's.
func (p *objectPatcher) finish(ctx context.Context, obj client.Object, res *ctrl.Result, reterr *error) {
	if errors.Is(*reterr, errFinalizerStored) {
		// What this reconcile found is found again by the next; nothing else is written.
		*res, *reterr = ctrl.Result{}, nil
		return
	}
	var stale errStaleObject
	if errors.As(*reterr, &stale) {
		// persistFinalizer found the object changed: any patch would conflict too.
		ctrl.LoggerFrom(ctx).V(4).Info("Object changed while reconciling, requeueing", "reason", (*reterr).Error())
		*res, *reterr = ctrl.Result{RequeueAfter: staleRetry}, nil
		return
	}
	err := p.Patch(ctx, obj)
	if err == nil {
		return
	}
	if errors.As(err, &stale) && *reterr == nil {
		ctrl.LoggerFrom(ctx).V(4).Info("Object changed while reconciling, requeueing", "reason", err.Error())
		*res = ctrl.Result{RequeueAfter: staleRetry}
		return
	}
	*reterr = kerrors.NewAggregate([]error{*reterr, err})
}

// Patch sends obj's changes since newObjectPatcher. A conflict comes back as errStaleObject.
func (p *objectPatcher) Patch(ctx context.Context, obj client.Object) error {
	if reflect.DeepEqual(p.before, obj) {
		return nil // most reconciles change nothing: skip marshalling both versions
	}
	fields, err := p.diff(obj)
	if err != nil {
		return err
	}
	if _, specChanged := fields["spec"]; specChanged {
		// The API server bumps a custom resource's generation by one for every spec change. The
		// conditions this reconcile set describe the object including that change (Goofy wrote
		// it), so they observe the new generation; otherwise the next reconcile would spend a
		// status patch on observedGeneration alone.
		if setter, ok := obj.(conditions.Setter); ok {
			conds := setter.GetConditions()
			for i := range conds {
				if conds[i].ObservedGeneration == obj.GetGeneration() {
					conds[i].ObservedGeneration++
				}
			}
			setter.SetConditions(conds)
			if fields, err = p.diff(obj); err != nil {
				return err
			}
		}
	}
	status, hasStatus := fields["status"]
	delete(fields, "status")
	rv := p.before.GetResourceVersion()

	if hasStatus {
		body, err := json.Marshal(map[string]any{"metadata": map[string]string{"resourceVersion": rv}, "status": status})
		if err != nil {
			return err
		}
		// Patch a copy: the response would overwrite obj's spec and metadata with the old ones.
		sent := obj.DeepCopyObject().(client.Object)
		if err := p.client.Status().Patch(ctx, sent, client.RawPatch(types.MergePatchType, body)); err != nil {
			return p.wrap(obj, "status", err)
		}
		rv = sent.GetResourceVersion()
		obj.SetResourceVersion(rv)
	}
	if len(fields) > 0 {
		meta := map[string]json.RawMessage{}
		if raw, ok := fields["metadata"]; ok {
			if err := json.Unmarshal(raw, &meta); err != nil {
				return err
			}
		}
		meta["resourceVersion"], _ = json.Marshal(rv)
		fields["metadata"], _ = json.Marshal(meta)
		body, err := json.Marshal(fields)
		if err != nil {
			return err
		}
		sent := obj.DeepCopyObject().(client.Object)
		if err := p.client.Patch(ctx, sent, client.RawPatch(types.MergePatchType, body)); err != nil {
			return p.wrap(obj, "object", err)
		}
		obj.SetResourceVersion(sent.GetResourceVersion())
	}
	return nil
}

// persistFinalizer adds finalizer to obj and, when the object as read lacks it, writes it at once:
// one object patch with it and whatever else metadata and spec gained so far (a GoofyCluster's
// endpoint on a reserved port, a GoofyMachine's provider ID), before the caller provisions
// anything that deletion has to release. In the deferred patch (status first) a
// conflict or a kill after the status patch would leave something provisioned with no finalizer,
// and a deletion would then drop the object without releasing it (CAPI's controllers add the
// finalizer and return before they provision, for the same reason). The deferred patch then
// writes only what follows.
func (p *objectPatcher) persistFinalizer(ctx context.Context, obj client.Object, finalizer string) error {
	controllerutil.AddFinalizer(obj, finalizer)
	if controllerutil.ContainsFinalizer(p.before, finalizer) {
		return nil
	}
	fields, err := p.diff(obj)
	if err != nil {
		return err
	}
	delete(fields, "status")
	meta := map[string]json.RawMessage{}
	if err := json.Unmarshal(fields["metadata"], &meta); err != nil {
		return err
	}
	meta["resourceVersion"], _ = json.Marshal(p.before.GetResourceVersion())
	fields["metadata"], _ = json.Marshal(meta)
	body, err := json.Marshal(fields)
	if err != nil {
		return err
	}
	// The response decodes into a copy of the object as read, whose status is the stored one
	// (the resourceVersion guards it): that is the object as stored now.
	stored := p.before.DeepCopyObject().(client.Object)
	if err := p.client.Patch(ctx, stored, client.RawPatch(types.MergePatchType, body)); err != nil {
		return p.wrap(obj, "finalizer", err)
	}
	if gen := stored.GetGeneration(); gen != obj.GetGeneration() {
		// A spec change rode along: the conditions set so far describe the object including it.
		if setter, ok := obj.(conditions.Setter); ok {
			conds := setter.GetConditions()
			for i := range conds {
				if conds[i].ObservedGeneration == obj.GetGeneration() {
					conds[i].ObservedGeneration = gen
				}
			}
			setter.SetConditions(conds)
		}
		obj.SetGeneration(gen)
	}
	obj.SetResourceVersion(stored.GetResourceVersion())
	obj.SetManagedFields(stored.GetManagedFields())
	p.before = stored
	return errFinalizerStored
}

// errFinalizerStored ends the reconcile in which persistFinalizer wrote the finalizer, as CAPI's
// controllers return after adding theirs: the write's own watch event reconciles the object again,
// from a cache that has it. Going on would write status on top, and the reconcile that event
// starts would read the cache before that status write and conflict (409, a retry 250 ms later:
// 51 conflicts among 355 writes at N=20).
var errFinalizerStored = errors.New("finalizer stored: reconciled again on its watch event")

// diff is the JSON merge patch from the object as read to obj, by top-level field.
func (p *objectPatcher) diff(obj client.Object) (map[string]json.RawMessage, error) {
	data, err := client.MergeFrom(p.before).Data(obj)
	if err != nil {
		return nil, fmt.Errorf("computing the patch of %s: %w", klogRef(obj), err)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		return nil, fmt.Errorf("splitting the patch of %s: %w", klogRef(obj), err)
	}
	return fields, nil
}

func (p *objectPatcher) wrap(obj client.Object, what string, err error) error {
	if apierrors.IsNotFound(err) && !obj.GetDeletionTimestamp().IsZero() && len(obj.GetFinalizers()) == 0 {
		return nil // deleted once its finalizer went: nothing left to write
	}
	err = fmt.Errorf("patching the %s of %s: %w", what, klogRef(obj), err)
	if apierrors.IsConflict(err) {
		return errStaleObject{err}
	}
	return err
}

// pausable is a Goofy object with conditions.
type pausable interface {
	client.Object
	conditions.Setter
}

// setPausedCondition records whether reconciliation is paused (the Cluster's spec.paused or the
// object's cluster.x-k8s.io/paused annotation) as CAPI's v1beta2 contract asks, in memory: the
// reconcile's one patch carries it. It reports whether the object is paused.
//
// The condition is the one CAPI's paused.EnsurePausedCondition writes (TestPausedConditionIsCAPIs);
// that helper sends it in a patch of its own and returns early, which would cost every object a
// write and a reconcile more when it is created and at each pause change (docs/performance.md).
func setPausedCondition(cluster *clusterv1.Cluster, obj pausable, kind string) bool {
	c := metav1.Condition{Type: clusterv1.PausedCondition, Status: metav1.ConditionFalse, Reason: clusterv1.NotPausedReason}
	var why []string
	if cluster != nil && ptr.Deref(cluster.Spec.Paused, false) {
		why = append(why, "Cluster spec.paused is set to true")
	}
	if annotations.HasPaused(obj) {
		why = append(why, kind+" has the "+clusterv1.PausedAnnotation+" annotation")
	}
	if len(why) > 0 {
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, clusterv1.PausedReason, strings.Join(why, ", ")
	}
	conditions.Set(obj, c)
	return c.Status == metav1.ConditionTrue
}
