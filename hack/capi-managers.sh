#!/usr/bin/env bash
# Builds Cluster API's core manager, the kubeadm bootstrap manager (CABPK), the kubeadm control-plane
# manager (KCP) and clusterctl from the sigs.k8s.io/cluster-api Go module, because release binaries
# cannot be downloaded here. Results are cached per version under the user cache dir and reused.
# The last line printed on stdout is the directory holding the binaries; progress goes to stderr.
set -euo pipefail

CAPI_VERSION="${CAPI_VERSION:-v1.14.2}"
repo_root="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=hack/module-pins.sh
source "${repo_root}/hack/module-pins.sh"

log() { printf '[capi] %s\n' "$*" >&2; }

cache_root="${GOOFY_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/goofy}"
out="${cache_root}/capi/${CAPI_VERSION}"
tools="${cache_root}/capi/tools-${CAPI_VERSION}"
mkdir -p "${out}" "${tools}"

# binary name -> main package
declare -A pkgs=(
  [cluster-api-manager]=sigs.k8s.io/cluster-api/core
  [kubeadm-bootstrap-manager]=sigs.k8s.io/cluster-api/bootstrap/kubeadm
  [kubeadm-control-plane-manager]=sigs.k8s.io/cluster-api/controlplane/kubeadm
  [clusterctl]=sigs.k8s.io/cluster-api/cmd/clusterctl
)
missing=()
for bin in cluster-api-manager kubeadm-bootstrap-manager kubeadm-control-plane-manager clusterctl; do
  [[ -x "${out}/${bin}" ]] || missing+=("${bin}")
done
if (( ${#missing[@]} == 0 )); then
  echo "${out}"
  exit 0
fi

# Every module Goofy's own module builds with is pinned here at Goofy's version (hack/module-pins.sh;
# CAPI v1.14.2 and Goofy agree on Kubernetes, controller-runtime and gRPC; they differ only in patch
# releases of golang.org/x/* and yaml). The managers then compile exactly the packages Goofy's tests
# and go vet compile, and Go's build cache compiles each of them once.
pins_sum="$(goofy_pins_hash)"

# .tidy-done holds the pins' hash and is written only after go mod tidy succeeded: an interrupted
# tidy, or one for other pins, is run again.
if [[ "$(cat "${tools}/.tidy-done" 2>/dev/null)" != "${pins_sum}" ]]; then
  log "preparing tools module for sigs.k8s.io/cluster-api ${CAPI_VERSION} with Goofy's module versions"
  # The CAPI module requires its api submodule at a placeholder version (it replaces it locally);
  # requiring the real one here makes the build resolvable outside CAPI's repository.
  cat > "${tools}/go.mod" <<GOMOD
module goofy.local/capi-managers

go 1.26

require (
	sigs.k8s.io/cluster-api ${CAPI_VERSION}
	sigs.k8s.io/cluster-api/api ${CAPI_VERSION}
)

replace sigs.k8s.io/cluster-api/api => sigs.k8s.io/cluster-api/api ${CAPI_VERSION}
GOMOD
  cat > "${tools}/tools.go" <<'GO'
//go:build tools

package tools

import (
	_ "sigs.k8s.io/cluster-api/bootstrap/kubeadm"
	_ "sigs.k8s.io/cluster-api/cmd/clusterctl"
	_ "sigs.k8s.io/cluster-api/controlplane/kubeadm"
	_ "sigs.k8s.io/cluster-api/core"
)
GO
  pin_to_goofy_versions "${tools}" '^sigs\.k8s\.io/cluster-api(/api)?@'
  cp "${repo_root}/go.sum" "${tools}/go.sum"
  (cd "${tools}" && GOFLAGS=-mod=mod go mod tidy -e >&2) && printf '%s' "${pins_sum}" > "${tools}/.tidy-done"
fi

minor="${CAPI_VERSION#v}"; minor="${minor%.*}"; minor="${minor#*.}"
ldflags="-s -w -X sigs.k8s.io/cluster-api/version.gitVersion=${CAPI_VERSION} \
 -X sigs.k8s.io/cluster-api/version.gitMajor=1 -X sigs.k8s.io/cluster-api/version.gitMinor=${minor} \
 -X sigs.k8s.io/cluster-api/version.gitTreeState=clean \
 -X sigs.k8s.io/cluster-api/version.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"

# Compile flags as for `go test`, `go vet` and the manager's build (the Makefile exports
# CGO_ENABLED=0 and GOFLAGS=-trimpath; this script sets the same unless told otherwise), so compiled
# packages are shared with them. One `go build` for all binaries whose file names differ, so compiles and
# links overlap; KCP's main package is also named kubeadm, so it links in a second one.
export CGO_ENABLED="${CGO_ENABLED:-0}"
scratch="$(mktemp -d "${out}/.build.XXXXXX")"
trap 'rm -rf "${scratch}"' EXIT
start=$(date +%s)
log "building ${missing[*]} ${CAPI_VERSION} (several minutes on 2 cores the first time)"
first=(); second=()
for bin in "${missing[@]}"; do
  if [[ "${bin}" == kubeadm-control-plane-manager ]]; then second+=("${bin}"); else first+=("${bin}"); fi
done
for group in first second; do
  declare -n names="${group}"
  (( ${#names[@]} )) || continue
  targets=()
  for bin in "${names[@]}"; do targets+=("${pkgs[$bin]}"); done
  mkdir -p "${scratch}/${group}"
  (cd "${tools}" && go build -trimpath -ldflags "${ldflags}" -o "${scratch}/${group}/" "${targets[@]}")
  # go build names a binary after its package's last path element.
  for bin in "${names[@]}"; do mv "${scratch}/${group}/${pkgs[$bin]##*/}" "${out}/${bin}"; done
  unset -n names
done
log "built ${missing[*]} in $(( $(date +%s) - start ))s"

echo "${out}"
