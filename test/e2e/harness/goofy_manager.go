package harness

import (
	"context"
	"fmt"
	"path/filepath"
	"time"
)

// GoofyManagerSpec describes a further Goofy manager next to the plane's own (Plane.Goofy), e.g.
// for a stress test that needs more listener ports than the suite's manager has. The caller
// scopes the two (--namespace in Args and in Options.GoofyArgs) so that no object is
// reconciled by both.
type GoofyManagerSpec struct {
	Name              string // process name, log file and state directory
	ListenerPortRange string // e.g. "30000-30039"
	Args              []string
}

// StartGoofyManager starts another process of the plane's Goofy binary with the plane's manager's
// flags, its own diagnostics and health ports, listener port range and state directory, and then
// spec.Args (a later flag wins); it waits until the manager is ready and returns it. Plane.Stop
// stops it with the others.
func (p *Plane) StartGoofyManager(ctx context.Context, spec GoofyManagerSpec) (*Process, error) {
	if p.Goofy == nil {
		return nil, fmt.Errorf("the plane runs no Goofy manager whose flags %s could share", spec.Name)
	}
	ports, err := processPorts(2)
	if err != nil {
		return nil, err
	}
	args := append(append([]string(nil), p.Goofy.Args...),
		"--diagnostics-address="+hostPort(ports[0]),
		"--health-addr="+hostPort(ports[1]),
		"--listener-port-range="+spec.ListenerPortRange,
		"--state-dir="+filepath.Join(p.opts.OutputDir, spec.Name+"-state"),
	)
	proc := &Process{
		Name:    spec.Name,
		Path:    p.Goofy.Path,
		LogFile: p.logFile(spec.Name),
		Env:     p.Goofy.Env,
		Args:    append(args, spec.Args...),
	}
	p.progress("starting the Goofy manager %s (listener ports %s)", spec.Name, spec.ListenerPortRange)
	if err := p.track(proc); err != nil {
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := waitHTTPOK(wctx, proc, fmt.Sprintf("http://%s/readyz", hostPort(ports[1]))); err != nil {
		return nil, err
	}
	return proc, nil
}
