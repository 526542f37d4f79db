package store

import (
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metainternalvalidation "k8s.io/apimachinery/pkg/apis/meta/internalversion/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	apistorage "k8s.io/apiserver/pkg/storage"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/storage"
)

// selection is a validated label and field selector.
type selection struct {
	label labels.Selector // nil: everything
	field fields.Selector // nil: everything; labels already converted to the kind's field set
}

func (s selection) everything() bool {
	return (s.label == nil || s.label.Empty()) && (s.field == nil || s.field.Empty())
}

func (s selection) matches(b *servedResource, obj client.Object) bool {
	if s.label != nil && !s.label.Empty() && !s.label.Matches(labels.Set(obj.GetLabels())) {
		return false
	}
	if s.field != nil && !s.field.Empty() && !s.field.Matches(b.strategy.SelectableFields(obj)) {
		return false
	}
	return true
}

// selectors validates the selectors of a request against the kind's field set; an unsupported
// field is a 400, with the real API server's message.
func (b *servedResource) selectors(opts ListOptions) (selection, error) {
	sel := selection{label: opts.LabelSelector}
	if opts.FieldSelector != nil && !opts.FieldSelector.Empty() {
		f, err := opts.FieldSelector.Transform(func(field, value string) (string, string, error) {
			l, ok := b.strategy.FieldLabel(field)
			if !ok {
				return "", "", fmt.Errorf("field label not supported: %s", field)
			}
			return l, value, nil
		})
		if err != nil {
			return sel, apierrors.NewBadRequest(err.Error())
		}
		sel.field = f
	}
	return sel, nil
}

// validateListOptions applies the real API server's rules on resourceVersion, resourceVersionMatch,
// continue and sendInitialEvents.
func validateListOptions(opts ListOptions, isWatch bool) error {
	in := internalversion.ListOptions{
		ResourceVersion:      opts.ResourceVersion,
		ResourceVersionMatch: opts.ResourceVersionMatch,
		Continue:             opts.Continue,
		SendInitialEvents:    opts.SendInitialEvents,
		AllowWatchBookmarks:  opts.AllowWatchBookmarks,
		Watch:                isWatch,
		Limit:                opts.Limit,
	}
	if errs := metainternalvalidation.ValidateListOptions(&in, true); len(errs) > 0 {
		return apierrors.NewInvalid(schema.GroupKind{Group: metav1.GroupName, Kind: "ListOptions"}, "", errs)
	}
	return nil
}

func parseRV(s string) (uint64, error) {
	rv, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, apierrors.NewBadRequest(fmt.Sprintf("invalid resource version %q: %v", s, err))
	}
	return rv, nil
}

// tooLargeRV is what the real API server answers when asked for a state it has not reached
// (retrySeconds: 1 from the watch cache for a resourceVersion, 0 from storage for a continue
// token).
func tooLargeRV(want, have uint64, retrySeconds int) error {
	return apistorage.NewTooLargeResourceVersionError(want, have, retrySeconds)
}

func tooOldRV(want, oldest uint64) error {
	return apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %d (%d)", want, oldest))
}

// Continue tokens are kube-apiserver's (apistorage.EncodeContinue): the snapshot's
// resourceVersion and the key of the last object returned, relative to continueKeyPrefix. A
// negative resourceVersion continues at the latest state (handed out with a 410 for an expired
// token, as etcd3's store does).
const continueKeyPrefix = "/"

func encodeContinue(rv int64, lastKey string) string {
	// The key has the prefix, and a token encodes to JSON: EncodeContinue cannot fail here.
	tok, _ := apistorage.EncodeContinue(continueKeyPrefix+lastKey, continueKeyPrefix, rv)
	return tok
}

// decodeContinue returns a token's snapshot resourceVersion and the key the page resumes after.
func decodeContinue(s string) (rv int64, after string, err error) {
	key, rv, err := apistorage.DecodeContinue(s, continueKeyPrefix)
	if err != nil {
		return 0, "", apierrors.NewBadRequest(fmt.Sprintf("invalid continue token: %v", err))
	}
	return rv, strings.TrimPrefix(key, continueKeyPrefix), nil
}

// continueExpired is kube-apiserver's answer to a continue token whose snapshot is no longer
// kept (etcd3's handleCompactedErrorForPaging): 410, with a token that continues after the same
// key at the latest state, for a client that accepts an inconsistent list.
func continueExpired(after string) error {
	err := apierrors.NewResourceExpired("The provided continue parameter is too old to display a consistent list result. " +
		"You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. " +
		"Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted " +
		"between the time the first chunk was returned and now may show up in the list.")
	err.ErrStatus.ListMeta.Continue = encodeContinue(-1, after)
	return err
}

// snapshotLocked returns the sorted keys and objects of a kind in a namespace as they were at rv
// (0: now), rebuilt by undoing newer events from the history. Callers hold c.mu.
func (c *Cluster) snapshotLocked(gr schema.GroupResource, namespace string, rv uint64) ([]string, map[string]storage.Value, error) {
	cur := c.objs.Resource(gr)
	if rv == 0 || rv == c.objs.ResourceVersion() {
		return storage.Keys(cur, namespace), cur, nil
	}
	evs, ok := c.objs.Since(gr, rv, 0)
	if !ok {
		return nil, nil, errExpired
	}
	m := make(map[string]storage.Value, len(cur))
	for _, k := range storage.Keys(cur, namespace) {
		m[k] = cur[k]
	}
	prefix := namespace + "/"
	for i := len(evs) - 1; i >= 0; i-- {
		e := evs[i]
		if e.GroupResource() != gr || (namespace != "" && !strings.HasPrefix(e.Key, prefix)) {
			continue
		}
		if e.Type == watch.Added {
			delete(m, e.Key)
		} else {
			m[e.Key] = e.Old
		}
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys, m, nil
}

var errExpired = apierrors.NewResourceExpired("expired")

// List returns a typed *XxxList with ListMeta.ResourceVersion, Continue and RemainingItemCount.
func (c *Cluster) List(gvr schema.GroupVersionResource, namespace string, opts ListOptions) (runtime.Object, error) {
	b, err := c.lookup(gvr)
	if err != nil {
		return nil, err
	}
	if b.storedAs != nil {
		return c.listView(b, namespace, opts)
	}
	if !b.info.Namespaced {
		namespace = ""
	}
	if err := validateListOptions(opts, false); err != nil {
		return nil, err
	}
	c.beforeRead(gvr.GroupResource(), namespace)
	sel, err := b.selectors(opts)
	if err != nil {
		return nil, err
	}
	var (
		at    uint64 // snapshot RV, 0: current
		after string // resume after this key
	)
	if opts.Continue != "" {
		if opts.ResourceVersion != "" && opts.ResourceVersion != "0" {
			return nil, apierrors.NewBadRequest("specifying resource version is not allowed when using continue")
		}
		rv, start, err := decodeContinue(opts.Continue)
		if err != nil {
			return nil, err
		}
		if rv > 0 { // else the latest state, where the page after an expired token continues
			at = uint64(rv)
		}
		after = start
	} else if opts.ResourceVersion != "" && opts.ResourceVersion != "0" {
		rv, err := parseRV(opts.ResourceVersion)
		if err != nil {
			return nil, err
		}
		exact := opts.ResourceVersionMatch == metav1.ResourceVersionMatchExact ||
			(opts.ResourceVersionMatch == "" && opts.Limit > 0) // legacy paginated lists are exact
		// A state the cluster has not reached yet: wait for it a little, as the watch cache does.
		if err := c.waitFresh(rv); err != nil {
			return nil, err
		}
		if exact {
			at = rv
		}
	}

	c.mu.RLock()
	snapRV := c.objs.ResourceVersion()
	if at > snapRV { // a continue token from no list of this cluster
		c.mu.RUnlock()
		return nil, tooLargeRV(at, snapRV, 0)
	}
	if at != 0 {
		snapRV = at
	}
	keys, objs, err := c.snapshotLocked(gvr.GroupResource(), namespace, at)
	var page []client.Object
	var pageKeys []string
	if err == nil {
		// Collect candidates under the lock; objects are immutable so matching can happen later.
		i := sort.SearchStrings(keys, after)
		if after != "" && i < len(keys) && keys[i] == after {
			i++
		}
		pageKeys = keys[i:]
		page = make([]client.Object, len(pageKeys))
		for j, k := range pageKeys {
			page[j] = objs[k].Object()
		}
	}
	oldest := c.objs.OldestCovered(gvr.GroupResource())
	commit := c.objs.LastCommit()
	c.mu.RUnlock()
	if !opts.SkipSyncWait && !c.settled(commit) {
		return c.List(gvr, namespace, opts) // what it read was undone: read again
	}
	if err != nil {
		if opts.Continue != "" {
			return nil, continueExpired(after)
		}
		return nil, tooOldRV(at, oldest)
	}

	var out []client.Object
	var cont string
	var remaining *int64
	for j, obj := range page {
		if !sel.matches(b, obj) {
			continue
		}
		if opts.Limit > 0 && int64(len(out)) == opts.Limit {
			// More matches exist: hand out a cursor into the same snapshot after the last key returned.
			last := out[len(out)-1]
			cont = encodeContinue(int64(snapRV), storage.Key(last.GetNamespace(), last.GetName()))
			if sel.everything() {
				n := int64(len(page) - j)
				remaining = &n
			}
			break
		}
		out = append(out, obj)
	}
	return b.buildList(out, formatRV(snapRV), cont, remaining, !opts.ShareItems), nil
}

// buildList makes the typed list of a kind from stored objects (deep-copied when copyItems).
func (b *servedResource) buildList(objs []client.Object, rv, cont string, remaining *int64, copyItems bool) runtime.Object {
	if b.custom {
		return b.buildUnstructuredList(objs, rv, cont, remaining, copyItems)
	}
	listObj, err := Scheme().New(b.info.GVR.GroupVersion().WithKind(b.info.ListKind))
	if err != nil {
		panic(fmt.Sprintf("store: list kind of %s missing from scheme: %v", b.info.Kind, err))
	}
	listObj.GetObjectKind().SetGroupVersionKind(b.info.GVR.GroupVersion().WithKind(b.info.ListKind))
	items := reflect.ValueOf(listObj).Elem().FieldByName("Items")
	slice := reflect.MakeSlice(items.Type(), len(objs), len(objs))
	deepCopyInto, _ := reflect.PointerTo(b.goType).MethodByName("DeepCopyInto")
	for i, obj := range objs {
		item := slice.Index(i)
		if copyItems {
			deepCopyInto.Func.Call([]reflect.Value{reflect.ValueOf(obj), item.Addr()})
		} else {
			item.Set(reflect.ValueOf(obj).Elem())
		}
		// Items of a list carry no apiVersion/kind, as in the real API server's responses.
		item.FieldByName("TypeMeta").Set(reflect.Zero(item.FieldByName("TypeMeta").Type()))
	}
	items.Set(slice)
	lm, _ := meta.ListAccessor(listObj)
	lm.SetResourceVersion(rv)
	lm.SetContinue(cont)
	lm.SetRemainingItemCount(remaining)
	return listObj
}

// buildUnstructuredList is buildList for a custom resource. Its items keep apiVersion and kind,
// as kube-apiserver's custom resource lists do.
func (b *servedResource) buildUnstructuredList(objs []client.Object, rv, cont string, remaining *int64, copyItems bool) runtime.Object {
	list := &unstructured.UnstructuredList{Object: map[string]any{}}
	list.SetGroupVersionKind(b.info.GVR.GroupVersion().WithKind(b.info.ListKind))
	list.Items = make([]unstructured.Unstructured, len(objs))
	for i, obj := range objs {
		u := obj.(*unstructured.Unstructured)
		if copyItems {
			u = u.DeepCopy()
		}
		list.Items[i] = *u
	}
	list.SetResourceVersion(rv)
	list.SetContinue(cont)
	list.SetRemainingItemCount(remaining)
	return list
}
