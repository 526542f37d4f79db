package harness

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/kubernetes"
)

// RequestCounts are the management kube-apiserver's requests so far, by "verb resource code"
// (resource with its subresource, e.g. "PATCH machines/status 409"), from its
// apiserver_request_total counter. Two samples' difference says what a scenario asked of it: a
// slow round shows whether CAPI's optimistic-lock conflicts (409) or plain volume dominated.
type RequestCounts map[string]float64

// APIRequestCounts samples the management kube-apiserver's request counter.
func (p *Plane) APIRequestCounts(ctx context.Context) (RequestCounts, error) {
	cs, err := kubernetes.NewForConfig(p.Config)
	if err != nil {
		return nil, err
	}
	body, err := cs.RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the management kube-apiserver's /metrics: %w", err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	counts := RequestCounts{}
	for _, m := range fams["apiserver_request_total"].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		resource := labels["resource"]
		if resource == "" {
			continue // non-resource paths (/healthz, /metrics, discovery)
		}
		if sub := labels["subresource"]; sub != "" {
			resource += "/" + sub
		}
		counts[labels["verb"]+" "+resource+" "+labels["code"]] += m.GetCounter().GetValue()
	}
	return counts, nil
}

// Since summarises the requests made after earlier was sampled: the total, how many were answered
// 409 Conflict, and the top kinds, e.g. "5431 requests, 412 answered 409; most: PATCH
// machines/status 200 ×1432, ...". The one-minute load average of the machine follows, since a
// loaded machine slows the whole plane.
func (c RequestCounts) Since(earlier RequestCounts, top int) string {
	type kind struct {
		key string
		n   float64
	}
	var kinds []kind
	var total, conflicts float64
	for k, v := range c {
		d := v - earlier[k]
		if d <= 0 {
			continue
		}
		kinds = append(kinds, kind{k, d})
		total += d
		if strings.HasSuffix(k, " 409") {
			conflicts += d
		}
	}
	sort.Slice(kinds, func(i, j int) bool {
		if kinds[i].n != kinds[j].n {
			return kinds[i].n > kinds[j].n
		}
		return kinds[i].key < kinds[j].key
	})
	var most []string
	for _, k := range kinds[:min(top, len(kinds))] {
		most = append(most, fmt.Sprintf("%s ×%.0f", k.key, k.n))
	}
	s := fmt.Sprintf("%.0f requests, %.0f answered 409; most: %s", total, conflicts, strings.Join(most, ", "))
	if load, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(load)); len(f) > 0 {
			s += "; load average " + f[0]
		}
	}
	return s
}
