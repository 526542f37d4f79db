package benchapi

import (
	"context"
	"encoding/json"
	_ "expvar" // Go's memstats on /debug/vars
	"fmt"
	"net"
	"net/http"
	_ "net/http/pprof" // CPU profiles of a server for -cpuprofile
	"runtime"
	"syscall"
	"time"

	"github.com/goofy-capi/cluster-api-provider-goofy/test/bench"
)

// Stats are a process's cumulative CPU time and Go allocations; the difference of two samples
// is the cost of what ran in between.
type Stats struct {
	CPUSeconds float64 `json:"cpuSeconds"`
	MemStats   struct {
		Mallocs    uint64
		TotalAlloc uint64
	} `json:"memstats"`
}

// Add returns s + o.
func (s Stats) Add(o Stats) Stats {
	d := Stats{CPUSeconds: s.CPUSeconds + o.CPUSeconds}
	d.MemStats.Mallocs = s.MemStats.Mallocs + o.MemStats.Mallocs
	d.MemStats.TotalAlloc = s.MemStats.TotalAlloc + o.MemStats.TotalAlloc
	return d
}

// Sub returns s - o.
func (s Stats) Sub(o Stats) Stats {
	d := Stats{CPUSeconds: s.CPUSeconds - o.CPUSeconds}
	d.MemStats.Mallocs = s.MemStats.Mallocs - o.MemStats.Mallocs
	d.MemStats.TotalAlloc = s.MemStats.TotalAlloc - o.MemStats.TotalAlloc
	return d
}

// ServeStats serves expvar (/debug/vars, with Go's memstats) and pprof (/debug/pprof/) on addr,
// for the driver. The CAPD server program serves the same.
func ServeStats(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: http.DefaultServeMux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return nil
}

// SelfStats samples this process: the driver, i.e. the clients' cost (or, in tests, everything).
func SelfStats() Stats {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	s := Stats{CPUSeconds: float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9}
	s.MemStats.Mallocs, s.MemStats.TotalAlloc = ms.Mallocs, ms.TotalAlloc
	return s
}

// FetchStats samples a server program: its Go allocations from its ServeStats endpoint, its CPU
// time from /proc (10 ms resolution: about 1 % of what a measured window uses).
func FetchStats(ctx context.Context, addr string, pid int) (Stats, error) {
	var s Stats
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/debug/vars", nil)
	if err != nil {
		return s, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return s, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return s, fmt.Errorf("%s/debug/vars: %s", addr, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		return s, err
	}
	p, err := bench.ReadProc(pid)
	s.CPUSeconds = p.CPUSeconds
	return s, err
}
