// Package v1alpha1 holds the admission webhooks of the infrastructure.cluster.x-k8s.io/v1alpha1
// kinds (kubebuilder's internal/webhook/<version> layout). They check what CEL in the CRD cannot
// see: the manager's flags and the state of its workload cluster listeners.
package v1alpha1

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	infrav1 "github.com/goofy-capi/cluster-api-provider-goofy/api/v1alpha1"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/mux"
)

// +kubebuilder:webhook:verbs=create;update,path=/validate-infrastructure-cluster-x-k8s-io-v1alpha1-goofycluster,mutating=false,failurePolicy=fail,matchPolicy=Equivalent,groups=infrastructure.cluster.x-k8s.io,resources=goofyclusters,versions=v1alpha1,name=validation.goofycluster.infrastructure.cluster.x-k8s.io,sideEffects=None,admissionReviewVersions=v1

// Ports is what the webhook asks of the manager's listeners (a *mux.WorkloadClustersMux).
type Ports interface {
	// PortRange is the manager's --listener-port-range.
	PortRange() (min, max int)
	// EndpointHolder says which workload cluster holds host:port (listener, reservation or
	// record); the host matters with --listener-addresses only.
	EndpointHolder(host string, port int) (wclName string, owner types.UID, held bool)
	// HeldPort is the port a workload cluster holds.
	HeldPort(wclName string) (int, bool)
	// OtherClustersOnEndpoint are the GoofyClusters of other workload clusters recording host:port.
	OtherClustersOnEndpoint(gcs []infrav1.GoofyCluster, wclName, host string, port int) []*infrav1.GoofyCluster
}

// GoofyCluster validates GoofyClusters: a non-zero spec.controlPlaneEndpoint.port set on create
// or changed on update must be a port this manager may hand to the workload cluster: within
// --listener-port-range, not a port another workload cluster holds or another workload cluster's
// GoofyCluster records, and, for a workload cluster that holds a port already, that port. An
// update that leaves the port alone is always allowed (the manager itself writes the endpoint,
// and moves its host when the pod's IP changes).
//
// It is the early answer; the guarantee is the mux's (a port goes only to the workload cluster
// that held it, mux.ErrPortNotHeld), which also holds for objects written while the webhook did
// not run. The host is not checked: it is the manager's advertised host when the manager writes
// it, and the manager moves it to its current host itself (after a restart with another pod IP,
// clusterctl move), so a host of another manager is legitimate there.
type GoofyCluster struct {
	// Client reads the other GoofyClusters (the manager's cached client).
	Client client.Reader
	// Ports are the manager's listeners.
	Ports Ports
	// Namespace is the manager's --namespace: GoofyClusters elsewhere are not its to judge.
	Namespace string
	// WatchFilterValue is the manager's --watch-filter: GoofyClusters labelled for another
	// shard (another manager with its own listener host and ports) are not its to judge.
	WatchFilterValue string
}

// SetupWebhookWithManager registers the webhook with the manager's webhook server.
func (w *GoofyCluster) SetupWebhookWithManager(mgr ctrl.Manager) error {
	return ctrl.NewWebhookManagedBy(mgr, &infrav1.GoofyCluster{}).WithValidator(w).Complete()
}

var _ admission.Validator[*infrav1.GoofyCluster] = &GoofyCluster{}

// ValidateCreate checks a GoofyCluster created with an endpoint port.
func (w *GoofyCluster) ValidateCreate(ctx context.Context, gc *infrav1.GoofyCluster) (admission.Warnings, error) {
	return nil, w.validatePort(ctx, gc)
}

// ValidateUpdate checks a changed endpoint port; anything else passes.
func (w *GoofyCluster) ValidateUpdate(ctx context.Context, oldGC, gc *infrav1.GoofyCluster) (admission.Warnings, error) {
	if gc.Spec.ControlPlaneEndpoint.Port == oldGC.Spec.ControlPlaneEndpoint.Port {
		return nil, nil
	}
	return nil, w.validatePort(ctx, gc)
}

// ValidateDelete allows every deletion.
func (w *GoofyCluster) ValidateDelete(context.Context, *infrav1.GoofyCluster) (admission.Warnings, error) {
	return nil, nil
}

// validatePort checks gc's endpoint port.
func (w *GoofyCluster) validatePort(ctx context.Context, gc *infrav1.GoofyCluster) error {
	port := int(gc.Spec.ControlPlaneEndpoint.Port)
	if port == 0 || !w.judges(gc) {
		return nil
	}
	path := field.NewPath("spec", "controlPlaneEndpoint", "port")
	invalid := func(msg string) error {
		return apierrors.NewInvalid(infrav1.GroupVersion.WithKind("GoofyCluster").GroupKind(), gc.Name,
			field.ErrorList{field.Invalid(path, port, msg)})
	}
	key := mux.ClusterKey(gc.Namespace, mux.ClusterNameOf(gc))
	if held, ok := w.Ports.HeldPort(key); ok && held != port {
		return invalid(fmt.Sprintf("the workload cluster's listener holds port %d: its endpoint cannot move to another port", held))
	}
	host := gc.Spec.ControlPlaneEndpoint.Host
	if holder, owner, ok := w.Ports.EndpointHolder(host, port); ok && holder != key && (owner == "" || owner != gc.UID) {
		return invalid(fmt.Sprintf("port %d is held by another workload cluster", port))
	}
	if lo, hi := w.Ports.PortRange(); port < lo || port > hi {
		return invalid(fmt.Sprintf("must be within the manager's listener port range %d-%d (--listener-port-range); leave it 0 to have a free one allocated", lo, hi))
	}
	list := &infrav1.GoofyClusterList{}
	opts := []client.ListOption{client.UnsafeDisableDeepCopy}
	if w.Namespace != "" {
		opts = append(opts, client.InNamespace(w.Namespace))
	}
	if w.WatchFilterValue != "" {
		opts = append(opts, client.MatchingLabels{clusterv1.WatchLabel: w.WatchFilterValue})
	}
	if err := w.Client.List(ctx, list, opts...); err != nil {
		return apierrors.NewInternalError(fmt.Errorf("listing GoofyClusters: %w", err))
	}
	if len(w.Ports.OtherClustersOnEndpoint(list.Items, key, host, port)) > 0 {
		return invalid(fmt.Sprintf("port %d is recorded by the GoofyCluster of another workload cluster", port))
	}
	return nil
}

// judges says whether gc is this manager's: in its namespace, labelled for its shard.
func (w *GoofyCluster) judges(gc *infrav1.GoofyCluster) bool {
	if w.Namespace != "" && gc.Namespace != w.Namespace {
		return false
	}
	return w.WatchFilterValue == "" || gc.Labels[clusterv1.WatchLabel] == w.WatchFilterValue
}
