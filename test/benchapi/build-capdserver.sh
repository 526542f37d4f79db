#!/usr/bin/env bash
# Builds capdserver, the CAPD in-memory side of `make bench-api`, in a Go module of its own under
# the user cache (requiring sigs.k8s.io/cluster-api/test, keyed by CAPI version): Goofy's go.mod
# stays free of CAPD's Docker and kind libraries. The last line printed on stdout is the binary's
# path; progress goes to stderr.
#
# The module pins every module Goofy also builds with at Goofy's version (hack/module-pins.sh), as
# the CAPI managers' module does: CAPI v1.14.2's test module and Goofy differ only in patch
# releases of golang.org/x/* and yaml, and unpinned those differences made this build compile
# about 700 packages again (client-go, apiserver, gRPC, controller-runtime) that CI's other builds
# had compiled already. CAPD's own manager (test/bench/build-capd.sh, what `make bench` compares
# against) keeps CAPI's versions.
set -euo pipefail

CAPI_VERSION="${CAPI_VERSION:-v1.14.2}"

here="$(cd "$(dirname "$0")" && pwd)"
repo_root="$(cd "${here}/../.." && pwd)"
# shellcheck source=hack/module-pins.sh
source "${repo_root}/hack/module-pins.sh"

log() { printf '[capdserver] %s\n' "$*" >&2; }

cache_root="${GOOFY_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/goofy}"
mod="${cache_root}/capd/capdserver-${CAPI_VERSION}"
pkg="${mod}/benchapi-capdserver"
mkdir -p "${pkg}"

# .tidy-done holds the pins' hash and is written only after go mod tidy succeeded: an interrupted
# tidy, or one for other pins, is run again.
pins_sum="$(goofy_pins_hash)"
if [[ "$(cat "${mod}/.tidy-done" 2>/dev/null)" != "${pins_sum}" ]]; then
  log "preparing the module for sigs.k8s.io/cluster-api/test ${CAPI_VERSION} with Goofy's module versions"
  # The requirements of CAPD's own module (test/bench/build-capd.sh), under another name; go mod
  # tidy below drops what capdserver does not import (Docker's and kind's libraries).
  capd_mod="$("${here}/../bench/build-capd.sh" --module | tail -n 1)"
  sed 's|^module .*|module goofy.local/capdserver|' "${capd_mod}/go.mod" > "${mod}/go.mod"
  # capdserver's main.go is ignored by go mod tidy (its ignore constraint), so the module's graph
  # comes from the packages it imports, named here.
  cat > "${mod}/tools.go" <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/client-go/tools/clientcmd"
	_ "k8s.io/klog/v2"
	_ "sigs.k8s.io/cluster-api/test/infrastructure/inmemory/pkg/runtime"
	_ "sigs.k8s.io/cluster-api/test/infrastructure/inmemory/pkg/server"
	_ "sigs.k8s.io/cluster-api/util/certs"
	_ "sigs.k8s.io/cluster-api/util/kubeconfig"
	_ "sigs.k8s.io/cluster-api/util/secret"
	_ "sigs.k8s.io/controller-runtime"
)
GO
  pin_to_goofy_versions "${mod}" '^sigs\.k8s\.io/cluster-api(/api|/test)?@'
  cp "${repo_root}/go.sum" "${mod}/go.sum"
  (cd "${mod}" && GOFLAGS=-mod=mod go mod tidy -e >&2) && printf '%s' "${pins_sum}" > "${mod}/.tidy-done"
fi

# The source lives in this repository; go build relinks only when it or the module changed.
# CGO_ENABLED=0 and -trimpath as Goofy's builds (the Makefile and .ci/run export them), so the
# packages both compile are shared.
cp "${here}/capdserver/main.go" "${pkg}/main.go"
# Named as a file, main.go builds despite its ignore constraint (which keeps it out of Goofy's module).
(cd "${mod}" && CGO_ENABLED="${CGO_ENABLED:-0}" go build -trimpath -o "${pkg}/capdserver" ./benchapi-capdserver/main.go)
echo "${pkg}/capdserver"
