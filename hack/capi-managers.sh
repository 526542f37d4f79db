#!/usr/bin/env bash
# Builds Cluster API's core manager, the kubeadm bootstrap manager (CABPK), the kubeadm control-plane
# manager (KCP) and clusterctl from the sigs.k8s.io/cluster-api Go module, because release binaries
# cannot be downloaded here. Results are cached per version under the user cache dir and reused.
# The last line printed on stdout is the directory holding the binaries; progress goes to stderr.
set -euo pipefail

CAPI_VERSION="${CAPI_VERSION:-v1.14.2}"

log() { printf '[capi] %s\n' "$*" >&2; }

cache_root="${GOOFY_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/goofy}"
out="${cache_root}/capi/${CAPI_VERSION}"
tools="${cache_root}/capi/tools-${CAPI_VERSION}"
mkdir -p "${out}" "${tools}"

# .tidy-done is written only after go mod tidy succeeded: an interrupted tidy is run again.
if [[ ! -f "${tools}/.tidy-done" ]]; then
  log "preparing tools module for sigs.k8s.io/cluster-api ${CAPI_VERSION}"
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
  (cd "${tools}" && GOFLAGS=-mod=mod go mod tidy -e >&2) && touch "${tools}/.tidy-done"
fi

minor="${CAPI_VERSION#v}"; minor="${minor%.*}"; minor="${minor#*.}"
ldflags="-s -w -X sigs.k8s.io/cluster-api/version.gitVersion=${CAPI_VERSION} \
 -X sigs.k8s.io/cluster-api/version.gitMajor=1 -X sigs.k8s.io/cluster-api/version.gitMinor=${minor} \
 -X sigs.k8s.io/cluster-api/version.gitTreeState=clean \
 -X sigs.k8s.io/cluster-api/version.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"

# binary name -> main package
declare -A pkgs=(
  [cluster-api-manager]=sigs.k8s.io/cluster-api/core
  [kubeadm-bootstrap-manager]=sigs.k8s.io/cluster-api/bootstrap/kubeadm
  [kubeadm-control-plane-manager]=sigs.k8s.io/cluster-api/controlplane/kubeadm
  [clusterctl]=sigs.k8s.io/cluster-api/cmd/clusterctl
)
for bin in cluster-api-manager kubeadm-bootstrap-manager kubeadm-control-plane-manager clusterctl; do
  [[ -x "${out}/${bin}" ]] && continue
  start=$(date +%s)
  log "building ${bin} ${CAPI_VERSION} (several minutes on 2 cores the first time)"
  (cd "${tools}" && CGO_ENABLED=0 go build -trimpath -ldflags "${ldflags}" -o "${out}/${bin}.tmp" "${pkgs[$bin]}")
  mv "${out}/${bin}.tmp" "${out}/${bin}"
  log "built ${bin} in $(( $(date +%s) - start ))s"
done

echo "${out}"
