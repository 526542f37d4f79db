package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"k8s.io/client-go/rest"

	"github.com/goofy-capi/cluster-api-provider-goofy/test/benchapi"
)

// side is one of the two servers, as the driver reaches it.
type side struct {
	name     string
	config   *rest.Config
	stats    string // its expvar/pprof endpoint; empty when the driver did not start it
	server   *benchapi.Server
	describe string
}

// startSide starts the server program of side name (unless its kubeconfig was given) and waits
// until it serves.
func startSide(ctx context.Context, name string, o options, dir, seed string) (*side, error) {
	s := &side{name: name}
	kubeconfig := map[string]string{benchapi.SideGoofy: o.goofyKubeconfig, benchapi.SideCAPD: o.capdKubeconfig}[name]
	if kubeconfig != "" {
		s.describe = "already running, " + kubeconfig
	} else {
		kubeconfig = filepath.Join(dir, name+".kubeconfig")
		var bin string
		var args []string
		var ports []int
		switch name {
		case benchapi.SideGoofy:
			bin, ports = o.goofyServer, []int{o.goofyPort, o.goofyPort + 1}
			state := filepath.Join(dir, "goofy-state")
			if o.memory {
				state = ""
			}
			s.stats = "127.0.0.1:" + strconv.Itoa(o.goofyPort+1)
			args = []string{"-port", strconv.Itoa(o.goofyPort), "-stats", s.stats, "-state-dir", state}
			s.describe = fmt.Sprintf("%s: internal/mux WorkloadClustersMux in its own process, TLS on 127.0.0.1:%d, state dir %q (empty: memory only)", bin, o.goofyPort, state)
		case benchapi.SideCAPD:
			bin, ports = o.capdServer, []int{o.capdPort, o.capdPort + 1, o.capdPort + 2}
			s.stats = "127.0.0.1:" + strconv.Itoa(o.capdPort+2)
			args = []string{"-port", strconv.Itoa(o.capdPort), "-debug-port", strconv.Itoa(o.capdPort + 1), "-stats", s.stats, "-apiserver-pod", benchapi.APIServerPod()}
			s.describe = fmt.Sprintf("%s: CAPI's test/infrastructure/inmemory WorkloadClustersMux and in-memory runtime in its own process, TLS on :%d", bin, o.capdPort)
		}
		if bin == "" {
			return nil, fmt.Errorf("%s: give -%s-server or -%s-kubeconfig", name, name, name)
		}
		for _, p := range ports {
			ln, err := net.Listen("tcp", ":"+strconv.Itoa(p))
			if err != nil {
				return nil, fmt.Errorf("%s: port %d is taken (a previous run still alive?): %w", name, p, err)
			}
			_ = ln.Close()
		}
		var err error
		args = append(args, "-seed", seed, "-kubeconfig-out", kubeconfig)
		if s.server, err = benchapi.StartServer(ctx, bin, args, filepath.Join(dir, name+".log"), kubeconfig); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	var err error
	if s.config, err = benchapi.RESTConfig(kubeconfig, o.json); err != nil {
		s.server.Stop()
		return nil, err
	}
	return s, nil
}

// responseSizes fetches every request operation once as JSON and once as the benchmark's clients
// ask for it, and returns the body sizes and the negotiated content type.
func (s *side) responseSizes(ctx context.Context) (map[string]benchapi.Body, error) {
	hc, err := rest.HTTPClientFor(s.config)
	if err != nil {
		return nil, err
	}
	defer hc.CloseIdleConnections()
	fetch := func(path, accept string) ([]byte, string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.config.Host+path, nil)
		if err != nil {
			return nil, "", err
		}
		req.Header.Set("Accept", accept)
		resp, err := hc.Do(req)
		if err != nil {
			return nil, "", err
		}
		defer func() { _ = resp.Body.Close() }()
		b, err := io.ReadAll(resp.Body)
		return b, resp.Header.Get("Content-Type"), err
	}
	accept := benchapi.TypedAccept
	if s.config.ContentType != "" {
		accept = s.config.ContentType // -json
	}
	out := map[string]benchapi.Body{}
	for _, op := range benchapi.RequestOps {
		js, _, err := fetch(op.Path, "application/json")
		if err != nil {
			return nil, fmt.Errorf("%s: %w", op.Name, err)
		}
		typed, as, err := fetch(op.Path, accept)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", op.Name, err)
		}
		var compact bytes.Buffer
		_ = json.Compact(&compact, js)
		out[op.Name] = benchapi.Body{JSON: len(js), JSONCompact: compact.Len(), Typed: len(typed), TypedAs: as}
	}
	return out, nil
}

// probe samples the server program, or nil when the driver did not start it.
func (s *side) probe() benchapi.Probe {
	if s.stats == "" {
		return nil
	}
	return func(ctx context.Context) (benchapi.Stats, error) {
		return benchapi.FetchStats(ctx, s.stats, s.server.Pid())
	}
}

// profile captures the server's CPU profile for d into path, in the background.
func (s *side) profile(ctx context.Context, d time.Duration, path string) <-chan error {
	done := make(chan error, 1)
	go func() {
		url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", s.stats, int(math.Ceil(d.Seconds())))
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			done <- err
			return
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- err
			return
		}
		defer func() { _ = resp.Body.Close() }()
		if resp.StatusCode != http.StatusOK {
			done <- errors.New(resp.Status)
			return
		}
		f, err := os.Create(path)
		if err != nil {
			done <- err
			return
		}
		_, err = io.Copy(f, resp.Body)
		done <- errors.Join(err, f.Close())
	}()
	return done
}
