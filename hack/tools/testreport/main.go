// Command testreport reads the event stream of `go test -json` on stdin and prints what a person
// reads in a CI log: each package's result line, the whole output of every test that failed (or,
// with -v, all output as it comes), then a closing report of how many tests passed, failed and
// were skipped and which tests and packages took longest. It keeps the stream in -json-out for
// later study. Its exit code is go test's business: run it behind `set -o pipefail`.
package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
)

// event is one line of `go test -json` (cmd/test2json's TestEvent).
type event struct {
	Time    time.Time
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

type result struct {
	name    string
	elapsed float64
}

func main() {
	name := flag.String("name", "tests", "what the report calls this run (e.g. unit, e2e)")
	verbose := flag.Bool("v", false, "print every output line as it comes, not only those of failed tests")
	slowest := flag.Int("slowest", 15, "how many of the slowest tests and packages to list")
	jsonOut := flag.String("json-out", "", "file to keep the raw event stream in")
	flag.Parse()

	var raw io.Writer = io.Discard
	if *jsonOut != "" {
		f, err := os.Create(*jsonOut)
		if err != nil {
			fmt.Fprintln(os.Stderr, "testreport:", err)
			os.Exit(2)
		}
		defer f.Close()
		raw = f
	}

	var (
		passed, failed, skipped int
		tests, packages         []result
		failedNames             []string
		// pending holds a running test's output until it ends: printed only if it fails.
		pending = map[string]*strings.Builder{}
		out     = bufio.NewWriter(os.Stdout)
	)
	scanner := bufio.NewScanner(os.Stdin)
	scanner.Buffer(make([]byte, 1<<20), 16<<20)
	for scanner.Scan() {
		line := scanner.Bytes()
		fmt.Fprintf(raw, "%s\n", line)
		var e event
		if err := json.Unmarshal(line, &e); err != nil || e.Action == "" {
			// Not an event (a build failure printed by go test itself): show it as it is.
			fmt.Fprintf(out, "%s\n", line)
			out.Flush()
			continue
		}
		key := e.Package + " " + e.Test
		switch e.Action {
		case "output":
			switch {
			case *verbose || e.Test == "":
				out.WriteString(e.Output)
			default:
				b := pending[key]
				if b == nil {
					b = &strings.Builder{}
					pending[key] = b
				}
				b.WriteString(e.Output)
			}
		case "pass", "fail", "skip":
			if e.Test == "" {
				packages = append(packages, result{e.Package, e.Elapsed})
				break
			}
			tests = append(tests, result{e.Package + "." + e.Test, e.Elapsed})
			switch e.Action {
			case "pass":
				passed++
			case "skip":
				skipped++
			case "fail":
				failed++
				failedNames = append(failedNames, e.Package+"."+e.Test)
				if b := pending[key]; b != nil && !*verbose {
					out.WriteString(b.String())
				}
			}
			delete(pending, key)
		}
		out.Flush()
	}

	byElapsed := func(a, b result) int { return cmp.Compare(b.elapsed, a.elapsed) }
	slices.SortStableFunc(tests, byElapsed)
	slices.SortStableFunc(packages, byElapsed)
	fmt.Fprintf(out, "\n== %s: the %d slowest tests\n", *name, min(*slowest, len(tests)))
	for _, r := range tests[:min(*slowest, len(tests))] {
		fmt.Fprintf(out, "%8.1fs  %s\n", r.elapsed, r.name)
	}
	fmt.Fprintf(out, "== %s: the %d slowest packages\n", *name, min(*slowest, len(packages)))
	for _, r := range packages[:min(*slowest, len(packages))] {
		fmt.Fprintf(out, "%8.1fs  %s\n", r.elapsed, r.name)
	}
	for _, n := range failedNames {
		fmt.Fprintf(out, "FAILED: %s\n", n)
	}
	// Counts tests and subtests alike, as go test -json reports them.
	fmt.Fprintf(out, "%s: %d passed, %d failed, %d skipped\n", *name, passed, failed, skipped)
	out.Flush()
	if err := scanner.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(2)
	}
}
