# Goofy: a Cluster API infrastructure provider that simulates workload clusters at scale.
SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec
.DEFAULT_GOAL := help

# The release version: VERSION flows into the manager (--version), the image tag, the clusterctl
# repository and metadata.yaml's release series (hack/verify-version.sh checks them).
VERSION ?= $(shell tr -d '[:space:]' < VERSION)
K8S_VERSION ?= v1.36.3
ETCD_VERSION ?= v3.6.14
# Build outputs that are slow to make live outside the repo, keyed by version, so clones share them.
CACHE_DIR ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/goofy
TOOLS_DIR := $(CACHE_DIR)/tools
TOOLS_MOD := hack/tools/go.mod
# Tool binaries are keyed by the version hack/tools/go.mod pins, so clones with different pins never
# share a stale one; a stable name (no version) links to the newest build for scripts and the harness.
tool_version = $(shell awk '$$1 == "$(1)" && $$2 ~ /^v/ { print $$2 }' $(TOOLS_MOD))
CONTROLLER_GEN := $(TOOLS_DIR)/controller-gen-$(call tool_version,sigs.k8s.io/controller-tools)
KUSTOMIZE := $(TOOLS_DIR)/kustomize-$(call tool_version,sigs.k8s.io/kustomize/kustomize/v5)
STATICCHECK := $(TOOLS_DIR)/staticcheck-$(call tool_version,honnef.co/go/tools)
GO_TEST_FLAGS ?=
# How many packages' tests `make test` runs at once. They mostly wait (their envtest API servers,
# simulated phases, kubectl), so go test's default (one per core) left a third of the two cores
# idle: 260-275 s alone at 1.15 cores, 217 s at 1.57 cores with 4 at once (6 Dec 2026).
TEST_PACKAGES_AT_ONCE ?= 4
RELEASE_DIR := out

export K8S_VERSION ETCD_VERSION

# The version the manager reports (--version, its first log line), set with -ldflags in CAPI's
# version package, as CAPI's managers do. Evaluated only by the targets that build the manager
# (not LDFLAGS: C toolchains take that one from the environment).
VERSION_PKG := sigs.k8s.io/cluster-api/version
GIT_COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null)
GIT_TREE_STATE ?= $(shell test -z "$$(git status --porcelain 2>/dev/null)" && echo clean || echo dirty)
BUILD_DATE ?= $(shell date -u +'%Y-%m-%dT%H:%M:%SZ')
VERSION_LDFLAGS = -X $(VERSION_PKG).gitVersion=$(VERSION) -X $(VERSION_PKG).gitCommit=$(GIT_COMMIT) \
	-X $(VERSION_PKG).gitTreeState=$(GIT_TREE_STATE) -X $(VERSION_PKG).buildDate=$(BUILD_DATE) \
	-X $(VERSION_PKG).gitMajor=$(word 1,$(subst ., ,$(VERSION:v%=%))) -X $(VERSION_PKG).gitMinor=$(word 2,$(subst ., ,$(VERSION:v%=%)))
export GOOFY_CACHE_DIR := $(CACHE_DIR)
# One set of compile flags for every build and test (go test, go vet, staticcheck's export data, the
# manager, the CAPI managers in hack/capi-managers.sh), so each package is compiled once: static
# binaries, as upstream ships them (nothing here needs cgo), and -trimpath, so that a package
# compiled in one clone is the same package in another (CI clones afresh; testenv.RepoRoot finds
# the repository without source paths).
export CGO_ENABLED ?= 0
export GOFLAGS := $(strip -trimpath $(filter-out -trimpath,$(GOFLAGS)))

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "\nUsage:\n  make \033[36m<target>\033[0m\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-18s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) } ' $(MAKEFILE_LIST)

##@ Development

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Generate deepcopy code (api/v1alpha1/zz_generated.deepcopy.go).
	$(CONTROLLER_GEN) object:headerFile="hack/boilerplate.go.txt" paths="./api/..."

.PHONY: manifests
manifests: $(CONTROLLER_GEN) ## Generate CRDs (config/crd/bases), RBAC (config/rbac) and the webhook configuration (config/webhook) from markers.
	$(CONTROLLER_GEN) rbac:roleName=manager-role crd webhook paths="{./api/...,./controllers/...,./internal/webhook/...}" output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac output:webhook:artifacts:config=config/webhook

.PHONY: fmt
fmt: ## Run gofmt on the code.
	gofmt -s -w $$(git ls-files '*.go')

# The modules whose packages go vet and the tests cover: Goofy's, and the two test modules of their
# own (the Helm SDK test, CAPI's e2e specs).
GO_MODULES := . test/helm test/capi-e2e

.PHONY: vet
vet: ## Run go vet (every analyzer) on Goofy's module and its two test modules.
	@set -e; for m in $(GO_MODULES); do echo "go -C $$m vet ./..."; go -C $$m vet ./...; done

.PHONY: lint
lint: vet staticcheck ## Run go vet and staticcheck.

.PHONY: staticcheck
staticcheck: $(STATICCHECK) ## Run staticcheck.
	$(STATICCHECK) ./...

.PHONY: verify
verify: generate manifests ## Regenerate and fail if generated files, formatting or any go.mod (root, test/helm, test/capi-e2e) are stale.
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	@git diff --exit-code -- api config || { echo "generated files are stale: run 'make generate manifests' and commit"; exit 1; }
	@test -z "$$(git status --porcelain -- api config)" || { echo "untracked generated files:"; git status --porcelain -- api config; exit 1; }
	@hack/verify-version.sh
	@hack/verify-templates.sh
	@for m in . test/helm test/capi-e2e; do go -C $$m mod tidy -diff >/dev/null || { echo "$$m: go.mod or go.sum is not tidy: run 'go -C $$m mod tidy' and commit"; exit 1; }; done

##@ Build

.PHONY: build
build: ## Build the manager binary into bin/manager (its --version is VERSION and the git commit).
	go build -ldflags "$(VERSION_LDFLAGS)" -o bin/manager .

.PHONY: run-manager
run-manager: ## Run the manager against the cluster of the current kubeconfig (no webhook server: nothing registers it there).
	go run -ldflags "$(VERSION_LDFLAGS)" . --leader-elect=false --webhook-port=0

.PHONY: run
run: ## Quick start: build what is missing, start a local management plane, create a cluster (3 CP + 2 workers; FLAVOR=topology renders it with clusterctl, ClusterClass included), keep running until Ctrl-C.
	@go build -o bin/quickstart ./test/e2e/cmd/quickstart
	@exec bin/quickstart $(if $(FLAVOR),-flavor=$(FLAVOR))

##@ Test

.PHONY: envtest
envtest: ## Build (once, cached) kube-apiserver, kubectl, etcd and etcdctl from Go modules; prints KUBEBUILDER_ASSETS.
	@hack/envtest.sh

# The tiers of tests (docs/development.md, "Tests and the CI budget"): `make test` is the edit loop
# (unit and envtest tests, no process plane), `make e2e` the process-plane end-to-end scenarios,
# `make e2e-upstream` CAPI's own e2e specs; `make test-all` runs the three as .ci/run does.
# Every tier pipes `go test -json` through hack/tools/testreport: result lines, failed tests'
# output, the slowest tests and a closing count; the raw events stay in out/test-report/<tier>.json.
E2E_PKGS := ./test/e2e/...
TESTREPORT := $(TOOLS_DIR)/testreport

.PHONY: test
test: $(TESTREPORT) ## Unit and envtest tests of every package but the process-plane ones (builds the envtest binaries first if needed), and the Helm SDK test (test/helm, its own module).
	@assets="$$(hack/envtest.sh)"; \
	echo "KUBEBUILDER_ASSETS=$$assets"; \
	mkdir -p out/test-report; \
	KUBEBUILDER_ASSETS="$$assets" go test -json -p $(TEST_PACKAGES_AT_ONCE) $(GO_TEST_FLAGS) -timeout 30m $$(go list ./... | grep -v '/test/e2e') \
		| $(TESTREPORT) -name unit -json-out out/test-report/unit.json && \
	go -C test/helm test -json $(GO_TEST_FLAGS) -timeout 10m ./... | $(TESTREPORT) -name helm -json-out out/test-report/helm.json

.PHONY: e2e
e2e: $(TESTREPORT) ## Process-plane end-to-end scenarios against real CAPI (test/e2e/...; builds the plane's controllers, the CAPI managers and clusterctl first, cached; docs/e2e.md).
	@echo "== building the plane's binaries first (cached; the first time takes 15-20 minutes on 2 cores)"
	ENVTEST_BINARIES="kube-apiserver kubectl etcd etcdctl plane-controllers" hack/envtest.sh >/dev/null
	hack/capi-managers.sh >/dev/null
	@mkdir -p out/test-report; rm -f out/e2e/status
	GOOFY_E2E=1 go test -json -count=1 $(GO_TEST_FLAGS) -timeout 60m $(E2E_PKGS) | $(TESTREPORT) -v -name e2e -json-out out/test-report/e2e.json
	@cat out/e2e/status 2>/dev/null || true

.PHONY: test-all
test-all: ## Everything CI runs (.ci/run calls it): go vet, make test beside make e2e, then make e2e-upstream (the CI subset), verify and staticcheck; each step's duration printed.
	@hack/test-all.sh

# Knobs of `make e2e-upstream`: E2E_FOCUS is a Ginkgo focus regexp over the specs' descriptions
# (e.g. E2E_FOCUS="QuickStartSpec default" or E2E_FOCUS=ClusterClassChangesSpec); E2E_SKIP skips the matching ones.
# E2E_LABELS is a Ginkgo label filter: by default the specs labelled goofy-gap (failing on a known gap
# in Goofy's simulation, docs/e2e.md) are left out; E2E_LABELS= runs them too.
E2E_FOCUS ?=
E2E_SKIP ?=
E2E_LABELS ?= !goofy-gap
E2E_UPSTREAM_TIMEOUT ?= 120m

.PHONY: e2e-upstream
e2e-upstream: ## Run CAPI's own e2e specs (sigs.k8s.io/cluster-api/test/e2e) against Goofy on the local plane (test/capi-e2e; E2E_FOCUS, E2E_SKIP, E2E_LABELS).
	@# CAPI's framework leaves a workload cluster's kubeconfig in the temporary directory: one of ours.
	tmp="$$(mktemp -d)"; trap 'rm -rf "$$tmp"' EXIT; \
	TMPDIR="$$tmp" GOOFY_MANAGER=$(CURDIR)/bin/goofy-capi-e2e-manager go -C test/capi-e2e test -count=1 -v $(GO_TEST_FLAGS) -timeout $(E2E_UPSTREAM_TIMEOUT) . -args -ginkgo.v -ginkgo.no-color \
		$(if $(E2E_FOCUS),-ginkgo.focus="$(E2E_FOCUS)") $(if $(E2E_SKIP),-ginkgo.skip="$(E2E_SKIP)") \
		$(if $(E2E_LABELS),-ginkgo.label-filter="$(E2E_LABELS)")

# Knobs of `make bench` (override on the command line, e.g. make bench N=3 PROVIDERS="goofy capd-inmemory").
N ?= 100
CONTROL_PLANE ?= 1
WORKERS ?= 1
PHASE ?= 1s
JITTER ?= 0
BATCH ?= 10
BATCH_INTERVAL ?= 0s
PROVIDERS ?= goofy
BENCH_TIMEOUT ?= 20m
PROFILE ?= 30s
# Client settings, the same for every provider when set (QPS and BURST of the client to the
# management API server, CONCURRENCY of the infrastructure cluster and machine controllers); unset,
# each provider runs with its shipped defaults.
QPS ?=
BURST ?=
CONCURRENCY ?=
# FAULTS=<file>: a fault profile (docs/faults.md, e.g. test/bench/faults/api-errors.yaml) given to a share of Goofy's clusters.
FAULTS ?=
# SHARDS=<n>: Goofy runs as n managers sharing the clusters by --watch-filter (docs/scaling.md).
SHARDS ?=
# MACHINE_POOL=1: Goofy's workers as one MachinePool per cluster (CAPD in-memory has none).
MACHINE_POOL ?=
# STEADY=<duration>: once all are Available, count the provider's requests that long (steady-state cost).
STEADY ?=

.PHONY: bench
bench: ## Scale scenario through real CAPI on a fresh management plane per provider (N, CONTROL_PLANE, WORKERS, PHASE, JITTER, BATCH, BATCH_INTERVAL, PROVIDERS="goofy capd-inmemory", QPS, BURST, CONCURRENCY, FAULTS=<file>, SHARDS=<n>, MACHINE_POOL=1, STEADY=<duration>); report in out/bench/.
	go run ./test/bench/cmd/bench -n $(N) -control-plane $(CONTROL_PLANE) -workers $(WORKERS) -phase $(PHASE) -jitter $(JITTER) \
		-batch $(BATCH) -batch-interval $(BATCH_INTERVAL) -providers "$(PROVIDERS)" -timeout $(BENCH_TIMEOUT) -profile $(PROFILE) \
		$(if $(QPS),-qps $(QPS)) $(if $(BURST),-burst $(BURST)) $(if $(CONCURRENCY),-concurrency $(CONCURRENCY)) $(if $(FAULTS),-faults $(FAULTS)) $(if $(SHARDS),-shards $(SHARDS)) \
		$(if $(MACHINE_POOL),-machine-pool) $(if $(STEADY),-steady $(STEADY))

# Knobs of `make soak` (SOAK_FLAGS for the rest: go run ./test/bench/cmd/soak -h).
SOAK_CLUSTERS ?= 100
SOAK_DURATION ?= 2h
SOAK_RESTART_EVERY ?= 30m
SOAK_FLAGS ?=

.PHONY: soak
soak: ## Long run through real CAPI: SOAK_CLUSTERS clusters for SOAK_DURATION with churn (MachineDeployments scaled, faults on and off, ConfigMaps written), a SIGKILL of the manager every SOAK_RESTART_EVERY in the second half; samples every minute into out/soak/ (CSV, PNG); fails on growth within a segment or a lost ConfigMap.
	go run ./test/bench/cmd/soak -clusters $(SOAK_CLUSTERS) -duration $(SOAK_DURATION) -restart-every $(SOAK_RESTART_EVERY) $(SOAK_FLAGS)

# bench-mux's fleet: N clusters when N is given on the command line (N's default, 100, is `make bench`'s).
BENCH_MUX_N = $(if $(filter command line environment,$(origin N)),$(N),1000)
MACHINES ?= 6

.PHONY: bench-mux
bench-mux: ## Mux-only scale benchmark: N=1000 clusters x MACHINES=6 (3 control-plane + 3 workers; under 6: 1 + the rest) in one process under CAPI-like load and KCP-style health checks (PODS=30: that many running pods per node; SETTLE=265: memory again once the watch history (75 s) expired, the runtime's periodic collection (2 min) found it and the manager's trimmer returned it).
	GOOFY_BENCH_CLUSTERS=$(BENCH_MUX_N) GOOFY_BENCH_MACHINES=$(MACHINES) GOOFY_BENCH_PODS=$(PODS) GOOFY_BENCH_SETTLE_SECONDS=$(SETTLE) go test -run '^$$' -bench BenchmarkMuxScale -benchtime 1x -timeout 60m ./internal/mux/

.PHONY: bench-memory
bench-memory: ## Per-cluster memory audit: live heap per idle cluster (1 CP + 2 workers, add-on pods running, durable state), again once the watch history window (75 s) passed, and per added worker, by package (CLUSTERS=100).
	GOOFY_BENCH_CLUSTERS=$(CLUSTERS) go test -run '^$$' -bench BenchmarkClusterMemory -benchtime 1x -v -timeout 15m ./internal/mux/

.PHONY: bench-go
bench-go: ## Run the Go micro-benchmarks of the store, API server and mux.
	go test -run '^$$' -skip BenchmarkMuxScale -bench . -benchmem ./internal/...

# Flags of `make bench-api`'s driver, e.g. BENCH_API_FLAGS="-json -cpuprofile" (also -goofy-memory, -duration,
# -rounds, -warmup, -clients, -ops: `go run ./test/benchapi/cmd/bench-api -h`).
BENCH_API_FLAGS ?=

.PHONY: bench-api
bench-api: ## Fake API throughput: one Goofy and one CAPD in-memory workload cluster, client-go over TLS, one side at a time (GET Node, LIST pods, GET 404, watch fan-out; 8 and 1 clients; BENCH_API_FLAGS); report in out/bench-api/.
	@capd="$$(test/benchapi/build-capdserver.sh)"; \
	go build -o bin/bench-api ./test/benchapi/cmd/bench-api; \
	go build -o bin/bench-api-goofyserver ./test/benchapi/cmd/goofyserver; \
	bin/bench-api -goofy-server bin/bench-api-goofyserver -capd-server "$$capd" -out out/bench-api $(BENCH_API_FLAGS)

##@ Release

IMG ?= localhost/goofy-capi/cluster-api-provider-goofy:$(VERSION)
IMAGE_SOURCE ?= https://github.com/goofy-capi/cluster-api-provider-goofy
IMAGE_TAR ?= $(RELEASE_DIR)/image/goofy-manager-$(VERSION).tar

.PHONY: image
image: ## Build the manager image as a Docker archive without Docker ($(IMAGE_TAR); `docker load -i` or `podman load -i` it), with OCI labels. `docker build .` uses the Dockerfile.
	CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags "-s -w $(VERSION_LDFLAGS)" -o bin/manager-linux .
	go -C hack/tools run ./imagebuild --binary $(CURDIR)/bin/manager-linux --tag $(IMG) --out $(CURDIR)/$(IMAGE_TAR) \
		--label org.opencontainers.image.source=$(IMAGE_SOURCE) --label org.opencontainers.image.version=$(VERSION) \
		--label org.opencontainers.image.revision=$(GIT_COMMIT) --label org.opencontainers.image.licenses=Apache-2.0

.PHONY: set-manifest-image
set-manifest-image: $(KUSTOMIZE) ## Point config/manager (and so infrastructure-components.yaml) at IMG (default: the image of VERSION).
	cd config/manager && $(KUSTOMIZE) edit set image controller=$(IMG)

.PHONY: release-manifests
release-manifests: $(KUSTOMIZE) ## Build a clusterctl local repository under out/infrastructure-goofy/$(VERSION).
	@mkdir -p $(RELEASE_DIR)/infrastructure-goofy/$(VERSION)
	$(KUSTOMIZE) build config/default > $(RELEASE_DIR)/infrastructure-goofy/$(VERSION)/infrastructure-components.yaml
	cp metadata.yaml $(RELEASE_DIR)/infrastructure-goofy/$(VERSION)/metadata.yaml
	cp templates/cluster-template*.yaml templates/clusterclass-*.yaml $(RELEASE_DIR)/infrastructure-goofy/$(VERSION)/
	@echo "clusterctl local repository: $(RELEASE_DIR)/infrastructure-goofy/$(VERSION)"

##@ Tools (pinned in hack/tools/go.mod, built from Go modules into $(TOOLS_DIR))

.PHONY: tools
tools: $(CONTROLLER_GEN) $(KUSTOMIZE) $(STATICCHECK) $(TESTREPORT) ## Build every tool (cached); make test-all does it first, so that its concurrent steps never build one at once.

$(CONTROLLER_GEN):
	go -C hack/tools build -o $@ sigs.k8s.io/controller-tools/cmd/controller-gen
	ln -sf $(notdir $@) $(TOOLS_DIR)/controller-gen

$(KUSTOMIZE):
	go -C hack/tools build -o $@ sigs.k8s.io/kustomize/kustomize/v5
	ln -sf $(notdir $@) $(TOOLS_DIR)/kustomize

$(TESTREPORT): hack/tools/testreport/main.go
	go -C hack/tools build -o $@ ./testreport

$(STATICCHECK):
	go -C hack/tools build -o $@ honnef.co/go/tools/cmd/staticcheck
	ln -sf $(notdir $@) $(TOOLS_DIR)/staticcheck
