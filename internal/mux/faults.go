package mux

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/endpoints/request"

	infrav1 "github.com/goofy-capi/cluster-api-provider-goofy/api/v1alpha1"
	"github.com/goofy-capi/cluster-api-provider-goofy/internal/etcd"
)

// Faults are the faults injected into one workload cluster's endpoint (docs/faults.md). The
// listener holds them behind one atomic pointer: a request to a cluster without faults costs one
// atomic load.
type Faults struct {
	// Unreachable closes the listener: new connections are refused, open ones closed.
	Unreachable bool
	// Latency delays every API request, and every event of a watch.
	Latency etcd.Latency
	// Errors fail a share of the matching API requests; the first rule that draws one answers it.
	Errors []ErrorRule
	// Etcd are the faults of the cluster's etcd members.
	Etcd etcd.Faults
	// Leaderless: the etcd cluster has no leader.
	Leaderless bool
}

// ErrorRule fails a Ratio of the requests whose verb and resource it matches (nil sets: all).
type ErrorRule struct {
	Verbs     []string
	Resources []string
	Code      int
	Ratio     float64
}

func (r *ErrorRule) matches(info *request.RequestInfo) bool {
	if len(r.Verbs) > 0 && !slices.Contains(r.Verbs, info.Verb) {
		return false
	}
	if len(r.Resources) == 0 {
		return true
	}
	if info.Subresource != "" {
		return slices.Contains(r.Resources, info.Resource+"/"+info.Subresource)
	}
	return slices.Contains(r.Resources, info.Resource)
}

// ActiveFaults is what a simulation spec means at one instant.
type ActiveFaults struct {
	// Faults to hand to the listener, nil when none is active.
	Faults *Faults
	// Names describe each active fault for a condition message, in spec order.
	Names []string
	// Kinds are the active fault kinds, the bounded label values of the goofy_faults_active metric.
	Kinds []string
	// Next is the earliest until of an active fault (zero when none ends by itself): the spec
	// means something else from then on.
	Next time.Time
}

// Fault kinds: the values of the goofy_faults_active metric's kind label.
const (
	KindUnreachable         = "unreachable"
	KindAPIServerLatency    = "apiServerLatency"
	KindAPIServerErrors     = "apiServerErrors"
	KindEtcdLatency         = "etcdLatency"
	KindEtcdAlarm           = "etcdAlarm"
	KindEtcdLeaderless      = "etcdLeaderless"
	KindNodeNotReady        = "nodeNotReady"
	KindEtcdMemberUnhealthy = "etcdMemberUnhealthy"
	KindVMFailed            = "vmFailed"
)

// FaultKinds lists every kind, machine faults included.
var FaultKinds = []string{KindUnreachable, KindAPIServerLatency, KindAPIServerErrors, KindEtcdLatency, KindEtcdAlarm,
	KindEtcdLeaderless, KindNodeNotReady, KindEtcdMemberUnhealthy, KindVMFailed}

// active reports whether a fault with this until is in force at now, and records its until.
func (a *ActiveFaults) active(until *metav1.Time, now time.Time) bool {
	if until == nil || until.IsZero() {
		return true
	}
	if !now.Before(until.Time) {
		return false
	}
	if a.Next.IsZero() || until.Time.Before(a.Next) {
		a.Next = until.Time
	}
	return true
}

func (a *ActiveFaults) add(kind, name string) {
	a.Names = append(a.Names, name)
	if !slices.Contains(a.Kinds, kind) {
		a.Kinds = append(a.Kinds, kind)
	}
}

// ClusterFaults says which faults of sim are active at now. Invalid values the CRD's validation
// lets through nowhere (a jitter or ratio that does not parse) count as 0.
func ClusterFaults(sim *infrav1.ClusterSimulation, now time.Time) ActiveFaults {
	var a ActiveFaults
	if sim == nil {
		return a
	}
	f := &Faults{}
	if sim.Unreachable && a.active(sim.UnreachableUntil, now) {
		f.Unreachable = true
		a.add(KindUnreachable, "unreachable")
	}
	if api := sim.APIServer; api != nil {
		if lat := api.Latency; lat != nil && lat.Base.Duration > 0 && a.active(lat.Until, now) {
			f.Latency = latency(lat)
			a.add(KindAPIServerLatency, "apiServer.latency "+describeLatency(lat))
		}
		for i := range api.Errors {
			e := &api.Errors[i]
			ratio := parseShare(e.Ratio)
			if ratio <= 0 || !a.active(e.Until, now) {
				continue
			}
			f.Errors = append(f.Errors, ErrorRule{Verbs: wildcard(e.Verbs), Resources: wildcard(e.Resources), Code: int(e.Code), Ratio: ratio})
			a.add(KindAPIServerErrors, fmt.Sprintf("apiServer.errors %d on %s of %s (ratio %s)", e.Code, orAll(e.Verbs), orAll(e.Resources), e.Ratio))
		}
	}
	if ec := sim.Etcd; ec != nil {
		if lat := ec.Latency; lat != nil && lat.Base.Duration > 0 && a.active(lat.Until, now) {
			f.Etcd.Latency = latency(lat)
			a.add(KindEtcdLatency, "etcd.latency "+describeLatency(lat))
		}
		if ec.Alarm != "" && a.active(ec.AlarmUntil, now) {
			f.Etcd.Alarm = pb.AlarmType(pb.AlarmType_value[string(ec.Alarm)])
			a.add(KindEtcdAlarm, "etcd.alarm "+string(ec.Alarm))
		}
		if ec.Leaderless && a.active(ec.LeaderlessUntil, now) {
			f.Leaderless = true
			a.add(KindEtcdLeaderless, "etcd.leaderless")
		}
	}
	if len(a.Names) > 0 {
		a.Faults = f
	}
	return a
}

// MachineFaults says which faults of a machine's sim are active at now; nodeNotReadyAnnotation is
// the deprecated annotation's presence.
func MachineFaults(sim *infrav1.MachineSimulation, nodeNotReadyAnnotation bool, now time.Time) (a ActiveFaults, nodeNotReady, etcdUnhealthy, vmFailed bool) {
	if nodeNotReadyAnnotation {
		nodeNotReady = true
		a.add(KindNodeNotReady, "nodeNotReady (deprecated annotation goofy.infrastructure.cluster.x-k8s.io/node-not-ready)")
	}
	if sim == nil {
		return a, nodeNotReady, false, false
	}
	if sim.NodeNotReady && a.active(sim.NodeNotReadyUntil, now) && !nodeNotReady {
		nodeNotReady = true
		a.add(KindNodeNotReady, "nodeNotReady")
	}
	if sim.EtcdMemberUnhealthy && a.active(sim.EtcdMemberUnhealthyUntil, now) {
		etcdUnhealthy = true
		a.add(KindEtcdMemberUnhealthy, "etcdMemberUnhealthy")
	}
	if sim.VMFailed && a.active(sim.VMFailedUntil, now) {
		vmFailed = true
		a.add(KindVMFailed, "vmFailed")
	}
	return a, nodeNotReady, etcdUnhealthy, vmFailed
}

func latency(l *infrav1.LatencyFault) etcd.Latency {
	return etcd.Latency{Base: l.Base.Duration, Jitter: parseShare(l.Jitter)}
}

func describeLatency(l *infrav1.LatencyFault) string {
	if l.Jitter == "" {
		return l.Base.Duration.String()
	}
	return l.Base.Duration.String() + " jitter " + l.Jitter
}

// parseShare parses a decimal in [0,1]; anything else is 0.
func parseShare(s string) float64 {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v < 0 || v > 1 {
		return 0
	}
	return v
}

// wildcard is nil (all) for an empty list or one that holds "*".
func wildcard(list []string) []string {
	if len(list) == 0 || slices.Contains(list, "*") {
		return nil
	}
	return slices.Clone(list)
}

func orAll(list []string) string {
	if len(wildcard(list)) == 0 {
		return "all"
	}
	return strings.Join(list, ",")
}

// SetFaults replaces the cluster's injected faults (nil: none). Unreachable stops serving at once
// (open connections are closed); clearing it serves again if the cluster has an API server, and
// when that fails (ErrPortUnavailable) every later call without it tries again.
func (l *WorkloadClusterListener) SetFaults(ctx context.Context, f *Faults) error {
	var stop bool
	var err error
	l.lifecycle.Lock()
	defer l.lifecycle.Unlock()
	l.mu.Lock()
	l.faultsSet = f
	unreachable := f != nil && f.Unreachable
	switch {
	case unreachable && !l.unreachable:
		l.unreachable, stop = true, l.srv != nil
	case !unreachable:
		l.unreachable = false
		// Serving again once reachable; also when an earlier start failed (ErrPortUnavailable:
		// another process took the port while the cluster was unreachable), each call tries again.
		if l.srv == nil && len(l.apiServers) > 0 && !l.retired {
			err = l.startLocked()
		}
	}
	if l.etcd != nil {
		err = errors.Join(err, l.applyEtcdFaultsLocked(ctx))
	}
	if f != nil && (f.Latency.Base > 0 || len(f.Errors) > 0 || f.Etcd.Alarm == pb.AlarmType_NOSPACE || f.Leaderless) {
		l.faults.Store(f)
	} else {
		l.faults.Store(nil)
	}
	l.mu.Unlock()
	if stop {
		l.stop(ctx)
	}
	return err
}

// applyEtcdFaultsLocked hands the faults to the cluster's etcd. l.mu is held.
func (l *WorkloadClusterListener) applyEtcdFaultsLocked(ctx context.Context) error {
	f := l.faultsSet
	if f == nil {
		f = &Faults{}
	}
	ef := f.Etcd
	l.etcd.SetFaults(&ef)
	return l.etcd.SetLeaderless(ctx, f.Leaderless)
}

// SetEtcdMemberUnhealthy makes the etcd member of pod podName fail every call (or answer again).
func (m *WorkloadClustersMux) SetEtcdMemberUnhealthy(wclName, podName string, unhealthy bool) error {
	l, ok := m.Listener(wclName)
	if !ok {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.etcd == nil {
		return nil
	}
	return l.etcd.SetMemberUnhealthy(podName, unhealthy)
}

// withFaults is the fault filter of the API server's chain, behind authentication and metrics (a
// failed request is counted with its code). Without faults it is one atomic load.
func (l *WorkloadClusterListener) withFaults(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f := l.faults.Load()
		if f == nil {
			next.ServeHTTP(w, r)
			return
		}
		f.serve(next, w, r)
	})
}

func (f *Faults) serve(next http.Handler, w http.ResponseWriter, r *http.Request) {
	info, _ := request.RequestInfoFrom(r.Context())
	watch := info != nil && info.Verb == "watch"
	if f.Latency.Base > 0 {
		if watch {
			w = &delayedWriter{ResponseWriter: w, latency: f.Latency, ctx: r.Context()}
		} else if err := f.Latency.Sleep(r.Context()); err != nil {
			if errors.Is(r.Context().Err(), context.DeadlineExceeded) {
				// The request's deadline passed while etcd was slow: kube-apiserver's answer.
				refused(reasonRequestTimeout)
				err := apierrors.NewTimeoutError("request did not complete within requested timeout - context deadline exceeded", 0)
				writeStatus(w, &err.ErrStatus)
			}
			return // else the client went away
		}
	}
	if info != nil && info.IsResourceRequest {
		if err := f.failure(info); err != nil {
			if err.ErrStatus.Code == http.StatusTooManyRequests {
				w.Header().Set("Retry-After", "1")
			}
			writeStatus(w, &err.ErrStatus)
			return
		}
	}
	next.ServeHTTP(w, r)
}

// failure returns the error the request fails with, if any: a write refused by etcd's state, or a
// drawn error rule.
func (f *Faults) failure(info *request.RequestInfo) *apierrors.StatusError {
	switch info.Verb {
	case "create", "update", "patch":
		if f.Etcd.Alarm == pb.AlarmType_NOSPACE {
			// What kube-apiserver answers when etcd refuses a write with its quota exhausted.
			return apierrors.NewInternalError(errors.New("etcdserver: mvcc: database space exceeded"))
		}
		fallthrough
	case "delete", "deletecollection":
		if f.Leaderless {
			return apierrors.NewInternalError(errors.New("etcdserver: no leader"))
		}
	}
	for i := range f.Errors {
		rule := &f.Errors[i]
		if !rule.matches(info) || rand.Float64() >= rule.Ratio {
			continue
		}
		switch rule.Code {
		case http.StatusTooManyRequests:
			// API priority and fairness' rejection.
			return apierrors.NewTooManyRequests("Too many requests, please try again later.", 1)
		case http.StatusServiceUnavailable:
			return apierrors.NewServiceUnavailable("the server is currently unable to handle the request")
		case http.StatusGatewayTimeout:
			// The request timeout filter's answer.
			return apierrors.NewTimeoutError("request did not complete within requested timeout - context deadline exceeded", 0)
		default:
			return apierrors.NewInternalError(errors.New("an error on the server (\"simulated fault\") has prevented the request from succeeding"))
		}
	}
	return nil
}

// delayedWriter delays every flush of a watch by the injected latency: the watch handler flushes
// once after the response header and once after each event, however many writes its framing
// takes (a protobuf frame is two).
type delayedWriter struct {
	http.ResponseWriter
	latency etcd.Latency
	ctx     context.Context
}

func (d *delayedWriter) Flush() {
	if d.latency.Sleep(d.ctx) != nil {
		return // the client went away
	}
	if f, ok := d.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// SetWriteDeadline moves the watch write timeout's deadline by the longest injected delay: the
// delay is the simulated server's, not a client that stopped reading.
func (d *delayedWriter) SetWriteDeadline(t time.Time) error {
	if !t.IsZero() {
		t = t.Add(d.latency.Base + time.Duration(float64(d.latency.Base)*max(d.latency.Jitter, 0)))
	}
	return http.NewResponseController(d.ResponseWriter).SetWriteDeadline(t)
}

// Unwrap lets http.ResponseController reach the connection.
func (d *delayedWriter) Unwrap() http.ResponseWriter { return d.ResponseWriter }
