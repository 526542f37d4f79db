package benchapi

import (
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Op is one request the benchmark repeats.
type Op struct {
	Name string
	// Path is the request's URL path: the driver fetches it once raw to report the response size.
	Path string
	// Do sends one request; nil means it got the expected answer.
	Do func(ctx context.Context, cs kubernetes.Interface) error
}

// WatchOp names the watch fan-out (watchLoad), measured in events delivered, not requests.
const WatchOp = "watch"

// seededPods is how many pods Seed puts into PodNamespace.
const seededPods = 4*ControlPlanes + ControlPlanes + Workers + 2

// RequestOps are the request-response operations, in the order they run.
var RequestOps = []Op{
	{Name: "get-node", Path: "/api/v1/nodes/" + NodeName(0), Do: func(ctx context.Context, cs kubernetes.Interface) error {
		_, err := cs.CoreV1().Nodes().Get(ctx, NodeName(0), metav1.GetOptions{})
		return err
	}},
	{Name: "list-pods", Path: "/api/v1/namespaces/" + PodNamespace + "/pods", Do: func(ctx context.Context, cs kubernetes.Interface) error {
		l, err := cs.CoreV1().Pods(PodNamespace).List(ctx, metav1.ListOptions{})
		if err == nil && len(l.Items) != seededPods {
			err = fmt.Errorf("listed %d pods, want %d", len(l.Items), seededPods)
		}
		return err
	}},
	{Name: "get-missing", Path: "/api/v1/namespaces/" + PodNamespace + "/pods/" + MissingPod, Do: func(ctx context.Context, cs kubernetes.Interface) error {
		_, err := cs.CoreV1().Pods(PodNamespace).Get(ctx, MissingPod, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err == nil {
			return fmt.Errorf("pod %s exists", MissingPod)
		}
		return err
	}},
}

// requestLoad sends one operation from every client in a loop, each on its own connection.
type requestLoad struct {
	op      Op
	clients []kubernetes.Interface
	close   func()
}

func (l *requestLoad) Close() { l.close() }

// Run sends requests for d and counts the ones answered within it.
func (l *requestLoad) Run(ctx context.Context, d time.Duration) (Window, error) {
	var (
		w  Window
		mu sync.Mutex
		wg sync.WaitGroup
	)
	start := time.Now()
	until := start.Add(d)
	for _, cs := range l.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var lat []time.Duration
			var errs int64
			var first error
			for {
				t := time.Now()
				err := l.op.Do(ctx, cs)
				done := time.Now()
				if done.After(until) {
					break
				}
				if err != nil {
					if errs++; first == nil {
						first = err
					}
					continue
				}
				lat = append(lat, done.Sub(t))
			}
			mu.Lock()
			defer mu.Unlock()
			w.Lat = append(w.Lat, lat...)
			w.Errors += errs
			if first != nil && w.FirstError == "" {
				w.FirstError = first.Error()
			}
		}()
	}
	wg.Wait()
	w.Count, w.Seconds = int64(len(w.Lat)), d.Seconds()
	return w, ctx.Err()
}
