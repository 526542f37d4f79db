package store

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a watcher goroutine behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
