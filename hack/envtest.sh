#!/usr/bin/env bash
# Builds the envtest binaries (kube-apiserver, kubectl, etcd, etcdctl) and the end-to-end plane's
# controllers (hack/plane-controllers: kube-controller-manager's garbage collector and namespace
# controller) from Go modules, because prebuilt binaries cannot be downloaded here. Results are cached per version under the
# user cache dir and reused; a preset KUBEBUILDER_ASSETS is honoured. The last line printed on stdout is
# the directory to use as KUBEBUILDER_ASSETS; progress goes to stderr.
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-v1.36.3}"
ETCD_VERSION="${ETCD_VERSION:-v3.6.14}"
# Which binaries to build; plane-controllers is only needed by the end-to-end harness.
BINARIES="${ENVTEST_BINARIES:-kube-apiserver kubectl etcd etcdctl}"

repo_root="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=hack/module-pins.sh
source "${repo_root}/hack/module-pins.sh"

log() { printf '[envtest] %s\n' "$*" >&2; }

if [[ -n "${KUBEBUILDER_ASSETS:-}" && -x "${KUBEBUILDER_ASSETS}/kube-apiserver" ]]; then
  log "using preset KUBEBUILDER_ASSETS=${KUBEBUILDER_ASSETS}"
  echo "${KUBEBUILDER_ASSETS}"
  exit 0
fi

cache_root="${GOOFY_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/goofy}"
out="${cache_root}/envtest/k8s-${K8S_VERSION}-etcd-${ETCD_VERSION}"
mkdir -p "${out}"

minor="${K8S_VERSION#v}"; minor="${minor%.*}"; minor="${minor#*.}"
staging_version="v0.${K8S_VERSION#v1.}"
build_date="$(date -u +%Y-%m-%dT%H:%M:%SZ)"

k8s_tools="${cache_root}/envtest/tools-k8s-${K8S_VERSION}"
etcd_tools="${cache_root}/envtest/tools-etcd-${ETCD_VERSION}"

# Both tools modules build with Goofy's versions of the modules they share with it (hack/module-pins.sh):
# kube-apiserver, kubectl and the plane's controllers share k8s.io/api, client-go, apiserver, gRPC,
# etcd's client and more with Goofy, and etcd shares gRPC, bbolt, zap and golang.org/x/*. Goofy's
# versions are the same or newer patch and minor releases of those (its k8s.io modules are the
# release's own, v0.36.x for v1.36.x), so the sources of kube-apiserver and etcd stay the released
# ones while their shared packages are compiled once per run instead of twice.
pins_hash="$(goofy_pins_hash)"

# The plane's controllers are Goofy's own main package over upstream's controllers: it builds in the
# Kubernetes tools module, and its binary is rebuilt when its source changes.
plane_source="${repo_root}/hack/plane-controllers/main.go"
plane_hash="$(sha256sum "${plane_source}" | cut -d' ' -f1)"

prepare_k8s_module() {
  mkdir -p "${k8s_tools}/plane-controllers"
  cp "${plane_source}" "${k8s_tools}/plane-controllers/main.go"
  # .tidy-done holds the pins' and the plane's source's hashes and is written only after go mod tidy
  # succeeded: an interrupted tidy (a partial go.sum), or one for other pins, is run again instead of
  # being reused.
  local tidy_key="${pins_hash}-${plane_hash}"
  [[ "$(cat "${k8s_tools}/.tidy-done" 2>/dev/null)" == "${tidy_key}" ]] && return 0
  log "preparing tools module for k8s.io/kubernetes ${K8S_VERSION} with Goofy's module versions"
  local staging=(api apiextensions-apiserver apimachinery apiserver cli-runtime client-go cloud-provider
    cluster-bootstrap code-generator component-base component-helpers controller-manager cri-api cri-client
    cri-streaming csi-translation-lib dynamic-resource-allocation endpointslice externaljwt kms kube-aggregator
    kube-controller-manager kube-proxy kube-scheduler kubectl kubelet metrics mount-utils pod-security-admission
    sample-apiserver sample-cli-plugin sample-controller streaming)
  {
    echo "module goofy.local/envtest-k8s"
    echo
    echo "go 1.26"
    echo
    echo "require k8s.io/kubernetes ${K8S_VERSION}"
    echo
    echo "replace ("
    for s in "${staging[@]}"; do echo "	k8s.io/${s} => k8s.io/${s} ${staging_version}"; done
    echo ")"
  } > "${k8s_tools}/go.mod"
  cat > "${k8s_tools}/tools.go" <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
GO
  pin_to_goofy_versions "${k8s_tools}" '^k8s\.io/kubernetes@'
  cp "${repo_root}/go.sum" "${k8s_tools}/go.sum"
  (cd "${k8s_tools}" && GOFLAGS=-mod=mod go mod tidy -e >&2) && printf '%s' "${tidy_key}" > "${k8s_tools}/.tidy-done"
}

prepare_etcd_module() {
  mkdir -p "${etcd_tools}"
  [[ "$(cat "${etcd_tools}/.tidy-done" 2>/dev/null)" == "${pins_hash}" ]] && return 0
  log "preparing tools module for etcd ${ETCD_VERSION}"
  cat > "${etcd_tools}/go.mod" <<GOMOD
module goofy.local/envtest-etcd

go 1.26

require (
	go.etcd.io/etcd/server/v3 ${ETCD_VERSION}
	go.etcd.io/etcd/etcdctl/v3 ${ETCD_VERSION}
)
GOMOD
  cat > "${etcd_tools}/tools.go" <<'GO'
//go:build tools

package tools

import (
	_ "go.etcd.io/etcd/etcdctl/v3"
	_ "go.etcd.io/etcd/server/v3"
)
GO
  pin_to_goofy_versions "${etcd_tools}" '^go\.etcd\.io/etcd/(server|etcdctl)/v3@'
  cp "${repo_root}/go.sum" "${etcd_tools}/go.sum"
  (cd "${etcd_tools}" && GOFLAGS=-mod=mod go mod tidy -e >&2) && printf '%s' "${pins_hash}" > "${etcd_tools}/.tidy-done"
}

k8s_ldflags="-s -w -X k8s.io/component-base/version.gitVersion=${K8S_VERSION} \
 -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${minor} \
 -X k8s.io/component-base/version.gitTreeState=clean -X k8s.io/component-base/version.buildDate=${build_date} \
 -X k8s.io/client-go/pkg/version.gitVersion=${K8S_VERSION} \
 -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=${minor}"

# Every missing binary of a module is built by one `go build`, so the go command schedules all their
# compiles and links together and keeps both cores busy while a large binary links; the etcd module
# builds beside the Kubernetes one. -trimpath and CGO_ENABLED=0 as upstream builds its release
# binaries, and as Goofy's own build does: with the pins above, the packages both compile are shared.
k8s_missing=(); etcd_missing=()
for bin in ${BINARIES}; do
  if [[ "${bin}" == plane-controllers ]]; then
    [[ -x "${out}/${bin}" && "$(cat "${out}/${bin}.sha256" 2>/dev/null)" == "${plane_hash}" ]] && continue
  else
    [[ -x "${out}/${bin}" ]] && continue
  fi
  case "${bin}" in
    kube-apiserver|kubectl|plane-controllers) k8s_missing+=("${bin}") ;;
    etcd|etcdctl) etcd_missing+=("${bin}") ;;
    *) log "unknown binary ${bin}"; exit 1 ;;
  esac
done

# go_binary_name PACKAGE: the file name `go build -o DIR/` gives a main package (its last path element,
# or the one before a major-version suffix such as /v3).
go_binary_name() {
  local p="$1" last="${1##*/}"
  if [[ "${last}" =~ ^v[0-9]+$ ]]; then p="${p%/*}"; last="${p##*/}"; fi
  echo "${last}"
}

# build_into MODULE_DIR LDFLAGS NAME=PACKAGE...: builds the packages into a scratch directory next to
# ${out} and moves each binary into place under its name only once the whole build succeeded.
build_into() {
  local dir="$1" ldflags="$2"; shift 2
  local scratch; scratch="$(mktemp -d "${out}/.build.XXXXXX")"
  local pkgs=() names=() start; start=$(date +%s)
  for pair in "$@"; do names+=("${pair%%=*}"); pkgs+=("${pair#*=}"); done
  log "building ${names[*]}"
  if ! (cd "${dir}" && CGO_ENABLED=0 go build -trimpath -ldflags "${ldflags}" -o "${scratch}/" "${pkgs[@]}"); then
    rm -rf "${scratch}"; return 1
  fi
  for i in "${!names[@]}"; do mv "${scratch}/$(go_binary_name "${pkgs[$i]}")" "${out}/${names[$i]}"; done
  rm -rf "${scratch}"
  log "built ${names[*]} in $(( $(date +%s) - start ))s"
}

etcd_pid=""
if (( ${#etcd_missing[@]} )); then
  prepare_etcd_module
  etcd_pairs=()
  for bin in "${etcd_missing[@]}"; do
    case "${bin}" in
      etcd) etcd_pairs+=("etcd=go.etcd.io/etcd/server/v3") ;;
      etcdctl) etcd_pairs+=("etcdctl=go.etcd.io/etcd/etcdctl/v3") ;;
    esac
  done
  build_into "${etcd_tools}" "-s -w" "${etcd_pairs[@]}" &
  etcd_pid=$!
fi
k8s_status=0
if (( ${#k8s_missing[@]} )); then
  prepare_k8s_module
  k8s_pairs=()
  for bin in "${k8s_missing[@]}"; do
    case "${bin}" in
      plane-controllers) k8s_pairs+=("${bin}=goofy.local/envtest-k8s/plane-controllers") ;;
      *) k8s_pairs+=("${bin}=k8s.io/kubernetes/cmd/${bin}") ;;
    esac
  done
  log "kube-apiserver and kubectl take about 15 minutes on 2 cores the first time"
  if build_into "${k8s_tools}" "${k8s_ldflags}" "${k8s_pairs[@]}"; then
    [[ " ${k8s_missing[*]} " == *" plane-controllers "* ]] && printf '%s' "${plane_hash}" > "${out}/plane-controllers.sha256"
  else
    k8s_status=$?
  fi
fi
if [[ -n "${etcd_pid}" ]]; then wait "${etcd_pid}" || exit 1; fi
(( k8s_status == 0 )) || exit "${k8s_status}"

echo "${out}"
