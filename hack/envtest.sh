#!/usr/bin/env bash
# Builds the envtest binaries (kube-apiserver, kubectl, kube-controller-manager, etcd, etcdctl) from Go
# modules, because prebuilt binaries cannot be downloaded here. Results are cached per version under the
# user cache dir and reused; a preset KUBEBUILDER_ASSETS is honoured. The last line printed on stdout is
# the directory to use as KUBEBUILDER_ASSETS; progress goes to stderr.
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-v1.36.3}"
ETCD_VERSION="${ETCD_VERSION:-v3.6.14}"
# Which binaries to build; kube-controller-manager is only needed by the end-to-end harness.
BINARIES="${ENVTEST_BINARIES:-kube-apiserver kubectl etcd etcdctl}"

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

prepare_k8s_module() {
  mkdir -p "${k8s_tools}"
  # .tidy-done is written only after go mod tidy succeeded: an interrupted tidy (a partial go.sum)
  # is run again instead of being reused.
  [[ -f "${k8s_tools}/.tidy-done" ]] && return 0
  log "preparing tools module for k8s.io/kubernetes ${K8S_VERSION}"
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
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
GO
  (cd "${k8s_tools}" && GOFLAGS=-mod=mod go mod tidy -e >&2) && touch "${k8s_tools}/.tidy-done"
}

prepare_etcd_module() {
  mkdir -p "${etcd_tools}"
  [[ -f "${etcd_tools}/.tidy-done" ]] && return 0
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
  (cd "${etcd_tools}" && GOFLAGS=-mod=mod go mod tidy -e >&2) && touch "${etcd_tools}/.tidy-done"
}

k8s_ldflags="-s -w -X k8s.io/component-base/version.gitVersion=${K8S_VERSION} \
 -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${minor} \
 -X k8s.io/component-base/version.gitTreeState=clean -X k8s.io/component-base/version.buildDate=${build_date} \
 -X k8s.io/client-go/pkg/version.gitVersion=${K8S_VERSION} \
 -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=${minor}"

for bin in ${BINARIES}; do
  if [[ -x "${out}/${bin}" ]]; then
    continue
  fi
  start=$(date +%s)
  case "${bin}" in
    kube-apiserver|kubectl|kube-controller-manager)
      prepare_k8s_module
      log "building ${bin} ${K8S_VERSION} (kube-apiserver takes about 10 minutes on 2 cores the first time)"
      (cd "${k8s_tools}" && CGO_ENABLED=0 go build -trimpath -ldflags "${k8s_ldflags}" -o "${out}/${bin}.tmp" "k8s.io/kubernetes/cmd/${bin}")
      ;;
    etcd)
      prepare_etcd_module
      log "building etcd ${ETCD_VERSION}"
      (cd "${etcd_tools}" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "${out}/${bin}.tmp" go.etcd.io/etcd/server/v3)
      ;;
    etcdctl)
      prepare_etcd_module
      log "building etcdctl ${ETCD_VERSION}"
      (cd "${etcd_tools}" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "${out}/${bin}.tmp" go.etcd.io/etcd/etcdctl/v3)
      ;;
    *) log "unknown binary ${bin}"; exit 1 ;;
  esac
  mv "${out}/${bin}.tmp" "${out}/${bin}"
  log "built ${bin} in $(( $(date +%s) - start ))s"
done

echo "${out}"
