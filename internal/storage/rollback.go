package storage

import (
	"slices"

	"k8s.io/apimachinery/pkg/watch"
)

// Writes reach readers' memory before the disk: a write is applied here and queued to the DB under
// the owner's lock, and the disk confirms it later (group commit). Until then the change is
// unsettled: if its commit fails, the change and every later change of the cluster (which may
// build on it, and which the DB fails too) are undone here, newest first, so that memory is what
// the disk holds again. Readers wait for the commit of what they read (LastCommit) before they
// answer, so no client sees a change that is then undone.

// unsettledChange is a change whose commit has not been seen to succeed.
type unsettledChange struct {
	ev     *Event
	commit Commit
}

// keepUnsettled records a change just queued to the DB, and forgets the oldest changes already on
// disk.
func (o *Objects) keepUnsettled(e *Event) {
	if o.db == nil {
		return
	}
	o.settle()
	o.unsettled = append(o.unsettled, unsettledChange{ev: e, commit: o.commit})
}

// settle forgets the changes at the head of the log whose commits succeeded; it returns the index
// of the first one whose commit failed, -1 if none did.
func (o *Objects) settle() int {
	n := 0
	for n < len(o.unsettled) && o.unsettled[n].commit.Done() {
		if o.unsettled[n].commit.Wait() != nil {
			break
		}
		n++
	}
	o.unsettled = slices.Delete(o.unsettled, 0, n)
	if len(o.unsettled) == 0 {
		o.unsettled = nil
	}
	if len(o.unsettled) > 0 && o.unsettled[0].commit.Done() {
		return 0
	}
	return -1
}

// Rollback undoes, newest first, the change whose commit failed and every change after it, and
// returns the undone events newest first (the owner undoes what it derived from them); nil when
// no commit failed. Afterwards the cluster's resourceVersion is what it was before the failed
// change, and the DB takes the cluster's writes again.
func (o *Objects) Rollback() []*Event {
	if o.settle() < 0 {
		if o.commit.Done() && o.commit.Wait() != nil {
			o.commit = Commit{} // failed, but nothing is left to undo (the cluster was closed)
		}
		return nil
	}
	undone := make([]*Event, 0, len(o.unsettled))
	for i := len(o.unsettled) - 1; i >= 0; i-- {
		e := o.unsettled[i].ev
		o.undo(e)
		undone = append(undone, e)
	}
	o.rv = o.unsettled[0].ev.RV - 1
	o.unsettled = nil
	o.commit = Commit{}
	if o.db != nil {
		o.db.Recover(o.bucket)
	}
	return undone
}

// undo puts back the state before e, the newest change left.
func (o *Objects) undo(e *Event) {
	gr := e.GroupResource()
	m := o.objects[gr]
	ref := objectRef{gr: gr, key: e.Key}
	o.enc.drop(ref)
	switch e.Type {
	case watch.Added:
		delete(m, e.Key)
		o.bytes -= int64(e.Size)
	case watch.Deleted:
		if m == nil {
			m = map[string]Value{}
			o.objects[gr] = m
		}
		m[e.Key] = e.Old
		o.bytes += int64(e.Size)
	default: // Modified
		m[e.Key] = e.Old
		o.bytes += int64(SizeOf(e.Old.Object())) - int64(e.Size)
	}
	o.hist.dropNewest(e)
}
