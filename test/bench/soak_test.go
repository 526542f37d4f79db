package bench

import (
	"encoding/csv"
	"image/png"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// soakSeries is a segment's samples a minute apart from elapsed second from: RSS from rss(i),
// goroutines from goroutines(i).
func soakSeries(segment int, from float64, n int, rss func(int) int64, goroutines func(int) int) []SoakSample {
	out := make([]SoakSample, n)
	for i := range out {
		out[i] = SoakSample{Segment: segment, Elapsed: from + float64(60*i), RSSBytes: rss(i), Goroutines: goroutines(i)}
	}
	return out
}

func TestJudgeSegments(t *testing.T) {
	g := NewWithT(t)
	flat := func(int) int64 { return 100 << 20 }
	steady := func(int) int { return 400 }
	// The warm-up's growth does not count: RSS doubles in the first 10 minutes, then holds.
	warming := func(i int) int64 {
		if i < 10 {
			return int64(50+50*i/10) << 20
		}
		return 100 << 20
	}
	// A leak: +1 % a minute after the warm-up.
	leaking := func(i int) int64 { return int64(float64(100<<20) * (1 + 0.01*float64(max(0, i-15)))) }
	goroutineLeak := func(i int) int { return 400 + 3*i }

	var samples []SoakSample
	samples = append(samples, soakSeries(0, 0, 60, warming, steady)...)        // no restarts: passes
	samples = append(samples, soakSeries(1, 3600, 30, leaking, steady)...)     // RSS +8 % from minute 15 to 25: fails
	samples = append(samples, soakSeries(2, 5400, 30, flat, goroutineLeak)...) // goroutines +7 %: fails
	samples = append(samples, soakSeries(3, 7200, 20, flat, steady)...)        // too short to judge
	v := JudgeSegments(samples, 15*time.Minute, 10*time.Minute, 0.05, 3600)
	g.Expect(v).To(HaveLen(4))

	g.Expect(v[0].Segment).To(Equal(0))
	g.Expect(v[0].WithRestarts).To(BeFalse())
	g.Expect(v[0].Checked).To(BeTrue())
	g.Expect(v[0].Pass).To(BeTrue(), v[0].Reason)
	g.Expect(v[0].BaselineRSSBytes).To(BeNumerically("==", 100<<20), "the baseline is taken after the warm-up")

	g.Expect(v[1].WithRestarts).To(BeTrue())
	g.Expect(v[1].Pass).To(BeFalse())
	g.Expect(v[1].RSSGrowth).To(BeNumerically("~", 0.084, 0.001), "minutes 10-19 against minutes 20-29")
	g.Expect(v[1].Reason).To(ContainSubstring("RSS grew"))

	g.Expect(v[2].Pass).To(BeFalse())
	g.Expect(v[2].RSSGrowth).To(BeNumerically("==", 0))
	g.Expect(v[2].Reason).To(ContainSubstring("goroutines grew"))

	g.Expect(v[3].Checked).To(BeFalse())
	g.Expect(v[3].Pass).To(BeTrue())
	g.Expect(v[3].Reason).To(ContainSubstring("not judged"))
}

// A segment's RSS swings in a cycle as long as the manager's sync period (every object is
// reconciled again, the heap grows, the runtime gives the pages back): a 30-minute segment with a
// swing of a quarter of its level holds wherever its samples fall in that cycle, and fails once
// the level grows 1 % a minute beneath the swing.
func TestJudgeSegmentsAverageWholeCycles(t *testing.T) {
	g := NewWithT(t)
	steady := func(int) int { return 1200 }
	for phase := range 10 {
		swing := func(i int) int64 { return int64(150+4*((i+phase)%10)) << 20 } // 150-186 MiB, a drop every 10 minutes
		v := JudgeSegments(soakSeries(1, 3600, 30, swing, steady), 15*time.Minute, 10*time.Minute, 0.05, 3600)
		g.Expect(v).To(HaveLen(1))
		g.Expect(v[0].Checked).To(BeTrue())
		g.Expect(v[0].Pass).To(BeTrue(), "phase %d: %s", phase, v[0].Reason)
		g.Expect(v[0].RSSGrowth).To(BeNumerically("~", 0, 0.001), "phase %d", phase)

		leaking := func(i int) int64 { return int64(float64(swing(i)) * (1 + 0.01*float64(i))) }
		v = JudgeSegments(soakSeries(1, 3600, 30, leaking, steady), 15*time.Minute, 10*time.Minute, 0.05, 3600)
		g.Expect(v[0].Pass).To(BeFalse(), "phase %d: %s", phase, v[0].Reason)
		g.Expect(v[0].Reason).To(ContainSubstring("RSS grew"))
	}
}

func TestSoakFiles(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	samples := append(soakSeries(0, 0, 20, func(i int) int64 { return int64(100+i) << 20 }, func(int) int { return 300 }),
		soakSeries(1, 1200, 20, func(i int) int64 { return int64(90+i) << 20 }, func(int) int { return 310 })...)
	for i := range samples {
		samples[i].Time = time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC).Add(time.Duration(samples[i].Elapsed) * time.Second)
		samples[i].StateBytes, samples[i].OpenFiles, samples[i].Available = 4<<20, 120, 100
	}

	csvPath := filepath.Join(dir, "samples.csv")
	g.Expect(WriteSoakCSV(csvPath, samples)).To(Succeed())
	f, err := os.Open(csvPath)
	g.Expect(err).NotTo(HaveOccurred())
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(rows).To(HaveLen(len(samples) + 1))
	g.Expect(rows[0][3]).To(Equal("rss_bytes"))
	g.Expect(rows[21]).To(Equal([]string{"2026-12-03T12:20:00Z", "1200", "1", "94371840", "0", "310", "120", "4194304", "100", "0"}))

	pngPath := filepath.Join(dir, "soak.png")
	g.Expect(WriteSoakPlot(pngPath, samples)).To(Succeed())
	p, err := os.Open(pngPath)
	g.Expect(err).NotTo(HaveOccurred())
	defer p.Close()
	img, err := png.Decode(p)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(img.Bounds().Dx()).To(BeNumerically(">", 500))
	g.Expect(img.Bounds().Dy()).To(BeNumerically(">", 400))
}
