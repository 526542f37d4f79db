package store

import "fmt"

// PutClusterRecord keeps value as the cluster's record name beside its objects on disk, until the
// cluster's state is deleted (DeleteCluster, DeleteStateExcept), which deletes the record with it.
// It queues the write in order with the cluster's other writes and returns the wait for it to be
// on disk. Without storage there is nothing to keep: the wait returns nil at once.
func (m *Manager) PutClusterRecord(cluster, name string, value []byte) (wait func() error) {
	if m.db == nil {
		return func() error { return nil }
	}
	c := m.db.PutRecord(cluster, name, value)
	return func() error {
		if err := c.Wait(); err != nil {
			return fmt.Errorf("recording %s of workload cluster %s: %w", name, cluster, err)
		}
		return nil
	}
}

// ClusterRecords returns the record name of every cluster with state on disk, by cluster; nil
// without storage.
func (m *Manager) ClusterRecords(name string) (map[string][]byte, error) {
	if m.db == nil {
		return nil, nil
	}
	return m.db.Records(name)
}
