package benchapi

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is one `make bench-api` run.
type Report struct {
	Started  time.Time     `json:"started"`
	Warmup   time.Duration `json:"warmup"`
	Duration time.Duration `json:"duration"`
	Rounds   int           `json:"rounds"`
	// Writers is the number of watch writers in every watch case.
	Writers int `json:"writers"`
	// JSON is set when the clients were made to use JSON with both sides (-json).
	JSON bool `json:"json"`
	// Sides describe how each side ran (binary, state, ports).
	Sides map[string]string `json:"sides"`
	// LoadAvg is /proc/loadavg at the start and at the end: the machine is shared.
	LoadAvg [2]string `json:"loadavg"`
	// ResponseBytes is the size of each operation's response body, per side, to show both
	// answer with the same objects.
	ResponseBytes map[string]map[string]Body `json:"responseBytes"`
	Results       []Result                   `json:"results"`
}

// Body is an operation's response: its size as JSON (CAPD's go-restful indents it), compacted,
// and as client-go's typed clients negotiate it (they prefer protobuf, which CAPD does not serve).
type Body struct {
	JSON        int    `json:"json"`
	JSONCompact int    `json:"jsonCompact"`
	Typed       int    `json:"typed"`
	TypedAs     string `json:"typedAs"`
}

// Side names.
const (
	SideGoofy = "goofy"
	SideCAPD  = "capd"
)

// pair returns the Goofy and CAPD results of one operation and client count.
func (r *Report) pair(op string, clients int) (g, c *Result) {
	for i := range r.Results {
		x := &r.Results[i]
		if x.Op != op || x.Clients != clients {
			continue
		}
		switch x.Side {
		case SideGoofy:
			g = x
		case SideCAPD:
			c = x
		}
	}
	return g, c
}

// caseKey is one operation with one client count.
type caseKey struct {
	op      string
	clients int
}

// cases lists the cases in the order they ran.
func (r *Report) cases() (out []caseKey) {
	for _, x := range r.Results {
		if k := (caseKey{x.Op, x.Clients}); !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out
}

// Write prints the report as Markdown tables: throughput, then the cost per request.
func (r *Report) Write(w io.Writer) {
	wire := "client-go's typed clients' negotiation (protobuf with Goofy, JSON with CAPD)"
	if r.JSON {
		wire = "JSON with both (-json)"
	}
	fmt.Fprintf(w, "bench-api %s: per case and side %s warm-up, then %s measured in %d windows, one side at a time, alternating; %s; load average %s → %s\n",
		r.Started.UTC().Format("2006-01-02 15:04 MST"), r.Warmup, r.Duration, r.Rounds, wire, r.LoadAvg[0], r.LoadAvg[1])
	for _, side := range []string{SideGoofy, SideCAPD} {
		fmt.Fprintf(w, "- %s: %s\n", side, r.Sides[side])
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.Debug)
	fmt.Fprintln(tw, "| op\t clients\t Goofy /s\t CAPD /s\t Goofy/CAPD\t Goofy p50 / p99 ms\t CAPD p50 / p99 ms\t")
	fmt.Fprintln(tw, "|---\t---:\t---:\t---:\t---:\t---:\t---:\t")
	for _, k := range r.cases() {
		g, c := r.pair(k.op, k.clients)
		fmt.Fprintf(tw, "| %s\t %d\t %s\t %s\t %s\t %s\t %s\t\n", opLabel(k.op), k.clients, rate(g), rate(c), ratio(g, c), latency(g), latency(c))
	}
	_ = tw.Flush()
	fmt.Fprintln(w, "\nper request (watch: per event delivered), during the measured windows:")
	fmt.Fprintln(w)
	fmt.Fprintln(tw, "| op\t clients\t server CPU µs Goofy / CAPD\t server allocs Goofy / CAPD\t server bytes Goofy / CAPD\t client CPU µs Goofy / CAPD\t")
	fmt.Fprintln(tw, "|---\t---:\t---:\t---:\t---:\t---:\t")
	for _, k := range r.cases() {
		g, c := r.pair(k.op, k.clients)
		fmt.Fprintf(tw, "| %s\t %d\t %s / %s\t %s / %s\t %s / %s\t %s / %s\t\n", opLabel(k.op), k.clients,
			per(g, serverCPU), per(c, serverCPU), per(g, allocsOf), per(c, allocsOf),
			per(g, bytesOf), per(c, bytesOf), per(g, clientCPU), per(c, clientCPU))
	}
	_ = tw.Flush()
	if len(r.ResponseBytes) > 0 {
		fmt.Fprintln(w, "\nresponse bytes: JSON as sent (compacted); as the typed clients negotiated it")
		for _, op := range RequestOps {
			g, c := r.ResponseBytes[SideGoofy][op.Name], r.ResponseBytes[SideCAPD][op.Name]
			fmt.Fprintf(w, "  %-12s Goofy %6d (%6d); %6d %s  CAPD %6d (%6d); %6d %s\n", op.Name,
				g.JSON, g.JSONCompact, g.Typed, g.TypedAs, c.JSON, c.JSONCompact, c.Typed, c.TypedAs)
		}
	}
	var writes []string
	for _, x := range r.Results {
		if x.Errors > 0 || x.FirstError != "" {
			fmt.Fprintf(w, "\n%s %s ×%d: %d errors; first: %s\n", x.Side, x.Op, x.Clients, x.Errors, x.FirstError)
		}
		if x.WriteRate > 0 {
			writes = append(writes, fmt.Sprintf("%s ×%d watchers %.0f", x.Side, x.Clients, x.WriteRate))
		}
	}
	if len(writes) > 0 {
		fmt.Fprintf(w, "\nwatch writers (%d, merge patches) writes/s: %s\n", r.Writers, strings.Join(writes, ", "))
	}
}

func opLabel(op string) string {
	if op == WatchOp {
		return "watch fan-out (events)"
	}
	return op
}

func rate(x *Result) string {
	if x == nil {
		return "-"
	}
	return fmt.Sprintf("%.0f", x.Rate)
}

func ratio(g, c *Result) string {
	if g == nil || c == nil || c.Rate == 0 {
		return "-"
	}
	return fmt.Sprintf("**%.2f**", g.Rate/c.Rate)
}

func latency(x *Result) string {
	if x == nil {
		return "-"
	}
	return fmt.Sprintf("%.2f / %.2f", float64(x.P50.Microseconds())/1000, float64(x.P99.Microseconds())/1000)
}

// per formats f(x) divided by x's count.
func per(x *Result, f func(*Result) float64) string {
	if x == nil || x.Count == 0 {
		return "-"
	}
	v := f(x) / float64(x.Count)
	if v >= 100 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

func serverCPU(x *Result) float64 { return x.Server.CPUSeconds * 1e6 }

func clientCPU(x *Result) float64 { return x.Client.CPUSeconds * 1e6 }

func allocsOf(x *Result) float64 { return float64(x.Server.MemStats.Mallocs) }

func bytesOf(x *Result) float64 { return float64(x.Server.MemStats.TotalAlloc) }
