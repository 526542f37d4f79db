package store

import (
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/storage"
)

// Identity: whose state a cluster's bucket holds. State on disk is kept under the workload
// cluster's name, which a later workload cluster can carry too: its GoofyCluster deleted while the
// manager was down and created again under the same name, or deleted and recreated before the
// old one's state was gone. The state belongs to the object it was created for, not to the name:
// the UID of that object (ClusterOptions.Owner) is recorded beside the objects (ownerRecordName)
// when the state is created, and a cluster added for another UID does not get that state: it is
// deleted, and the new cluster starts with the default namespaces. State without the record
// (written by a version that did not record owners, or added without an owner) is adopted by the
// cluster of that name, which records its own UID on it.

// ownerRecordName names the record, in a cluster's bucket, of the UID its state belongs to.
const ownerRecordName = "owner"

// ownersLocked returns the recorded owner of every cluster's state, read from disk on first use
// and kept current by AddCluster, SetClusterOwner and the deletions. Callers hold m.mu.
func (m *Manager) ownersLocked() (map[string]types.UID, error) {
	if m.owners != nil {
		return m.owners, nil
	}
	owners := map[string]types.UID{}
	if m.db != nil {
		raw, err := m.db.Records(ownerRecordName)
		if err != nil {
			return nil, fmt.Errorf("reading the owners of the workload clusters' state: %w", err)
		}
		for name, uid := range raw {
			owners[name] = types.UID(uid)
		}
	}
	m.owners = owners
	return owners, nil
}

// claimStateLocked makes the named cluster's state owner's before it is loaded: state recorded
// for another UID is deleted. Nothing is done for an empty owner. Callers hold m.mu.
func (m *Manager) claimStateLocked(name string, owner types.UID) error {
	if owner == "" {
		return nil
	}
	owners, err := m.ownersLocked()
	if err != nil {
		return err
	}
	prev, ok := owners[name]
	if !ok || prev == owner {
		return nil
	}
	klog.InfoS("Deleting the state of an earlier workload cluster of the same name: the new one starts empty",
		"cluster", name, "previousOwner", prev, "owner", owner)
	return m.queueDropLocked(name)()
}

// needsOwnerRecordLocked reports whether AddCluster records owner as the owner of the named
// cluster's state (recordOwner) once the state exists (created, or adopted without a record):
// when there is an owner and the state is not recorded as its already. Callers hold m.mu.
func (m *Manager) needsOwnerRecordLocked(name string, owner types.UID) (bool, error) {
	if owner == "" {
		return false, nil
	}
	owners, err := m.ownersLocked()
	if err != nil {
		return false, err
	}
	prev, ok := owners[name]
	return !ok || prev != owner, nil
}

// recordOwner writes owner as the owner of the named cluster's state and waits for it to be on
// disk; the caller then notes it in m.owners.
func (m *Manager) recordOwner(name string, owner types.UID) error {
	if m.db == nil {
		return nil
	}
	if err := m.db.PutRecord(name, ownerRecordName, []byte(owner)).Wait(); err != nil {
		return fmt.Errorf("recording the owner of workload cluster %s: %w", name, err)
	}
	return nil
}

// ClusterOwner returns the UID the named cluster's state is recorded for; false when none is
// (no state, state without the record, an owner never given).
func (m *Manager) ClusterOwner(name string) (types.UID, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.awaitAddLocked(name)
	owners, err := m.ownersLocked()
	if err != nil {
		klog.ErrorS(err, "Cannot tell whose state a workload cluster has", "cluster", name)
		return "", false
	}
	uid, ok := owners[name]
	return uid, ok
}

// SetClusterOwner hands the named cluster's state, kept as it is, to owner (a workload cluster
// another object takes over). It queues the record in order with the cluster's writes and returns
// the wait for it to be on disk.
func (m *Manager) SetClusterOwner(name string, owner types.UID) (wait func() error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.awaitAddLocked(name)
	owners, err := m.ownersLocked()
	if err != nil {
		return func() error { return err }
	}
	if owner == "" || owners[name] == owner {
		return func() error { return nil }
	}
	owners[name] = owner
	if m.db == nil {
		return func() error { return nil }
	}
	c := m.db.PutRecord(name, ownerRecordName, []byte(owner))
	return func() error {
		if err := c.Wait(); err != nil {
			return fmt.Errorf("recording the owner of workload cluster %s: %w", name, err)
		}
		return nil
	}
}

// CheckState reports why the named cluster's state on disk could not be loaded for owner
// (ErrStateUnreadable, with the key that failed), without adding the cluster: nil when it can be,
// when there is none, when the cluster is loaded, or when the state is recorded for another owner
// (it would be deleted, not loaded). The state of a cluster that is not loaded does not change
// until it is added or deleted, so the answer is kept until then.
func (m *Manager) CheckState(name string, owner types.UID) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.db == nil {
		return nil
	}
	m.awaitAddLocked(name)
	if _, ok := m.clusters[name]; ok {
		return nil
	}
	if owner != "" {
		owners, err := m.ownersLocked()
		if err != nil {
			return err
		}
		if prev, ok := owners[name]; ok && prev != owner {
			return nil
		}
	}
	if err, ok := m.checked[name]; ok {
		return err
	}
	objs := storage.NewObjects(name, storage.HistoryOptions{}, m.db)
	// Read only: every object is decoded as the load would, none is moved (the load's rewrite of
	// objects stored under an older resource).
	_, err := objs.Load(func(gr schema.GroupResource, value []byte) (schema.GroupResource, client.Object, error) {
		_, obj, err := decodeStored(gr, value)
		return gr, obj, err
	})
	objs.Close()
	m.noteCheckedLocked(name, err)
	return err
}

// noteCheckedLocked keeps CheckState's answer for the named cluster when err says whether its
// state is readable: nil, or ErrStateUnreadable. Callers hold m.mu.
func (m *Manager) noteCheckedLocked(name string, err error) {
	if err != nil && !errors.Is(err, ErrStateUnreadable) {
		return
	}
	if m.checked == nil {
		m.checked = map[string]error{}
	}
	m.checked[name] = err
}
