package store

import (
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/storage"
)

// ErrStateUnreadable wraps why a cluster's state on disk cannot be loaded.
var ErrStateUnreadable = storage.ErrUnreadable

// unlockDurable releases c.mu after a write and (unless skipWait, see UpdateOptions.SkipSyncWait)
// waits until everything queued so far is on disk, so that no client is told of a write a crash
// could lose. Batches commit in queue order, so the last queued write being on disk means all
// earlier ones are. The wait happens outside the lock: readers and other writers go on while
// the disk syncs, and their writes join the next batch. A write that did not reach the disk is
// undone (rollBack) and answered 500.
func (c *Cluster) unlockDurable(errp *error, skipWait bool) {
	commit := c.objs.LastCommit()
	c.mu.Unlock()
	if skipWait {
		return
	}
	if err := commit.Wait(); err != nil {
		c.rollBack()
		if *errp == nil {
			*errp = apierrors.NewInternalError(fmt.Errorf("storage of workload cluster %s: %w", c.name, err))
		}
	}
}

// settled waits until commit, the last write queued when a read took its state, is on disk, so
// that a reader never answers with a change a crash or a failed commit could take back. It
// reports false when that write failed: the failed changes have been undone, and the caller
// reads again.
func (c *Cluster) settled(commit storage.Commit) bool {
	if commit.Wait() == nil {
		return true
	}
	c.rollBack()
	return false
}

// rollBack undoes the changes whose commit failed (storage.Objects.Rollback) and what the cluster
// derived from them: the served custom resources, and the informers' view (they get the reverse
// changes, newest first). Timers the simulated components armed for an undone
// change look at the stored state when they fire.
func (c *Cluster) rollBack() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.objs.Rollback() {
		var undone, restored client.Object // the change's result, and what is stored again
		if e.Type != watch.Deleted {
			undone = e.Obj.Object()
		}
		restored = e.Old.Object()
		if e.GroupResource() == crdsGR { // what is served follows the CRD stored again (and nothing else reacts)
			if restored == nil {
				c.setCustomKind(e.Key, nil)
			} else {
				c.serveCustomResourceDefinition(restored.(*apiextensionsv1.CustomResourceDefinition))
			}
		}
		c.informLocked(e.GroupResource(), e.Key, undone, restored)
	}
}

// decodeStored is the storage's Decoder: it knows which kind each resource holds. Objects of a
// view written by a version that kept them apart (events.k8s.io Events before they were one
// collection with the core ones) move to the resource the view is stored as.
func decodeStored(gr schema.GroupResource, value []byte) (schema.GroupResource, client.Object, error) {
	b, ok := behaviorForGR(gr)
	if !ok {
		// A custom resource (its CRD is served once every object is loaded); anything else that
		// is not served does not decode as one.
		u := &unstructured.Unstructured{}
		if err := storage.DecodeValue(value, u); err != nil {
			return gr, nil, fmt.Errorf("resource %s is not served: %w", gr, err)
		}
		return gr, u, nil
	}
	obj := b.newObject()
	if err := storage.DecodeValue(value, obj); err != nil {
		return gr, nil, err
	}
	if b.storedAs == nil {
		internObject(obj)
		return gr, obj, nil
	}
	stored, err := b.fromView(obj)
	if err != nil {
		return gr, nil, fmt.Errorf("converting: %w", err)
	}
	return b.storedAs.info.GVR.GroupResource(), stored, nil
}

// loadLocked restores the cluster's objects from disk and reports whether there were any. (The
// simulated components rebuild their own work, such as confirming pods that were terminating or
// collecting dependents whose owners went, from the objects Inform hands them.) Callers hold c.mu.
func (c *Cluster) loadLocked() (bool, error) {
	return c.objs.Load(decodeStored)
}
