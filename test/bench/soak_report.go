package bench

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"image/color"
	"os"
	"strconv"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// SoakSample is one reading of the Goofy manager during a soak, taken every SampleEvery.
type SoakSample struct {
	Time time.Time `json:"time"`
	// Elapsed is seconds since the churn began (every cluster Available).
	Elapsed float64 `json:"elapsedSeconds"`
	// Segment counts the manager's lives: 0 until the first SIGKILL, then one more per restart.
	Segment    int   `json:"segment"`
	RSSBytes   int64 `json:"rssBytes"`
	AnonBytes  int64 `json:"anonBytes"`
	Goroutines int   `json:"goroutines"`
	OpenFiles  int   `json:"openFiles"`
	StateBytes int64 `json:"stateBytes"`
	// Available is how many clusters were Available.
	Available int `json:"available"`
	// ConfigMaps is how many ConfigMaps the soak had written into workload clusters so far.
	ConfigMaps int `json:"configMaps"`
}

// SegmentVerdict judges one segment (the manager's life between restarts): its RSS and
// goroutines over its last Window against their values over a Window centred Warmup after it
// began.
type SegmentVerdict struct {
	Segment int `json:"segment"`
	// WithRestarts is true for the segments of the restart phase.
	WithRestarts bool    `json:"withRestarts"`
	From         float64 `json:"fromSeconds"`
	To           float64 `json:"toSeconds"`
	// Checked is false when the segment was too short to have a baseline and an end apart.
	Checked            bool    `json:"checked"`
	BaselineRSSBytes   float64 `json:"baselineRSSBytes"`
	EndRSSBytes        float64 `json:"endRSSBytes"`
	BaselineGoroutines float64 `json:"baselineGoroutines"`
	EndGoroutines      float64 `json:"endGoroutines"`
	// RSSGrowth and GoroutineGrowth are end / baseline - 1.
	RSSGrowth       float64 `json:"rssGrowth"`
	GoroutineGrowth float64 `json:"goroutineGrowth"`
	Pass            bool    `json:"pass"`
	Reason          string  `json:"reason"`
}

// soakMinSamples is the fewest samples a baseline or end window must hold to be judged.
const soakMinSamples = 3

// JudgeSegments splits the samples by segment and judges each: its baseline is the mean of the
// samples in a window of length window centred Warmup after the segment's first sample, its end
// the mean of the samples in its last window (clipped so the two never overlap); it fails when RSS
// or goroutines grew by more than tolerance. A window as long as the manager's sync period holds
// one whole resync cycle, so where in that cycle (or in a GC cycle) a sample falls cancels out: RSS
// read once swings by several times the 5 % allowed. restartFrom is the elapsed second the
// restart phase began (segments starting there or later have restarts).
func JudgeSegments(samples []SoakSample, warmup, window time.Duration, tolerance, restartFrom float64) []SegmentVerdict {
	var verdicts []SegmentVerdict
	for lo := 0; lo < len(samples); {
		hi := lo
		for hi < len(samples) && samples[hi].Segment == samples[lo].Segment {
			hi++
		}
		verdicts = append(verdicts, judgeSegment(samples[lo:hi], warmup, window, tolerance, restartFrom))
		lo = hi
	}
	return verdicts
}

func judgeSegment(seg []SoakSample, warmup, window time.Duration, tolerance, restartFrom float64) SegmentVerdict {
	first, last := seg[0], seg[len(seg)-1]
	v := SegmentVerdict{Segment: first.Segment, WithRestarts: first.Elapsed >= restartFrom, From: first.Elapsed, To: last.Elapsed, Pass: true}
	half := window.Seconds() / 2
	baseFrom, baseTo := first.Elapsed+warmup.Seconds()-half, first.Elapsed+warmup.Seconds()+half
	endFrom := max(last.Elapsed-window.Seconds(), baseTo)
	// in returns the samples with from <= elapsed < to (to inclusive for the end window).
	in := func(from, to float64, inclusive bool) []SoakSample {
		var out []SoakSample
		for _, s := range seg {
			if s.Elapsed >= from && (s.Elapsed < to || inclusive && s.Elapsed == to) {
				out = append(out, s)
			}
		}
		return out
	}
	base, end := in(baseFrom, baseTo, false), in(endFrom, last.Elapsed, true)
	if last.Elapsed-endFrom < half || len(base) < soakMinSamples || len(end) < soakMinSamples {
		v.Reason = fmt.Sprintf("not judged: %.0fs long, shorter than the %s warm-up and a %s window on either side of its end (%d samples at least in each)",
			last.Elapsed-first.Elapsed, warmup, window, soakMinSamples)
		return v
	}
	v.Checked = true
	mean := func(samples []SoakSample, f func(SoakSample) float64) float64 {
		sum := 0.0
		for _, s := range samples {
			sum += f(s)
		}
		return sum / float64(len(samples))
	}
	rss := func(s SoakSample) float64 { return float64(s.RSSBytes) }
	goroutines := func(s SoakSample) float64 { return float64(s.Goroutines) }
	v.BaselineRSSBytes, v.EndRSSBytes = mean(base, rss), mean(end, rss)
	v.BaselineGoroutines, v.EndGoroutines = mean(base, goroutines), mean(end, goroutines)
	v.RSSGrowth = v.EndRSSBytes/v.BaselineRSSBytes - 1
	v.GoroutineGrowth = v.EndGoroutines/v.BaselineGoroutines - 1
	switch {
	case v.RSSGrowth > tolerance:
		v.Pass = false
		v.Reason = fmt.Sprintf("RSS grew %.1f%% (%.1f → %.1f MiB), more than %.0f%%", 100*v.RSSGrowth, v.BaselineRSSBytes/(1<<20), v.EndRSSBytes/(1<<20), 100*tolerance)
	case v.GoroutineGrowth > tolerance:
		v.Pass = false
		v.Reason = fmt.Sprintf("goroutines grew %.1f%% (%.0f → %.0f), more than %.0f%%", 100*v.GoroutineGrowth, v.BaselineGoroutines, v.EndGoroutines, 100*tolerance)
	default:
		v.Reason = fmt.Sprintf("RSS %+.1f%%, goroutines %+.1f%%", 100*v.RSSGrowth, 100*v.GoroutineGrowth)
	}
	return v
}

// WriteSoakCSV writes one row per sample.
func WriteSoakCSV(path string, samples []SoakSample) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	_ = w.Write([]string{"time", "elapsed_seconds", "segment", "rss_bytes", "anon_bytes", "goroutines", "open_files", "state_bytes", "clusters_available", "configmaps_written"})
	for _, s := range samples {
		_ = w.Write([]string{s.Time.UTC().Format(time.RFC3339), strconv.FormatFloat(s.Elapsed, 'f', 0, 64), strconv.Itoa(s.Segment),
			strconv.FormatInt(s.RSSBytes, 10), strconv.FormatInt(s.AnonBytes, 10), strconv.Itoa(s.Goroutines), strconv.Itoa(s.OpenFiles),
			strconv.FormatInt(s.StateBytes, 10), strconv.Itoa(s.Available), strconv.Itoa(s.ConfigMaps)})
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// WriteSoakJSON writes the result.
func WriteSoakJSON(path string, r *SoakResult) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// WriteSoakPlot draws the samples over time as a PNG of two panels: memory (RSS, its anonymous
// part, the state file) in MiB above, goroutines and open files below; a restart is a vertical
// grey line in both.
func WriteSoakPlot(path string, samples []SoakSample) error {
	minutes := func(s SoakSample) float64 { return s.Elapsed / 60 }
	series := func(f func(SoakSample) float64) plotter.XYs {
		pts := make(plotter.XYs, len(samples))
		for i, s := range samples {
			pts[i] = plotter.XY{X: minutes(s), Y: f(s)}
		}
		return pts
	}
	const mib = 1 << 20
	memory := plot.New()
	memory.Title.Text = "Goofy manager during the soak"
	memory.Y.Label.Text = "MiB"
	counts := plot.New()
	counts.X.Label.Text = "minutes since every cluster was Available"
	counts.Y.Label.Text = "count"
	for _, p := range []*plot.Plot{memory, counts} {
		p.Legend.Top, p.Legend.Left = true, true
		p.Y.Min = 0
		p.Add(plotter.NewGrid())
	}
	add := func(p *plot.Plot, name string, c color.Color, pts plotter.XYs) error {
		line, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		line.Color, line.Width = c, vg.Points(1.5)
		p.Add(line)
		p.Legend.Add(name, line)
		return nil
	}
	for i, l := range []struct {
		p    *plot.Plot
		name string
		f    func(SoakSample) float64
	}{
		{memory, "RSS", func(s SoakSample) float64 { return float64(s.RSSBytes) / mib }},
		{memory, "RSS anonymous", func(s SoakSample) float64 { return float64(s.AnonBytes) / mib }},
		{memory, "state file", func(s SoakSample) float64 { return float64(s.StateBytes) / mib }},
		{counts, "goroutines", func(s SoakSample) float64 { return float64(s.Goroutines) }},
		{counts, "open files", func(s SoakSample) float64 { return float64(s.OpenFiles) }},
	} {
		if err := add(l.p, l.name, lineColors[i%len(lineColors)], series(l.f)); err != nil {
			return err
		}
	}
	for i := 1; i < len(samples); i++ {
		if samples[i].Segment == samples[i-1].Segment {
			continue
		}
		x := minutes(samples[i])
		for _, p := range []*plot.Plot{memory, counts} {
			p.Add(verticalLine{x: x})
		}
	}
	img := vgimg.New(10*vg.Inch, 8*vg.Inch)
	canvases := plot.Align([][]*plot.Plot{{memory}, {counts}}, draw.Tiles{Rows: 2, Cols: 1, PadY: vg.Points(12), PadTop: vg.Points(6), PadBottom: vg.Points(6), PadLeft: vg.Points(6), PadRight: vg.Points(12)}, draw.New(img))
	memory.Draw(canvases[0][0])
	counts.Draw(canvases[1][0])
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// verticalLine marks a restart across a panel's whole height.
type verticalLine struct{ x float64 }

func (l verticalLine) Plot(c draw.Canvas, p *plot.Plot) {
	trX, _ := p.Transforms(&c)
	x := trX(l.x)
	c.StrokeLine2(draw.LineStyle{Color: color.Gray{Y: 0x99}, Width: vg.Points(1), Dashes: []vg.Length{vg.Points(4), vg.Points(3)}},
		x, c.Min.Y, x, c.Max.Y)
}
