package storage

import (
	"reflect"
	"sync"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Settled versions move to pages of their own. A copy made with new lands in the free slots of
// the runtime's spans of its size class, which after a fleet's set-up are the holes its garbage
// left between the live objects: copying alone compacts nothing. The runtime gives an allocation
// of more than 6,912 and at most 8,192 bytes a page of its own (its size class of one object per
// span), so relocation copies a version into an element of an array of that size, one array per
// type at a time, filled in turn: the versions that settle together (a cluster's pods once its
// set-up's history expired) share pages that hold nothing else. An array lives until all its
// elements are unused, as a span does; its elements are never handed out twice.
//
// Types too large for two to a page (or whose array would fall in a smaller size class) are
// copied with new, as before, and so are types small enough for more than maxPerPage to a page
// (an unstructured object is one map pointer): the runtime reuses a freed slot, a page does not,
// so the more elements a page has, the likelier one long-lived version keeps it whole.

const (
	pageBytes = 8192 // the size class of one object per 8 KiB span
	// belowPage is the size class under it: an array of this size or less shares its span.
	belowPage  = 6912
	maxPerPage = 64
)

// settledPages hands out the elements of one array per type.
var settledPages struct {
	mu     sync.Mutex
	byType map[reflect.Type]*page
}

type page struct {
	elems reflect.Value // an addressable array
	next  int
}

// relocatedCopy returns a copy of obj (a pointer to a struct: its top-level fields, the rest
// shared) in a page of settled versions.
func relocatedCopy(obj client.Object) client.Object {
	t := reflect.TypeOf(obj).Elem()
	size := int(t.Size())
	n := pageBytes / max(size, 1)
	if n < 2 || n > maxPerPage || n*size <= belowPage {
		return shallowCopy(obj)
	}
	settledPages.mu.Lock()
	p := settledPages.byType[t]
	if p == nil || p.next == p.elems.Len() {
		if settledPages.byType == nil {
			settledPages.byType = map[reflect.Type]*page{}
		}
		p = &page{elems: reflect.New(reflect.ArrayOf(n, t)).Elem()}
		settledPages.byType[t] = p
	}
	e := p.elems.Index(p.next)
	p.next++
	settledPages.mu.Unlock()
	e.Set(reflect.ValueOf(obj).Elem()) // the element is this caller's alone
	return e.Addr().Interface().(client.Object)
}
