package bench

import (
	"encoding/json"
	"fmt"
	"image/color"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// Report is everything one `make bench` invocation measured.
type Report struct {
	Runs []*Result `json:"runs"`
	// Ratios compares the first provider with the second (Goofy / CAPD) when both ran.
	Ratios *Ratios `json:"ratios,omitempty"`
}

// Ratios are provider figures of runs[0] divided by those of runs[1].
type Ratios struct {
	Of              string  `json:"of"`
	To              string  `json:"to"`
	CPUSeconds      float64 `json:"cpuSeconds"`
	PeakRSS         float64 `json:"peakRSS"`
	Requests        float64 `json:"requests"`
	AllAvailableSec float64 `json:"allAvailableSeconds"`
	// Settings says which comparison this is: "shipped defaults" (each provider with its own),
	// "equal client settings", or "different client settings".
	Settings string `json:"clientSettings"`
}

// NewReport builds the report and, with two runs, their ratios.
func NewReport(runs []*Result) *Report {
	r := &Report{Runs: runs}
	if len(runs) == 2 {
		a, b := runs[0], runs[1]
		div := func(x, y float64) float64 {
			if y == 0 {
				return 0
			}
			return x / y
		}
		r.Ratios = &Ratios{
			Of: a.Provider, To: b.Provider,
			CPUSeconds:      div(a.ProviderStats().CPUSeconds, b.ProviderStats().CPUSeconds),
			PeakRSS:         div(float64(a.ProviderStats().PeakRSSBytes), float64(b.ProviderStats().PeakRSSBytes)),
			Requests:        div(float64(a.ProviderRequests()), float64(b.ProviderRequests())),
			AllAvailableSec: div(a.AllAvailableSeconds, b.AllAvailableSeconds),
			Settings:        comparison(a.Client, b.Client),
		}
	}
	return r
}

// comparison names what two runs' client settings make of their comparison.
func comparison(a, b ClientSettingsUsed) string {
	switch {
	case a.values() == b.values():
		return "equal client settings"
	case a.Shipped() && b.Shipped():
		return "shipped defaults"
	default:
		return "different client settings"
	}
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(path string) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}

func mib(b int64) string { return fmt.Sprintf("%.1f", float64(b)/(1<<20)) }

func secs(s float64) string {
	if s == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", s)
}

// WriteText prints the runs side by side: scenario figures, per-phase latencies, every process's
// CPU and peak RSS, and the provider's requests by verb and resource.
func (r *Report) WriteText(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(label string, f func(*Result) string) {
		cells := []string{label}
		for _, run := range r.Runs {
			cells = append(cells, f(run))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
	}
	row("", func(x *Result) string { return x.Provider })
	if len(r.Runs) > 0 {
		x := r.Runs[0]
		fmt.Fprintf(w, "scenario: %d clusters × (%d control-plane + %d workers), phases %s, jitter %s, batch %d\n",
			x.Clusters, x.ControlPlane, x.Workers, x.Phase, x.Jitter, x.BatchSize)
	}
	row("managers", func(x *Result) string {
		if x.Shards > 1 {
			return fmt.Sprintf("%d (sharded by --watch-filter; CPU and RSS summed)", x.Shards)
		}
		return "1"
	})
	row("client QPS / burst", func(x *Result) string { return x.Client.QPS + " / " + x.Client.Burst })
	row("concurrency clusters / machines", func(x *Result) string {
		return x.Client.ClusterConcurrency + " / " + x.Client.MachineConcurrency
	})
	row("client settings", func(x *Result) string {
		if x.Client.Shipped() {
			return "shipped defaults"
		}
		return "set: " + strings.Join(x.Client.Set, ", ")
	})
	row("clusters Available", func(x *Result) string { return fmt.Sprintf("%d/%d", x.AvailableClusters, x.Clusters) })
	row("clusters not Available (stalled)", func(x *Result) string { return fmt.Sprint(len(x.NotAvailable)) })
	row("apply (s)", func(x *Result) string { return secs(x.ApplySeconds) })
	row("apply → all Available (s)", func(x *Result) string { return secs(x.AllAvailableSeconds) })
	row("workers", func(x *Result) string {
		if x.MachinePool {
			return "MachinePool"
		}
		return "MachineDeployment"
	})
	row("apply → all Nodes Ready (s)", func(x *Result) string { return secs(x.AllNodesReadySeconds) })
	row("create→Available p50 (s)", func(x *Result) string { return secs(x.CreateToAvailable.P50) })
	row("create→Available p90 (s)", func(x *Result) string { return secs(x.CreateToAvailable.P90) })
	row("create→Available max (s)", func(x *Result) string { return secs(x.CreateToAvailable.Max) })
	row("provider CPU (s)", func(x *Result) string { return fmt.Sprintf("%.1f", x.ProviderStats().CPUSeconds) })
	row("provider peak RSS (MiB)", func(x *Result) string { return mib(x.ProviderStats().PeakRSSBytes) })
	row("provider API requests", func(x *Result) string { return fmt.Sprint(x.ProviderRequests()) })
	row("steady: provider requests / machine / 10 min", func(x *Result) string {
		if x.Steady == nil {
			return "-"
		}
		return fmt.Sprintf("%.2f (%d in %.0f s, %d machines)", x.Steady.PerMachinePerSyncPeriod, x.Steady.TotalRequests, x.Steady.WindowSeconds, x.Steady.Machines)
	})

	phases := map[string]bool{}
	procs := map[string]bool{}
	clients := map[string]bool{}
	for _, run := range r.Runs {
		for k := range run.Phases {
			phases[k] = true
		}
		for k := range run.Processes {
			procs[k] = true
		}
		for k := range run.Requests.ByClient {
			clients[k] = true
		}
	}
	fmt.Fprintln(tw, "machine phases (p50 / p90 / max s)\t")
	for _, k := range keys(phases) {
		row("  "+k, func(x *Result) string {
			p, ok := x.Phases[k]
			if !ok {
				return "-"
			}
			return fmt.Sprintf("%.1f / %.1f / %.1f", p.P50, p.P90, p.Max)
		})
	}
	fmt.Fprintln(tw, "processes (CPU s during scenario / total, peak RSS MiB (anon))\t")
	for _, k := range keys(procs) {
		row("  "+k, func(x *Result) string {
			p, ok := x.Processes[k]
			if !ok {
				return "-"
			}
			return fmt.Sprintf("%.1f / %.1f, %s (%s)", p.CPUSeconds, p.CPUSecondsTotal, mib(p.PeakRSSBytes), mib(p.SampledPeakAnonBytes))
		})
	}
	fmt.Fprintln(tw, "management API requests by client\t")
	for _, k := range keys(clients) {
		row("  "+k, func(x *Result) string { return fmt.Sprint(x.Requests.ByClient[k]) })
	}
	_ = tw.Flush()

	for _, run := range r.Runs {
		byVR := run.Requests.ByVerbResource[run.ProviderClient]
		fmt.Fprintf(w, "\n%s requests by verb and resource (%d):\n", run.Provider, run.ProviderRequests())
		for _, k := range sortedKeys(byVR) {
			fmt.Fprintf(w, "  %7d  %s\n", byVR[k], k)
		}
		if st := run.Steady; st != nil && st.TotalRequests > 0 {
			fmt.Fprintf(w, "%s steady-state requests by verb and resource (%d in %.0f s):\n", run.Provider, st.TotalRequests, st.WindowSeconds)
			for _, k := range sortedKeys(st.Requests) {
				fmt.Fprintf(w, "  %7d  %s\n", st.Requests[k], k)
			}
		}
		if c := run.Controllers; c != nil {
			fmt.Fprintf(w, "%s controllers (reconciles, total reconcile s, mean queue wait s); requests throttled > 1 s by its own QPS limit: %d\n", run.Provider, c.ThrottledRequests)
			for _, name := range sortedNames(c.Reconciles) {
				fmt.Fprintf(w, "  %-28s %7.0f %8.1f %8.3f\n", name, c.Reconciles[name], c.ReconcileSeconds[name], c.QueueWaitSeconds[name])
			}
		}
		if n := len(run.NotAvailable); n > 0 {
			names := run.NotAvailable[:min(n, 20)]
			more := ""
			if n > len(names) {
				more = fmt.Sprintf(" and %d more", n-len(names))
			}
			fmt.Fprintf(w, "%s clusters not Available: %s%s\n", run.Provider, strings.Join(names, ", "), more)
		}
		if run.Error != "" {
			fmt.Fprintf(w, "%s run failed: %s\n", run.Provider, run.Error)
		}
	}
	if r.Ratios != nil {
		fmt.Fprintf(w, "\n%s / %s (%s): CPU %.2f, peak RSS %.2f, requests %.2f, time to all Available %.2f (targets: ≤ 0.5, ≤ 0.5, ≤ 0.5, ≤ 1)\n",
			r.Ratios.Of, r.Ratios.To, r.Ratios.Settings, r.Ratios.CPUSeconds, r.Ratios.PeakRSS, r.Ratios.Requests, r.Ratios.AllAvailableSec)
	}
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// lineColors tell the providers apart on the plot.
var lineColors = []color.Color{
	color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
}

// WritePlot draws clusters Available over time, one step line per provider, as a PNG.
func (r *Report) WritePlot(path string) error {
	p := plot.New()
	p.Title.Text = "Clusters Available over time"
	p.X.Label.Text = "seconds since first apply"
	p.Y.Label.Text = "clusters Available"
	p.Legend.Top = true
	p.Legend.Left = true
	for i, run := range r.Runs {
		pts := make(plotter.XYs, 0, len(run.AvailableOverTime))
		for _, xy := range run.AvailableOverTime {
			pts = append(pts, plotter.XY{X: xy[0], Y: xy[1]})
		}
		if len(pts) == 0 {
			continue
		}
		line, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		line.StepStyle = plotter.PostStep
		line.Color = lineColors[i%len(lineColors)]
		line.Width = vg.Points(2)
		p.Add(line)
		p.Legend.Add(run.Provider, line)
	}
	p.Add(plotter.NewGrid())
	return p.Save(8*vg.Inch, 5*vg.Inch, path)
}
