#!/usr/bin/env bash
# Builds CAPD (Cluster API's Docker infrastructure provider, whose DevCluster/DevMachine kinds have
# the in-memory backend the benchmark compares against) from the sigs.k8s.io/cluster-api/test Go
# module, because release binaries cannot be downloaded here. Cached per version under the user
# cache dir. The last line printed on stdout is the directory holding the binary and the module
# source (with --module: the directory of the Go module it is built in); progress goes to stderr.
set -euo pipefail

CAPI_VERSION="${CAPI_VERSION:-v1.14.2}"

log() { printf '[capd] %s\n' "$*" >&2; }

cache_root="${GOOFY_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/goofy}"
out="${cache_root}/capd/${CAPI_VERSION}"
tools="${cache_root}/capd/tools-${CAPI_VERSION}"
mkdir -p "${out}" "${tools}"

if [[ ! -f "${tools}/go.sum" ]]; then
  log "preparing tools module for sigs.k8s.io/cluster-api/test ${CAPI_VERSION}"
  # The test module replaces cluster-api and its api module with its parent directory; outside
  # CAPI's repository the released versions are required instead.
  cat > "${tools}/go.mod" <<GOMOD
module goofy.local/capd-manager

go 1.26

require (
	sigs.k8s.io/cluster-api ${CAPI_VERSION}
	sigs.k8s.io/cluster-api/api ${CAPI_VERSION}
	sigs.k8s.io/cluster-api/test ${CAPI_VERSION}
)

replace sigs.k8s.io/cluster-api/api => sigs.k8s.io/cluster-api/api ${CAPI_VERSION}

replace sigs.k8s.io/cluster-api => sigs.k8s.io/cluster-api ${CAPI_VERSION}
GOMOD
  cat > "${tools}/tools.go" <<'GO'
//go:build tools

package tools

import _ "sigs.k8s.io/cluster-api/test/infrastructure/docker"
GO
  (cd "${tools}" && GOFLAGS=-mod=mod go mod tidy -e >&2)
fi

# --module: only the module, for programs built against it (test/benchapi/build-capdserver.sh).
if [[ "${1:-}" == "--module" ]]; then
  echo "${tools}"
  exit 0
fi

if [[ ! -x "${out}/capd-manager" ]]; then
  start=$(date +%s)
  log "building capd-manager ${CAPI_VERSION} (several minutes on 2 cores the first time)"
  (cd "${tools}" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "${out}/capd-manager.tmp" sigs.k8s.io/cluster-api/test/infrastructure/docker)
  mv "${out}/capd-manager.tmp" "${out}/capd-manager"
  log "built capd-manager in $(( $(date +%s) - start ))s"
fi

echo "${out}"
