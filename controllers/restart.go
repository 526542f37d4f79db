package controllers

import (
	"context"
	"errors"
	"net/http"
	"sync"

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

	once sync.Once
	done chan struct{}
}

func (h *HotRestarter) init() { h.once.Do(func() { h.done = make(chan struct{}) }) }

// NeedLeaderElection: only the leader serves workload clusters.
func (h *HotRestarter) NeedLeaderElection() bool { return true }

// Start restores the listeners, then releases the reconcilers. Per-cluster failures are logged;
// those clusters get a new port from their reconciler's error path.
func (h *HotRestarter) Start(ctx context.Context) error {
	h.init()
	defer close(h.done)
	log := ctrl.LoggerFrom(ctx).WithName("hot-restart")
	list := &infrav1.GoofyClusterList{}
	if err := h.Reader.List(ctx, list, client.InNamespace(h.Namespace)); err != nil {
		return err
	}
	if err := h.Mux.HotRestart(list); err != nil {
		log.Error(err, "Some workload cluster listeners could not be restored on their ports")
	}
	log.Info("Restored workload cluster listeners", "clusters", len(list.Items))
	return nil
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
