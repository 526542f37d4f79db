package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// clockTicks is USER_HZ, the unit of utime/stime in /proc/<pid>/stat; 100 on every Linux
// architecture Go supports (the kernel ABI fixes it, whatever CONFIG_HZ is).
const clockTicks = 100

// ProcSample is one reading of a process from /proc.
type ProcSample struct {
	CPUSeconds float64 // user + system time since the process started
	RSSBytes   int64   // VmRSS
	PeakRSS    int64   // VmHWM: the kernel's own high-water mark of the resident set
	AnonBytes  int64   // RssAnon: the resident heap and stacks, without the mapped binary
}

// ReadProc reads /proc/<pid>/stat and /proc/<pid>/status.
func ReadProc(pid int) (ProcSample, error) {
	var s ProcSample
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return s, err
	}
	if s.CPUSeconds, err = parseStatCPU(stat); err != nil {
		return s, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, err
	}
	s.RSSBytes, s.PeakRSS = parseStatusKB(status, "VmRSS:")*1024, parseStatusKB(status, "VmHWM:")*1024
	s.AnonBytes = parseStatusKB(status, "RssAnon:") * 1024
	return s, nil
}

// parseStatCPU returns utime+stime in seconds. The command name (field 2) is in parentheses and
// may itself hold spaces and parentheses, so fields are counted after the last ')'.
func parseStatCPU(stat []byte) (float64, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("no command name")
	}
	f := strings.Fields(string(stat[i+1:]))
	// After ')': state(3) ppid(4) ... utime(14) stime(15): indexes 11 and 12 here.
	if len(f) < 13 {
		return 0, fmt.Errorf("only %d fields", len(f)+2)
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("bad utime/stime %q %q", f[11], f[12])
	}
	return float64(ut+st) / clockTicks, nil
}

// parseStatPPID returns the parent pid from /proc/<pid>/stat.
func parseStatPPID(stat []byte) (int, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("no command name")
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 2 {
		return 0, fmt.Errorf("short stat")
	}
	return strconv.Atoi(f[1])
}

func parseStatusKB(status []byte, key string) int64 {
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, key) {
			f := strings.Fields(line[len(key):])
			if len(f) > 0 {
				v, _ := strconv.ParseInt(f[0], 10, 64)
				return v
			}
		}
	}
	return 0
}

// ChildProcesses returns the direct children of this process by executable base name (etcd and
// kube-apiserver, which envtest starts, are found this way).
func ChildProcesses() map[string]int {
	out := map[string]int{}
	self := os.Getpid()
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		if ppid, err := parseStatPPID(stat); err != nil || ppid != self {
			continue
		}
		exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		if err != nil {
			continue
		}
		out[filepath.Base(exe)] = pid
	}
	return out
}

// ProcStats is what the sampler reports for one process.
type ProcStats struct {
	PID int `json:"pid"`
	// CPUSeconds is the CPU time used while the scenario ran (from Mark to Stop).
	CPUSeconds float64 `json:"cpuSeconds"`
	// CPUSecondsTotal is the CPU time since the process started (management plane start-up included).
	CPUSecondsTotal float64 `json:"cpuSecondsTotal"`
	// PeakRSSBytes is the kernel's high-water mark of the resident set (VmHWM), which also catches
	// peaks between samples.
	PeakRSSBytes int64 `json:"peakRSSBytes"`
	// SampledPeakRSSBytes is the largest VmRSS seen by the 1 s sampler (a cross-check).
	SampledPeakRSSBytes int64 `json:"sampledPeakRSSBytes"`
	// SampledPeakAnonBytes is the largest RssAnon seen: the resident set without file-backed pages
	// (the binary's text), i.e. what the process itself allocated.
	SampledPeakAnonBytes int64 `json:"sampledPeakAnonBytes"`
}

// Sampler follows a set of processes: it reads them every interval so that the last reading
// before a process exits is kept, and reports CPU used since Mark.
type Sampler struct {
	mu       sync.Mutex
	pids     map[string]int
	start    map[string]ProcSample
	last     map[string]ProcSample
	maxRSS   map[string]int64
	maxAnon  map[string]int64
	stop     chan struct{}
	done     chan struct{}
	interval time.Duration
}

// NewSampler starts sampling the named processes every interval.
func NewSampler(pids map[string]int, interval time.Duration) *Sampler {
	s := &Sampler{
		pids: pids, start: map[string]ProcSample{}, last: map[string]ProcSample{}, maxRSS: map[string]int64{}, maxAnon: map[string]int64{},
		stop: make(chan struct{}), done: make(chan struct{}), interval: interval,
	}
	s.sample()
	go s.loop()
	return s
}

func (s *Sampler) loop() {
	defer close(s.done)
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.sample()
		}
	}
}

func (s *Sampler) sample() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, pid := range s.pids {
		ps, err := ReadProc(pid)
		if err != nil {
			continue // exited: keep the last reading
		}
		s.last[name] = ps
		s.maxRSS[name] = max(s.maxRSS[name], ps.RSSBytes)
		s.maxAnon[name] = max(s.maxAnon[name], ps.AnonBytes)
	}
}

// Mark records the CPU baseline: CPUSeconds in the result counts from here.
func (s *Sampler) Mark() {
	s.sample()
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, v := range s.last {
		s.start[k] = v
	}
}

// Stop takes a final reading and returns the figures per process name.
func (s *Sampler) Stop() map[string]ProcStats {
	s.sample()
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]ProcStats{}
	for name, last := range s.last {
		out[name] = ProcStats{
			PID:                  s.pids[name],
			CPUSeconds:           last.CPUSeconds - s.start[name].CPUSeconds,
			CPUSecondsTotal:      last.CPUSeconds,
			PeakRSSBytes:         max(last.PeakRSS, s.maxRSS[name]),
			SampledPeakRSSBytes:  s.maxRSS[name],
			SampledPeakAnonBytes: s.maxAnon[name],
		}
	}
	return out
}
