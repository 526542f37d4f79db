package harness

import (
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/cmd/clusterctl/client/yamlprocessor"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// RenderTemplate substitutes a clusterctl template's variables the way `clusterctl generate cluster`
// does (clusterctl's own processor: ${VAR}, ${VAR:=default}); values come from vars, then from the
// environment. A variable without value or default is an error naming it.
func RenderTemplate(template []byte, vars map[string]string) ([]byte, error) {
	return yamlprocessor.NewSimpleProcessor().Process(template, func(name string) (string, error) {
		if v, ok := vars[name]; ok {
			return v, nil
		}
		if v, ok := os.LookupEnv(name); ok {
			return v, nil
		}
		return "", fmt.Errorf("variable %s is not set", name)
	})
}

// Apply server-side-applies every object of a YAML stream (creating its namespace when missing) and
// returns the objects.
func (p *Plane) Apply(ctx context.Context, manifests []byte) ([]*unstructured.Unstructured, error) {
	docs, err := splitYAML(manifests)
	if err != nil {
		return nil, err
	}
	var objs []*unstructured.Unstructured
	for _, doc := range docs {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &u.Object); err != nil {
			return nil, err
		}
		if len(u.Object) == 0 {
			continue
		}
		if ns := u.GetNamespace(); ns != "" {
			if err := p.EnsureNamespace(ctx, ns); err != nil {
				return nil, err
			}
		}
		// Webhooks and freshly installed CRDs can refuse briefly while they settle; retry for a while.
		err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
			err := p.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner("goofy-e2e"), client.ForceOwnership)
			if err == nil {
				return true, nil
			}
			if apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) || apierrors.IsForbidden(err) {
				return false, err
			}
			p.progress("applying %s %s: %v (retrying)", u.GetKind(), u.GetName(), err)
			return false, nil
		})
		if err != nil {
			return nil, fmt.Errorf("applying %s %s/%s: %w", u.GetKind(), u.GetNamespace(), u.GetName(), err)
		}
		objs = append(objs, u)
	}
	return objs, nil
}

// EnsureNamespace creates a namespace unless it exists.
func (p *Plane) EnsureNamespace(ctx context.Context, name string) error {
	err := p.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// ClusterStatus is a compact view of a Cluster and what it owns, for progress lines and assertions.
type ClusterStatus struct {
	Available          metav1.ConditionStatus
	AvailableMessage   string
	ControlPlane       string // "ready/desired"
	ControlPlaneReady  int32
	Workers            string // "ready/desired" over MachineDeployments
	Machines           []clusterv1.Machine
	KCP                *controlplanev1.KubeadmControlPlane
	Cluster            *clusterv1.Cluster
	MachineDeployments []clusterv1.MachineDeployment
}

// String renders one progress line.
func (s ClusterStatus) String() string {
	phases := map[string]int{}
	for _, m := range s.Machines {
		phase := m.Status.Phase
		if phase == "" {
			phase = string(clusterv1.MachinePhasePending) // not reconciled yet: the phase CAPI gives it first
		}
		phases[phase]++
	}
	var ph []string
	for k, v := range phases {
		ph = append(ph, fmt.Sprintf("%s=%d", k, v))
	}
	sort.Strings(ph)
	msg := strings.ReplaceAll(s.AvailableMessage, "\n", "; ")
	if len(msg) > 160 {
		msg = msg[:160] + "..."
	}
	line := fmt.Sprintf("Available=%s cp=%s workers=%s machines[%s]", s.Available, s.ControlPlane, s.Workers, strings.Join(ph, " "))
	if s.Available != metav1.ConditionTrue && msg != "" {
		line += " (" + msg + ")"
	}
	return line
}

// GetClusterStatus reads a Cluster, its KubeadmControlPlane, MachineDeployments and Machines.
func (p *Plane) GetClusterStatus(ctx context.Context, namespace, name string) (ClusterStatus, error) {
	var s ClusterStatus
	c := &clusterv1.Cluster{}
	if err := p.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, c); err != nil {
		return s, err
	}
	s.Cluster = c
	s.Available = metav1.ConditionUnknown
	for _, cond := range c.Status.Conditions {
		if cond.Type == clusterv1.AvailableCondition {
			s.Available, s.AvailableMessage = cond.Status, cond.Message
		}
	}
	sel := client.MatchingLabels{clusterv1.ClusterNameLabel: name}
	var kcps controlplanev1.KubeadmControlPlaneList
	if err := p.Client.List(ctx, &kcps, client.InNamespace(namespace), sel); err != nil {
		return s, err
	}
	s.ControlPlane = "-"
	if c.Spec.ControlPlaneRef.Name != "" {
		kcp := &controlplanev1.KubeadmControlPlane{}
		if err := p.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: c.Spec.ControlPlaneRef.Name}, kcp); err == nil {
			s.KCP = kcp
			s.ControlPlaneReady = ptrValue(kcp.Status.ReadyReplicas)
			s.ControlPlane = fmt.Sprintf("%d/%d", s.ControlPlaneReady, ptrValue(kcp.Spec.Replicas))
		}
	}
	var mds clusterv1.MachineDeploymentList
	if err := p.Client.List(ctx, &mds, client.InNamespace(namespace), sel); err != nil {
		return s, err
	}
	s.MachineDeployments = mds.Items
	var ready, desired int32
	for _, md := range mds.Items {
		ready += ptrValue(md.Status.ReadyReplicas)
		desired += ptrValue(md.Spec.Replicas)
	}
	s.Workers = fmt.Sprintf("%d/%d", ready, desired)
	var machines clusterv1.MachineList
	if err := p.Client.List(ctx, &machines, client.InNamespace(namespace), sel); err != nil {
		return s, err
	}
	s.Machines = machines.Items
	return s, nil
}

func ptrValue(p *int32) int32 {
	if p == nil {
		return 0
	}
	return *p
}

// WaitForCluster polls the cluster's status every second until done returns true, printing a progress
// line to w whenever the summary changes (and at least every 15 s), until timeout.
func (p *Plane) WaitForCluster(ctx context.Context, w io.Writer, namespace, name string, timeout time.Duration, what string, done func(ClusterStatus) bool) (ClusterStatus, error) {
	start := time.Now()
	var last ClusterStatus
	var lastLine string
	lastPrint := time.Time{}
	err := wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		s, err := p.GetClusterStatus(ctx, namespace, name)
		if err != nil {
			if apierrors.IsNotFound(err) {
				return false, nil
			}
			return false, err
		}
		last = s
		line := s.String()
		if w != nil && (line != lastLine || time.Since(lastPrint) > 15*time.Second) {
			fmt.Fprintf(w, "[%5.0fs] %s/%s: %s\n", time.Since(start).Seconds(), namespace, name, line)
			lastLine, lastPrint = line, time.Now()
		}
		return done(s), nil
	})
	if err != nil {
		return last, fmt.Errorf("waiting for %s of cluster %s/%s (last: %s): %w", what, namespace, name, last.String(), err)
	}
	return last, nil
}

// Available is a WaitForCluster condition: the Cluster's Available condition is true.
func Available(s ClusterStatus) bool { return s.Available == metav1.ConditionTrue }

// WriteWorkloadKubeconfig writes the workload cluster's kubeconfig (the <cluster>-kubeconfig
// Secret CAPI maintains) to path.
func (p *Plane) WriteWorkloadKubeconfig(ctx context.Context, namespace, name, path string) error {
	sec := &corev1.Secret{}
	if err := p.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name + "-kubeconfig"}, sec); err != nil {
		return err
	}
	data, ok := sec.Data["value"]
	if !ok {
		return fmt.Errorf("secret %s/%s-kubeconfig has no value key", namespace, name)
	}
	return os.WriteFile(path, data, 0o600)
}

// WorkloadClient returns a client for the workload cluster, built from its kubeconfig Secret.
func (p *Plane) WorkloadClient(ctx context.Context, namespace, name string) (client.Client, error) {
	sec := &corev1.Secret{}
	if err := p.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name + "-kubeconfig"}, sec); err != nil {
		return nil, err
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(sec.Data["value"])
	if err != nil {
		return nil, err
	}
	cfg.Timeout = 10 * time.Second
	return client.New(cfg, client.Options{Scheme: Scheme})
}
