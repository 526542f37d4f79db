//go:build !linux

package storage

// releasePages does nothing where madvise is not at hand: the mapped pages stay resident.
func releasePages(data, size uintptr) error { return nil }
