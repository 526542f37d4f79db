//go:build !linux

package harness

import "syscall"

// killWithParent has no portable equivalent outside Linux: there, a harness killed without
// teardown leaves its children running, and their process groups must be stopped by hand.
func killWithParent(*syscall.SysProcAttr) {}

// withParentDeath is the identity outside Linux (see killWithParent).
func withParentDeath(_, binary string) (string, error) { return binary, nil }
