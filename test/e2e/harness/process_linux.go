package harness

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// killWithParent makes the kernel send SIGKILL to the child when the harness process dies.
// Pdeathsig fires when the thread that forked the child exits; Go only ends threads of
// goroutines that exit while locked to them, which the harness never does.
func killWithParent(attr *syscall.SysProcAttr) { attr.Pdeathsig = syscall.SIGKILL }

// envtest starts etcd and kube-apiserver itself, in their own process groups and without a
// parent-death signal, so a harness killed with SIGKILL (or by `make run | tee` losing its pipe
// before cleanup) would leave them running. withParentDeath gives envtest a wrapper in their
// place: a shell script that re-executes this very binary with the real path in the
// environment; this binary arms the parent-death signal and then becomes the real binary
// (execve keeps it), so the plane process still is envtest's direct child, with its PID.
const (
	parentDeathExecEnv   = "GOOFY_HARNESS_PARENT_DEATH_EXEC"
	parentDeathParentEnv = "GOOFY_HARNESS_PARENT_DEATH_PID"
)

func init() {
	if target := os.Getenv(parentDeathExecEnv); target != "" {
		execWithParentDeath(target)
	}
}

// execWithParentDeath never returns: it becomes target, or exits.
func execWithParentDeath(target string) {
	parent, _ := strconv.Atoi(os.Getenv(parentDeathParentEnv))
	_ = os.Unsetenv(parentDeathExecEnv)
	_ = os.Unsetenv(parentDeathParentEnv)
	// The signal is a property of the calling thread, and execve keeps only that thread.
	runtime.LockOSThread()
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(syscall.SIGKILL), 0, 0, 0); err != nil {
		fmt.Fprintf(os.Stderr, "harness: arming the parent-death signal for %s: %v\n", target, err)
		os.Exit(126)
	}
	if os.Getppid() != parent {
		// The harness died before the signal was armed: nobody would ever stop this process.
		fmt.Fprintf(os.Stderr, "harness: parent %d is gone, not starting %s\n", parent, target)
		os.Exit(1)
	}
	err := syscall.Exec(target, append([]string{target}, os.Args[1:]...), os.Environ())
	fmt.Fprintf(os.Stderr, "harness: executing %s: %v\n", target, err)
	os.Exit(127)
}

// withParentDeath writes a wrapper for binary into dir and returns its path. env ("NAME=value")
// is added to the binary's environment.
func withParentDeath(dir, binary string, env ...string) (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	target, err := filepath.Abs(binary)
	if err != nil {
		return "", err
	}
	var assignments strings.Builder
	for _, e := range env {
		name, value, _ := strings.Cut(e, "=")
		fmt.Fprintf(&assignments, "%s=%s ", name, shellQuote(value))
	}
	script := fmt.Sprintf("#!/bin/sh\n%s%s=%s %s=%d exec %s \"$@\"\n", assignments.String(),
		parentDeathExecEnv, shellQuote(target), parentDeathParentEnv, os.Getpid(), shellQuote(self))
	wrapper := filepath.Join(dir, filepath.Base(binary))
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		return "", err
	}
	return wrapper, nil
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
