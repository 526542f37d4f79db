package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// profiler collects pprof profiles from a manager's --profiler-address while the scenario runs:
// back-to-back CPU profiles of window length (go tool pprof merges several files given together)
// and a heap profile when asked.
type profiler struct {
	base   string // http://host:port
	dir    string
	prefix string
	window time.Duration

	mu    sync.Mutex
	files []string
	stop  context.CancelFunc
	done  chan struct{}
}

func newProfiler(addr, dir, prefix string, window time.Duration) *profiler {
	return &profiler{base: "http://" + addr, dir: dir, prefix: prefix, window: window}
}

// startCPU fetches CPU profiles until stopCPU.
func (p *profiler) startCPU(ctx context.Context) {
	ctx, p.stop = context.WithCancel(ctx)
	p.done = make(chan struct{})
	go func() {
		defer close(p.done)
		for i := 0; ctx.Err() == nil; i++ {
			file := filepath.Join(p.dir, fmt.Sprintf("%s-cpu-%03d.pprof", p.prefix, i))
			url := fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", p.base, int(p.window.Seconds()))
			// The server ends the profile after the window; cancelling ctx drops a partial one.
			if err := fetch(ctx, url, file, p.window+30*time.Second); err != nil {
				_ = os.Remove(file)
				if ctx.Err() == nil {
					time.Sleep(time.Second) // not serving yet
				}
				continue
			}
			p.mu.Lock()
			p.files = append(p.files, file)
			p.mu.Unlock()
		}
	}()
}

// stopCPU stops after the profile in flight (the last partial window is dropped).
func (p *profiler) stopCPU() []string {
	if p.stop != nil {
		p.stop()
		<-p.done
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.files...)
}

// heap saves a heap profile (in-use and allocated space since start).
func (p *profiler) heap(ctx context.Context) (string, error) {
	file := filepath.Join(p.dir, p.prefix+"-heap.pprof")
	return file, fetch(ctx, p.base+"/debug/pprof/heap", file, 30*time.Second)
}

func fetch(ctx context.Context, url, file string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
