package benchapi

import (
	"context"
	"slices"
	"time"

	"k8s.io/client-go/rest"
)

// Params are the timings of every case.
type Params struct {
	Warmup, Duration time.Duration
	// Rounds splits Duration into that many windows per side, alternating the sides, so that a
	// change of the machine's load between them falls on both.
	Rounds int
	// Drain bounds how long watchers may take to catch up with the writes.
	Drain time.Duration
	// Writers is the number of watch writers, each patching its own ConfigMap.
	Writers int
}

// Load is one side's clients for one case, kept across the rounds.
type Load interface {
	// Run drives the server for d and reports what was answered within it.
	Run(ctx context.Context, d time.Duration) (Window, error)
	Close()
}

// Window is what one Run measured.
type Window struct {
	Count, Errors int64
	FirstError    string
	Seconds       float64
	Lat           []time.Duration
	Writes        int64 // watch: writes the writers made
	WriteSeconds  float64
}

// Result is one operation with one client count against one side.
type Result struct {
	Side    string `json:"side"`
	Op      string `json:"op"`
	Clients int    `json:"clients"`
	// Count is requests answered as expected, or for the watch, events delivered to watchers.
	Count      int64   `json:"count"`
	Errors     int64   `json:"errors"`
	FirstError string  `json:"firstError,omitempty"`
	Seconds    float64 `json:"seconds"`
	// Rate is Count per second: req/s, or events/s for the watch.
	Rate float64 `json:"rate"`
	// P50 and P99: request latency, or for the watch, write sent → event received.
	P50 time.Duration `json:"p50"`
	P99 time.Duration `json:"p99"`
	// Server and Client: CPU and allocations of the server process and of the driver (the
	// clients) during the measured windows.
	Server Stats `json:"server"`
	Client Stats `json:"client"`
	// WriteRate is the writes per second of the watch's writers.
	WriteRate float64 `json:"writeRate,omitempty"`
}

// Probe samples the server being measured; nil when it cannot be.
type Probe func(context.Context) (Stats, error)

// NewLoad connects the clients of op against the server config reaches: n clients (the watch: n
// watchers, and p.Writers writers), every one on a connection of its own.
func NewLoad(ctx context.Context, config *rest.Config, op Op, n int, p Params) (Load, error) {
	cs, done, err := Clients(config, n)
	if err != nil {
		return nil, err
	}
	if op.Name != WatchOp {
		return &requestLoad{op: op, clients: cs, close: done}, nil
	}
	writers, doneWriters, err := Clients(config, p.Writers)
	if err != nil {
		done()
		return nil, err
	}
	l, err := newWatchLoad(ctx, cs, writers, p.Drain)
	if err != nil {
		done()
		doneWriters()
		return nil, err
	}
	l.close = func() { done(); doneWriters() }
	return l, nil
}

// Interleave warms every load up, then runs p.Rounds windows of Duration/Rounds on each, one load
// at a time and alternating which goes first, sampling its server around every window.
func Interleave(ctx context.Context, loads []Load, probes []Probe, p Params) ([]Result, error) {
	for _, l := range loads {
		if _, err := l.Run(ctx, p.Warmup); err != nil {
			return nil, err
		}
	}
	rounds := max(p.Rounds, 1)
	tallies := make([]tally, len(loads))
	for r := range rounds {
		for k := range loads {
			i := k
			if r%2 == 1 {
				i = len(loads) - 1 - k
			}
			s0, c0, err := sample(ctx, probes[i])
			if err != nil {
				return nil, err
			}
			w, err := loads[i].Run(ctx, p.Duration/time.Duration(rounds))
			if err != nil {
				return nil, err
			}
			s1, c1, err := sample(ctx, probes[i])
			if err != nil {
				return nil, err
			}
			tallies[i].add(w, s1.Sub(s0), c1.Sub(c0))
		}
	}
	out := make([]Result, len(loads))
	for i := range tallies {
		out[i] = tallies[i].result()
	}
	return out, nil
}

// Measure runs op with n clients against one server (Interleave with one load).
func Measure(ctx context.Context, config *rest.Config, op Op, n int, p Params, probe Probe) (Result, error) {
	l, err := NewLoad(ctx, config, op, n, p)
	if err != nil {
		return Result{}, err
	}
	defer l.Close()
	r, err := Interleave(ctx, []Load{l}, []Probe{probe}, p)
	if err != nil {
		return Result{}, err
	}
	r[0].Op, r[0].Clients = op.Name, n
	return r[0], nil
}

// tally adds up the windows of one load.
type tally struct {
	w              Window
	server, client Stats
}

func (t *tally) add(w Window, server, client Stats) {
	t.w.Count += w.Count
	t.w.Errors += w.Errors
	if t.w.FirstError == "" {
		t.w.FirstError = w.FirstError
	}
	t.w.Seconds += w.Seconds
	t.w.Lat = append(t.w.Lat, w.Lat...)
	t.w.Writes += w.Writes
	t.w.WriteSeconds += w.WriteSeconds
	t.server, t.client = t.server.Add(server), t.client.Add(client)
}

func (t *tally) result() Result {
	r := Result{Count: t.w.Count, Errors: t.w.Errors, FirstError: t.w.FirstError, Seconds: t.w.Seconds, Server: t.server, Client: t.client}
	if r.Seconds > 0 {
		r.Rate = float64(r.Count) / r.Seconds
	}
	if t.w.WriteSeconds > 0 {
		r.WriteRate = float64(t.w.Writes) / t.w.WriteSeconds
	}
	r.P50, r.P99 = percentiles(t.w.Lat)
	return r
}

// sample reads the server's and this process's stats.
func sample(ctx context.Context, probe Probe) (server, client Stats, err error) {
	client = SelfStats()
	if probe != nil {
		server, err = probe(ctx)
	}
	return server, client, err
}

// percentiles returns p50 and p99 of d (sorted in place).
func percentiles(d []time.Duration) (p50, p99 time.Duration) {
	if len(d) == 0 {
		return 0, 0
	}
	slices.Sort(d)
	at := func(p float64) time.Duration { return d[int(p*float64(len(d)-1))] }
	return at(0.5), at(0.99)
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
