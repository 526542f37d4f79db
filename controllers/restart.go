package controllers

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"sync"

	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"

	infrav1 "github.com/goofy-capi/cluster-api-provider-goofy/api/v1alpha1"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/mux"
)

// HotRestarter re-opens every workload cluster listener on its recorded port once this process
// leads, before any reconcile: the reconcilers wait on it, so endpoints never move across
// restarts and leader changes.
type HotRestarter struct {
	Reader client.Reader // an uncached reader: it runs before the caches are used
	Mux    *mux.WorkloadClustersMux
	// Namespace limits the GoofyClusters restored (the manager's --namespace).
	Namespace string
	// WatchFilterValue, when set, limits them to those labelled for this manager (its
	// --watch-filter): another shard's clusters are that shard's to serve.
	WatchFilterValue string

	once sync.Once
	done chan struct{}
}

func (h *HotRestarter) init() { h.once.Do(func() { h.done = make(chan struct{}) }) }

// NeedLeaderElection: only the leader serves workload clusters.
func (h *HotRestarter) NeedLeaderElection() bool { return true }

// Start restores the listeners, then releases the reconcilers. Per-cluster failures are logged;
// the reconcilers meet them again and report them in the GoofyClusters' conditions: a port held
// by another workload cluster (PortNotHeld), a port another process listens on
// (PortUnavailable: retried until it is free, as the endpoint cannot move), state that cannot be
// read (StateUnreadable).
func (h *HotRestarter) Start(ctx context.Context) error {
	h.init()
	defer close(h.done)
	log := ctrl.LoggerFrom(ctx).WithName("hot-restart")
	list := &infrav1.GoofyClusterList{}
	opts := []client.ListOption{client.InNamespace(h.Namespace)}
	if h.WatchFilterValue != "" {
		opts = append(opts, client.MatchingLabels{clusterv1.WatchLabel: h.WatchFilterValue})
	}
	if err := h.Reader.List(ctx, list, opts...); err != nil {
		return err
	}
	clusters := &clusterv1.ClusterList{}
	if err := h.Reader.List(ctx, clusters, client.InNamespace(h.Namespace)); err != nil {
		return err
	}
	list.Items = holders(list.Items, clusters.Items)
	// HotRestart restores a port only for the workload cluster that held it (mux.ErrPortNotHeld
	// for the others); their reconciles meet the same refusal and say so in their conditions
	// (reason PortNotHeld).
	if err := h.Mux.HotRestart(list); err != nil {
		log.Error(err, "Some workload cluster listeners could not be restored on their ports")
	}
	log.Info("Restored workload cluster listeners", "clusters", len(list.Items))
	return nil
}

// holders picks, per workload cluster, the GoofyCluster that holds it, for HotRestart to claim
// the listener for its UID; copies of a GoofyCluster share the workload cluster's key. In order
// of preference: the GoofyCluster its Cluster names (spec.infrastructureRef) once it has
// provisioned; else the only provisioned one (one the Cluster named before, or the GoofyCluster
// of a Cluster already gone: status.initialization.provisioned is written for the holder alone,
// and a copy's create cannot carry status); else the one its Cluster names. A workload cluster
// without a holder is not restored, and its state is deleted as that of a deleted cluster.
func holders(gcs []infrav1.GoofyCluster, clusters []clusterv1.Cluster) []infrav1.GoofyCluster {
	byKey := map[string]*clusterv1.Cluster{}
	for i := range clusters {
		byKey[mux.ClusterKey(clusters[i].Namespace, clusters[i].Name)] = &clusters[i]
	}
	type candidates struct{ named, provisioned []int }
	cands := map[string]*candidates{}
	var keys []string
	for i := range gcs {
		gc := &gcs[i]
		key := mux.ClusterKey(gc.Namespace, mux.ClusterNameOf(gc))
		c := cands[key]
		if c == nil {
			c = &candidates{}
			cands[key] = c
			keys = append(keys, key)
		}
		if cl := byKey[key]; cl != nil && isClusterInfrastructure(cl, gc) {
			c.named = append(c.named, i)
		}
		if ptr.Deref(gc.Status.Initialization.Provisioned, false) {
			c.provisioned = append(c.provisioned, i)
		}
	}
	out := make([]infrav1.GoofyCluster, 0, len(keys))
	for _, key := range keys {
		c := cands[key]
		pick := -1
		for _, n := range c.named {
			if slices.Contains(c.provisioned, n) {
				pick = n
			}
		}
		if pick < 0 && len(c.provisioned) == 1 {
			pick = c.provisioned[0]
		}
		if pick < 0 && len(c.named) > 0 {
			pick = c.named[0]
		}
		if pick >= 0 {
			out = append(out, gcs[pick])
		}
	}
	return out
}

// Wait blocks until Start has run or ctx ends. A nil HotRestarter does not wait.
func (h *HotRestarter) Wait(ctx context.Context) error {
	if h == nil {
		return nil
	}
	h.init()
	select {
	case <-h.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// errRestoring is the readiness failure while the leader re-opens the listeners.
var errRestoring = errors.New("restoring workload cluster listeners")

// ReadyzCheck reports the leader not ready until Start has re-reserved the recorded ports (the
// listeners serve once their machines re-add API servers, which the reconcilers do next).
// elected is the manager's Elected() channel: a standby replica, which never runs Start, stays
// ready.
func (h *HotRestarter) ReadyzCheck(elected <-chan struct{}) healthz.Checker {
	h.init()
	return func(*http.Request) error {
		select {
		case <-elected:
		default:
			return nil
		}
		select {
		case <-h.done:
			return nil
		default:
			return errRestoring
		}
	}
}
