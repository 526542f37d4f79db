package harness

import "syscall"

// killWithParent makes the kernel send SIGKILL to the child when the harness process dies.
// Pdeathsig fires when the thread that forked the child exits; Go only ends threads of
// goroutines that exit while locked to them, which the harness never does.
func killWithParent(attr *syscall.SysProcAttr) { attr.Pdeathsig = syscall.SIGKILL }
