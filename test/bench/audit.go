package bench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// The management kube-apiserver writes one audit event per request (metadata only, no bodies), so
// requests can be attributed to the process that made them: kube-apiserver's own
// apiserver_request_total metric has no client label. Every process of the plane authenticates as
// the same administrator, so the client is told apart by its User-Agent, whose first token is the
// binary name (client-go's default and CAPI's DefaultClusterAPIUserAgent) or, for Goofy, the
// "goofy-manager" the manager sets.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: None
  nonResourceURLs: ["/healthz*", "/readyz*", "/livez*", "/metrics"]
- level: Metadata
`

// bodiesRule logs request bodies of writes to infrastructure kinds and to CAPI Machines (spec and
// status): with it the log shows what each provider patch changed, and what CAPI rewrote in a
// Machine in answer (for analysis; it makes the log larger).
const bodiesRule = `- level: Request
  verbs: ["create", "update", "patch"]
  resources:
  - group: infrastructure.cluster.x-k8s.io
  - group: cluster.x-k8s.io
    resources: ["machines", "machines/status"]
`

// AuditFlags writes the policy into dir and returns the kube-apiserver flags that enable a JSON
// audit log at dir/audit.log. With bodies, writes to infrastructure kinds are logged with their
// request bodies.
func AuditFlags(dir string, bodies bool) (map[string]string, string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, "", err
	}
	policy := filepath.Join(dir, "audit-policy.yaml")
	content := auditPolicy
	if bodies {
		content = strings.Replace(content, "- level: Metadata\n", bodiesRule+"- level: Metadata\n", 1)
	}
	if err := os.WriteFile(policy, []byte(content), 0o644); err != nil {
		return nil, "", err
	}
	log := filepath.Join(dir, "audit.log")
	return map[string]string{
		"audit-policy-file":   policy,
		"audit-log-path":      log,
		"audit-log-format":    "json",
		"audit-log-maxsize":   "0", // never rotate: the whole run is counted
		"audit-log-maxbackup": "0",
		// Batching keeps audit writes off the request path, so they disturb the measurement less.
		"audit-log-mode": "batch",
	}, log, nil
}

// auditEvent is the part of an audit.k8s.io/v1 Event the benchmark reads.
type auditEvent struct {
	AuditID   string `json:"auditID"`
	Stage     string `json:"stage"`
	Verb      string `json:"verb"`
	UserAgent string `json:"userAgent"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		APIGroup    string `json:"apiGroup"`
	} `json:"objectRef"`
	RequestReceivedTimestamp string `json:"requestReceivedTimestamp"`
}

// RequestCounts are requests to the management API server by client.
type RequestCounts struct {
	// Total requests per client (User-Agent's binary name).
	ByClient map[string]int `json:"byClient"`
	// ByVerbResource maps client -> "verb resource[/subresource]" -> requests.
	ByVerbResource map[string]map[string]int `json:"byVerbResource"`
}

// ClientName reduces a User-Agent to the binary name before the first '/' or space.
func ClientName(userAgent string) string {
	if i := strings.IndexAny(userAgent, "/ "); i >= 0 {
		userAgent = userAgent[:i]
	}
	if userAgent == "" {
		return "unknown"
	}
	return userAgent
}

// CountRequests reads an audit log. A long-running request (watch) logs ResponseStarted and later
// ResponseComplete under the same audit ID; it counts once. Only requests received in
// [since, until) count (AuditTime strings; empty means unbounded), so plane start-up and tear-down
// are left out.
func CountRequests(r io.Reader, since, until string) (RequestCounts, error) {
	rc := RequestCounts{ByClient: map[string]int{}, ByVerbResource: map[string]map[string]int{}}
	seen := map[string]struct{}{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	line := 0
	for sc.Scan() {
		line++
		var ev auditEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return rc, fmt.Errorf("audit log line %d: %w", line, err)
		}
		if ev.Stage != "ResponseComplete" && ev.Stage != "ResponseStarted" && ev.Stage != "Panic" {
			continue
		}
		if _, dup := seen[ev.AuditID]; dup {
			continue
		}
		seen[ev.AuditID] = struct{}{}
		// RFC 3339 timestamps in UTC with fixed precision compare as strings.
		if since != "" && ev.RequestReceivedTimestamp < since || until != "" && ev.RequestReceivedTimestamp >= until {
			continue
		}
		client := ClientName(ev.UserAgent)
		key := ev.Verb
		if ev.ObjectRef != nil {
			res := ev.ObjectRef.Resource
			if ev.ObjectRef.Subresource != "" {
				res += "/" + ev.ObjectRef.Subresource
			}
			key += " " + res
		}
		rc.ByClient[client]++
		if rc.ByVerbResource[client] == nil {
			rc.ByVerbResource[client] = map[string]int{}
		}
		rc.ByVerbResource[client][key]++
	}
	return rc, sc.Err()
}

// AuditTime formats t like the audit log's requestReceivedTimestamp, for CountRequests' since.
func AuditTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000000Z") }

// sortedKeys returns the keys of m, largest value first.
func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	return keys
}
