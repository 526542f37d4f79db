package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kjson "sigs.k8s.io/json"
)

// Values on disk start with their encoding: every built-in kind is protobuf (as kube-apiserver
// stores them in etcd: smaller and several times faster to encode than JSON), anything else JSON.
const (
	encodingProtobuf byte = 'p'
	encodingJSON     byte = 'j'
)

type protoMessage interface {
	Marshal() ([]byte, error)
	Unmarshal([]byte) error
}

// storageKey is an object's key on disk: "<group>/<resource>/<namespace>/<name>" (no namespace
// for cluster-scoped objects). Neither a group nor a resource contains a slash.
func storageKey(gr schema.GroupResource, key string) string {
	return gr.Group + "/" + gr.Resource + "/" + key
}

func parseStorageKey(k string) (schema.GroupResource, string, bool) {
	group, rest, ok := strings.Cut(k, "/")
	if !ok {
		return schema.GroupResource{}, "", false
	}
	resource, key, ok := strings.Cut(rest, "/")
	return schema.GroupResource{Group: group, Resource: resource}, key, ok && resource != "" && key != ""
}

// encodeStored encodes a stored object for the disk. Stored objects are never mutated, so the
// committer may call it after the cluster lock is gone.
func encodeStored(obj client.Object) func() ([]byte, error) {
	return func() ([]byte, error) {
		if m, ok := obj.(protoMessage); ok {
			data, err := m.Marshal()
			if err != nil {
				return nil, err
			}
			return append([]byte{encodingProtobuf}, data...), nil
		}
		data, err := json.Marshal(obj)
		if err != nil {
			return nil, err
		}
		return append([]byte{encodingJSON}, data...), nil
	}
}

func decodeStored(b *servedResource, value []byte) (client.Object, error) {
	if len(value) == 0 {
		return nil, fmt.Errorf("empty value")
	}
	obj := b.newObject()
	gvk := obj.GetObjectKind().GroupVersionKind()
	switch value[0] {
	case encodingProtobuf:
		m, ok := obj.(protoMessage)
		if !ok {
			return nil, fmt.Errorf("%s is not a protobuf message", b.info.Kind)
		}
		if err := m.Unmarshal(value[1:]); err != nil {
			return nil, err
		}
	case encodingJSON:
		if err := kjson.UnmarshalCaseSensitivePreserveInts(value[1:], obj); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("unknown encoding %q", value[0])
	}
	obj.GetObjectKind().SetGroupVersionKind(gvk) // protobuf carries no TypeMeta
	return obj, nil
}

// persistPutLocked queues the new version of a stored object. Callers hold c.mu.
func (c *Cluster) persistPutLocked(gr schema.GroupResource, key string, obj client.Object) {
	if c.db != nil {
		c.commit = c.db.Put(c.name, storageKey(gr, key), c.rv, encodeStored(obj))
	}
}

// persistDeleteLocked queues the removal of a stored object. Callers hold c.mu.
func (c *Cluster) persistDeleteLocked(gr schema.GroupResource, key string) {
	if c.db != nil {
		c.commit = c.db.Delete(c.name, storageKey(gr, key), c.rv)
	}
}

// unlockDurable releases c.mu after a write and (unless skipWait, see UpdateOptions.SkipSyncWait)
// waits until everything queued so far is on disk, so that no client is told of a write a crash
// could lose. Batches commit in queue order, so the
// last queued write being on disk means all earlier ones are. The wait happens outside the lock:
// readers and other writers go on while the disk syncs, and their writes join the next batch.
func (c *Cluster) unlockDurable(errp *error, skipWait bool) {
	commit := c.commit
	c.mu.Unlock()
	if skipWait {
		return
	}
	if err := commit.Wait(); err != nil && *errp == nil {
		*errp = apierrors.NewInternalError(fmt.Errorf("storage of workload cluster %s: %w", c.name, err))
	}
}

// initialResourceVersion is where a cluster's resourceVersions continue after a (re)start: above
// the last one on disk, and above any a client may hold from an earlier life of the store (also
// when nothing was on disk): resourceVersions count microseconds of wall time at start and then
// one per write, and no cluster writes a million times a second for long.
func initialResourceVersion(onDisk uint64) uint64 {
	return max(onDisk, uint64(time.Now().UnixMicro()))
}

// ErrStateUnreadable wraps why a cluster's state on disk cannot be loaded.
var ErrStateUnreadable = errors.New("workload cluster state on disk is unreadable")

// loadLocked restores the cluster's objects from disk and reports whether there were any. An
// object that cannot be read fails the whole cluster: serving it without would be silent data
// loss. Callers hold c.mu.
// movedObject is a loaded object that belongs under another resource now.
type movedObject struct {
	from, to schema.GroupResource
	key      string
	obj      client.Object
}

func (c *Cluster) loadLocked() (bool, error) {
	var pods []*corev1.Pod
	var moved []movedObject
	rv, found, err := c.db.Load(c.name, func(k string, v []byte) error {
		gr, key, ok := parseStorageKey(k)
		if !ok {
			return fmt.Errorf("malformed key %q", k)
		}
		b, ok := behaviorForGR(gr)
		if !ok {
			return fmt.Errorf("%s: resource %s is not served", k, gr)
		}
		obj, err := decodeStored(b, v)
		if err != nil {
			return fmt.Errorf("decoding %s: %w", k, err)
		}
		if objectKey(obj.GetNamespace(), obj.GetName()) != key {
			return fmt.Errorf("%s holds %s", k, objectKey(obj.GetNamespace(), obj.GetName()))
		}
		if b.storedAs != nil {
			// Written by a version that kept a view's objects apart (events.k8s.io Events before
			// they were one collection with the core ones): moved to the stored resource.
			stored, err := b.fromView(obj)
			if err != nil {
				return fmt.Errorf("converting %s: %w", k, err)
			}
			moved = append(moved, movedObject{from: gr, key: key, to: b.storedAs.info.GVR.GroupResource(), obj: stored})
			gr, obj = b.storedAs.info.GVR.GroupResource(), stored
		}
		c.kindMap(gr)[key] = obj
		c.indexOwners(gr, key, obj)
		c.bytes += int64(sizeOf(obj))
		if pod, ok := obj.(*corev1.Pod); ok && pod.DeletionTimestamp != nil {
			pods = append(pods, pod)
		}
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("%w: loading %s from %s: %w", ErrStateUnreadable, c.name, c.db.Path(), err)
	}
	c.rv = initialResourceVersion(rv)
	for _, m := range moved {
		c.persistDeleteLocked(m.from, m.key)
		c.persistPutLocked(m.to, m.key, m.obj)
	}
	// Pods that were terminating when the process stopped: the simulated kubelet confirms them again.
	for _, pod := range pods {
		if p := pod.DeletionGracePeriodSeconds; p != nil && *p > 0 {
			c.scheduleKubeletStop(pod, *p)
		}
	}
	return found, nil
}
