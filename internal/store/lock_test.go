package store

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// TestLockHoldsAreTimed: the fuzz targets' lock budget sees an exclusive hold, and only while
// timing is on.
func TestLockHoldsAreTimed(t *testing.T) {
	g := NewWithT(t)
	var l clusterLock
	hold := func() { l.Lock(); time.Sleep(20 * time.Millisecond); l.Unlock() }

	hold()
	g.Expect(LongestLockHold()).To(BeZero(), "not timing")

	TimeLockHolds(true)
	defer TimeLockHolds(false)
	hold()
	g.Expect(LongestLockHold()).To(BeNumerically(">=", 20*time.Millisecond))
	g.Expect(LongestLockHold()).To(BeZero(), "read and reset")
}
