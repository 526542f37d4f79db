//go:build !linux

package harness

import "syscall"

// killWithParent has no portable equivalent outside Linux: there, a harness killed without
// teardown leaves its children running, and their process groups must be stopped by hand.
func killWithParent(*syscall.SysProcAttr) {}

// withParentDeath is the identity outside Linux (see killWithParent); env is not added there.
func withParentDeath(_, binary string, _ ...string) (string, error) { return binary, nil }
