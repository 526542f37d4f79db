package storage

import "sync"

// HoldCommits holds every commit that writes to bucket, and every commit after it, until release
// is called (for tests: a disk that is slow to sync); held is closed once a commit is held. It
// takes InjectFault's place, and release ends it.
func (db *DB) HoldCommits(bucket string) (held <-chan struct{}, release func()) {
	holding, released := make(chan struct{}), make(chan struct{})
	var once, stop sync.Once
	db.InjectFault(func(b, _ string) error {
		if b == bucket {
			once.Do(func() { close(holding) })
			<-released
		}
		return nil
	})
	return holding, func() {
		stop.Do(func() {
			close(released)
			db.InjectFault(nil)
		})
	}
}
