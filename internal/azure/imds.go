package azure

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

const (
	// DefaultIMDSEndpoint is the link-local address of the Azure Instance Metadata Service.
	DefaultIMDSEndpoint = "http://169.254.169.254"
	// EnvIMDSEndpoint overrides the IMDS base URL (tests, proxies in front of IMDS, emulators).
	EnvIMDSEndpoint = "GOOFY_AZURE_IMDS_ENDPOINT"

	imdsInstancePath = "/metadata/instance"
	imdsAPIVersion   = "2021-02-01"
	// imdsMaxBody bounds how much of a response we read; the instance document is a few KiB.
	imdsMaxBody = 1 << 20
)

// IMDSClient reads the instance document from the Azure Instance Metadata Service and caches it.
// It is safe for concurrent use; concurrent callers share one request.
type IMDSClient struct {
	endpoint   string
	httpClient *http.Client
	ttl        time.Duration
	retry      IMDSRetry
	now        func() time.Time

	// sem is a one-slot semaphore guarding the cache and the fetch; a channel (not a mutex) so a
	// waiting caller can give up when its context ends.
	sem     chan struct{}
	cached  *imdsDocument
	expires time.Time
}

// IMDSRetry says how often and how fast to retry IMDS. Microsoft's guidance: retry 404 and 410
// (IMDS not ready yet, up to 70 s after boot), 429 (throttled, 5 requests/s) and 5xx with
// exponential backoff. Transport errors (IMDS not answering yet) are retried as well.
type IMDSRetry struct {
	// MaxAttempts is the number of requests in total, at least 1.
	MaxAttempts int
	// InitialDelay is the wait after the first failure; it doubles after each further one.
	InitialDelay time.Duration
	// MaxDelay caps a single wait (and a 429's Retry-After).
	MaxDelay time.Duration
	// AttemptTimeout bounds one request.
	AttemptTimeout time.Duration
}

// DefaultIMDSRetry waits 0.5 s, 1 s, 2 s, 4 s, 8 s, 8 s, ... for up to 12 requests, which covers
// the 70 s Microsoft names for 410.
var DefaultIMDSRetry = IMDSRetry{MaxAttempts: 12, InitialDelay: 500 * time.Millisecond, MaxDelay: 8 * time.Second, AttemptTimeout: 5 * time.Second}

// IMDSOption configures an IMDSClient.
type IMDSOption func(client *IMDSClient)

// WithIMDSEndpoint sets the IMDS base URL (scheme and host, e.g. "http://127.0.0.1:8080"); it wins
// over GOOFY_AZURE_IMDS_ENDPOINT.
func WithIMDSEndpoint(endpoint string) IMDSOption {
	return func(c *IMDSClient) { c.endpoint = strings.TrimSuffix(endpoint, "/") }
}

// WithIMDSHTTPClient replaces the HTTP client. The default one never uses a proxy, as IMDS demands;
// a replacement should not either.
func WithIMDSHTTPClient(hc *http.Client) IMDSOption {
	return func(c *IMDSClient) { c.httpClient = hc }
}

// WithIMDSCacheTTL sets how long a fetched document is reused (default one minute; 0 disables caching).
func WithIMDSCacheTTL(ttl time.Duration) IMDSOption {
	return func(c *IMDSClient) { c.ttl = ttl }
}

// WithIMDSRetry replaces the retry settings; zero fields keep their defaults.
func WithIMDSRetry(r IMDSRetry) IMDSOption {
	return func(c *IMDSClient) {
		if r.MaxAttempts > 0 {
			c.retry.MaxAttempts = r.MaxAttempts
		}
		if r.InitialDelay > 0 {
			c.retry.InitialDelay = r.InitialDelay
		}
		if r.MaxDelay > 0 {
			c.retry.MaxDelay = r.MaxDelay
		}
		if r.AttemptTimeout > 0 {
			c.retry.AttemptTimeout = r.AttemptTimeout
		}
	}
}

// NewIMDSClient returns a client for the IMDS at GOOFY_AZURE_IMDS_ENDPOINT or, if that is unset,
// at 169.254.169.254.
func NewIMDSClient(opts ...IMDSOption) *IMDSClient {
	endpoint := DefaultIMDSEndpoint
	if env := os.Getenv(EnvIMDSEndpoint); env != "" {
		endpoint = strings.TrimSuffix(env, "/")
	}
	c := &IMDSClient{
		endpoint: endpoint,
		ttl:      time.Minute,
		retry:    DefaultIMDSRetry,
		now:      time.Now,
		sem:      make(chan struct{}, 1),
	}
	for _, o := range opts {
		o(c)
	}
	if c.httpClient == nil {
		// IMDS must be reached directly: a proxy would answer for itself, not for this VM.
		transport := http.DefaultTransport.(*http.Transport).Clone()
		transport.Proxy = nil
		c.httpClient = &http.Client{Transport: transport}
	}
	return c
}

// imdsDocument is the part of the instance document we read.
type imdsDocument struct {
	Compute *struct {
		AzEnvironment     string `json:"azEnvironment"`
		Location          string `json:"location"`
		Name              string `json:"name"`
		ResourceGroupName string `json:"resourceGroupName"`
		ResourceID        string `json:"resourceId"`
		SubscriptionID    string `json:"subscriptionId"`
		VMScaleSetName    string `json:"vmScaleSetName"`
		Zone              string `json:"zone"`
		OSProfile         struct {
			ComputerName string `json:"computerName"`
		} `json:"osProfile"`
		TagsList []struct {
			Name  string `json:"name"`
			Value string `json:"value"`
		} `json:"tagsList"`
	} `json:"compute"`
	Network *struct {
		Interface []struct {
			IPv4 struct {
				IPAddress []struct {
					PrivateIPAddress string `json:"privateIpAddress"`
				} `json:"ipAddress"`
			} `json:"ipv4"`
		} `json:"interface"`
	} `json:"network"`
}

// Tags returns the instance's tags (for a uniform scale-set VM, the scale set's tags), keyed as
// written in Azure. An instance without tags yields an empty map.
func (c *IMDSClient) Tags(ctx context.Context) (map[string]string, error) {
	doc, err := c.compute(ctx)
	if err != nil {
		return nil, err
	}
	tags := make(map[string]string, len(doc.Compute.TagsList))
	for _, t := range doc.Compute.TagsList {
		tags[t.Name] = t.Value
	}
	return tags, nil
}

// ProviderID returns the instance's Kubernetes provider ID (see ProviderIDFromResourceID).
func (c *IMDSClient) ProviderID(ctx context.Context) (string, error) {
	id, err := c.field(ctx, "compute.resourceId", func(d *imdsDocument) string { return d.Compute.ResourceID })
	if err != nil {
		return "", err
	}
	return ProviderIDFromResourceID(id)
}

// Name returns the instance's host name: the OS computer name (lower-cased, as the node is named),
// or the VM resource name when the OS profile is not reported.
func (c *IMDSClient) Name(ctx context.Context) (string, error) {
	name, err := c.field(ctx, "compute.osProfile.computerName", func(d *imdsDocument) string {
		if d.Compute.OSProfile.ComputerName != "" {
			return d.Compute.OSProfile.ComputerName
		}
		return d.Compute.Name
	})
	return strings.ToLower(name), err
}

// SubscriptionID returns the subscription the instance runs in.
func (c *IMDSClient) SubscriptionID(ctx context.Context) (string, error) {
	return c.field(ctx, "compute.subscriptionId", func(d *imdsDocument) string { return d.Compute.SubscriptionID })
}

// ResourceGroup returns the instance's resource group, as IMDS spells it.
func (c *IMDSClient) ResourceGroup(ctx context.Context) (string, error) {
	return c.field(ctx, "compute.resourceGroupName", func(d *imdsDocument) string { return d.Compute.ResourceGroupName })
}

// Location returns the instance's Azure region.
func (c *IMDSClient) Location(ctx context.Context) (string, error) {
	return c.field(ctx, "compute.location", func(d *imdsDocument) string { return d.Compute.Location })
}

// Zone returns the instance's availability zone; empty (and no error) for a regional instance.
func (c *IMDSClient) Zone(ctx context.Context) (string, error) {
	doc, err := c.compute(ctx)
	if err != nil {
		return "", err
	}
	return doc.Compute.Zone, nil
}

// AzEnvironment returns the cloud the instance runs in (e.g. "AzurePublicCloud"); empty if IMDS
// does not say.
func (c *IMDSClient) AzEnvironment(ctx context.Context) (string, error) {
	doc, err := c.compute(ctx)
	if err != nil {
		return "", err
	}
	return doc.Compute.AzEnvironment, nil
}

// PrivateIPs returns the private IPv4 addresses of the instance's first network interface, the
// primary one first.
func (c *IMDSClient) PrivateIPs(ctx context.Context) ([]string, error) {
	doc, err := c.document(ctx)
	if err != nil {
		return nil, err
	}
	if doc.Network == nil || len(doc.Network.Interface) == 0 {
		return nil, fmt.Errorf("IMDS: the instance document has no network interface")
	}
	var ips []string
	for _, a := range doc.Network.Interface[0].IPv4.IPAddress {
		if a.PrivateIPAddress != "" {
			ips = append(ips, a.PrivateIPAddress)
		}
	}
	if len(ips) == 0 {
		return nil, fmt.Errorf("IMDS: the first network interface has no private IPv4 address")
	}
	return ips, nil
}

// field returns one required compute field, or an error naming it when it is empty.
func (c *IMDSClient) field(ctx context.Context, name string, get func(*imdsDocument) string) (string, error) {
	doc, err := c.compute(ctx)
	if err != nil {
		return "", err
	}
	v := get(doc)
	if v == "" {
		return "", fmt.Errorf("IMDS: the instance document has no %s", name)
	}
	return v, nil
}

// compute returns the document after checking that it has a compute section.
func (c *IMDSClient) compute(ctx context.Context) (*imdsDocument, error) {
	doc, err := c.document(ctx)
	if err != nil {
		return nil, err
	}
	if doc.Compute == nil {
		return nil, fmt.Errorf("IMDS: the instance document has no compute section")
	}
	return doc, nil
}

// document returns the cached document or fetches a new one.
func (c *IMDSClient) document(ctx context.Context) (*imdsDocument, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("IMDS: %w", err)
	}
	select {
	case c.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("IMDS: %w", ctx.Err())
	}
	defer func() { <-c.sem }()

	if c.cached != nil && c.now().Before(c.expires) {
		return c.cached, nil
	}
	doc, err := c.fetch(ctx)
	if err != nil {
		return nil, err
	}
	c.cached, c.expires = doc, c.now().Add(c.ttl)
	return doc, nil
}

// fetch requests the document, retrying transient failures with exponential backoff.
func (c *IMDSClient) fetch(ctx context.Context) (*imdsDocument, error) {
	delay := c.retry.InitialDelay
	for attempt := 1; ; attempt++ {
		doc, retryable, retryAfter, err := c.fetchOnce(ctx)
		switch {
		case err == nil:
			return doc, nil
		case ctx.Err() != nil:
			return nil, fmt.Errorf("IMDS: %w (last error: %v)", ctx.Err(), err)
		case !retryable:
			return nil, err
		case attempt >= c.retry.MaxAttempts:
			return nil, fmt.Errorf("%w (gave up after %d attempts)", err, attempt)
		}
		timer := time.NewTimer(min(max(delay, retryAfter), c.retry.MaxDelay))
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return nil, fmt.Errorf("IMDS: %w after %d attempt(s) (last error: %v)", ctx.Err(), attempt, err)
		}
		delay = min(2*delay, c.retry.MaxDelay)
	}
}

// fetchOnce makes one request. On failure it says whether a retry may help and returns the
// server's Retry-After, if any.
func (c *IMDSClient) fetchOnce(ctx context.Context) (doc *imdsDocument, retryable bool, after time.Duration, err error) {
	ctx, cancel := context.WithTimeout(ctx, c.retry.AttemptTimeout)
	defer cancel()
	url := c.endpoint + imdsInstancePath + "?api-version=" + imdsAPIVersion + "&format=json"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, false, 0, fmt.Errorf("IMDS: bad endpoint %q: %w", c.endpoint, err)
	}
	req.Header.Set("Metadata", "true")
	resp, err := c.httpClient.Do(req)
	if err != nil {
		// IMDS not answering (yet): connection refused, reset or timed out.
		return nil, true, 0, fmt.Errorf("IMDS: request to %s failed: %w", c.endpoint, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, imdsMaxBody))
	if err != nil {
		return nil, true, 0, fmt.Errorf("IMDS: reading the answer of %s: %w", c.endpoint, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, imdsRetryable(resp.StatusCode), retryAfter(resp.Header.Get("Retry-After")),
			fmt.Errorf("IMDS: %s answered %d %s: %s", c.endpoint, resp.StatusCode, http.StatusText(resp.StatusCode), snippet(body))
	}
	doc = &imdsDocument{}
	if err := json.Unmarshal(body, doc); err != nil {
		return nil, false, 0, fmt.Errorf("IMDS: the answer of %s is not an instance document: %v: %s", c.endpoint, err, snippet(body))
	}
	return doc, false, 0, nil
}

// imdsRetryable lists the statuses Microsoft's IMDS guidance says to retry.
func imdsRetryable(code int) bool {
	return code == http.StatusNotFound || code == http.StatusGone || code == http.StatusTooManyRequests || code >= 500
}

// retryAfter parses a Retry-After header given in seconds; anything else counts as absent.
func retryAfter(v string) time.Duration {
	secs, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || secs <= 0 {
		return 0
	}
	return time.Duration(secs) * time.Second
}

// snippet shortens a response body for an error message.
func snippet(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return strconv.Quote(s)
}
