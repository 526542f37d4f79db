package harness

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// ManagerSpec describes a further CAPI-style provider manager built from a Go module whose
// component directory holds config/crd/bases and config/webhook/manifests.yaml (e.g. CAPD from
// sigs.k8s.io/cluster-api/test, component infrastructure/docker). The scale benchmark runs it as
// the reference provider.
type ManagerSpec struct {
	Name      string // process name, log file and webhook configuration prefix
	Binary    string // path of the manager binary
	ModuleDir string // module source holding Component
	Component string // path inside ModuleDir holding config/
	Args      []string
	Env       []string // extra environment (KUBECONFIG is set)
}

// StartManager installs the manager's CRDs (with contract labels and conversion pointed at its
// webhook server, as for the CAPI managers), starts it with its own webhook certificate, health
// and diagnostics ports, waits until it is ready, registers its webhook configurations and returns
// the process. Plane.Stop stops it with the others.
func (p *Plane) StartManager(ctx context.Context, spec ManagerSpec) (*Process, error) {
	ports, err := processPorts(3)
	if err != nil {
		return nil, err
	}
	webhookPort, healthPort, diagPort := ports[0], ports[1], ports[2]
	certDir := filepath.Join(p.opts.OutputDir, "certs", spec.Name)
	ca, err := writeServingCert(certDir, spec.Name+"-webhook")
	if err != nil {
		return nil, err
	}
	crds, err := capiCRDs(spec.ModuleDir, spec.Component, webhookPort, ca)
	if err != nil {
		return nil, err
	}
	p.progress("installing %d CRDs of %s", len(crds), spec.Name)
	if _, err := envtest.InstallCRDs(p.Config, envtest.CRDInstallOptions{CRDs: crds, MaxTime: 2 * time.Minute}); err != nil {
		return nil, fmt.Errorf("installing CRDs of %s: %w", spec.Name, err)
	}
	p.progress("starting %s (webhooks on %d)", spec.Name, webhookPort)
	proc := &Process{
		Name:    spec.Name,
		Path:    spec.Binary,
		LogFile: p.logFile(spec.Name),
		Env:     append([]string{"KUBECONFIG=" + p.Kubeconfig}, spec.Env...),
		Args: append([]string{
			"--leader-elect=false",
			fmt.Sprintf("--webhook-port=%d", webhookPort),
			"--webhook-cert-dir=" + certDir,
			"--health-addr=" + hostPort(healthPort),
			"--diagnostics-address=" + hostPort(diagPort),
			"--insecure-diagnostics",
		}, spec.Args...),
	}
	if err := p.track(proc); err != nil {
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	err = waitHTTPOK(wctx, proc, fmt.Sprintf("http://%s/readyz", hostPort(healthPort)))
	cancel()
	if err != nil {
		return nil, err
	}
	hooks, err := webhookConfigurations(spec.ModuleDir, spec.Component, spec.Name, webhookPort, ca)
	if err != nil {
		return nil, err
	}
	for _, h := range hooks {
		if err := p.Client.Create(ctx, h.(client.Object)); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("registering webhooks of %s: %w", spec.Name, err)
		}
	}
	return proc, nil
}

// Processes returns the processes the plane started after the API server, in start order.
func (p *Plane) Processes() []*Process { return append([]*Process(nil), p.processes...) }
