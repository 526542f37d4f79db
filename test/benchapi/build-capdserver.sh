#!/usr/bin/env bash
# Builds capdserver, the CAPD in-memory side of `make bench-api`, in the Go module that
# test/bench/build-capd.sh keeps in the user cache for CAPD (sigs.k8s.io/cluster-api/test, keyed
# by CAPI version): Goofy's go.mod stays free of CAPD's Docker and kind libraries. The last line
# printed on stdout is the binary's path; progress goes to stderr.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
mod="$("${here}/../bench/build-capd.sh" --module | tail -n 1)"
pkg="${mod}/benchapi-capdserver"
mkdir -p "${pkg}"
# The source lives in this repository; go build relinks only when it or the module changed.
cp "${here}/capdserver/main.go" "${pkg}/main.go"
# Named as a file, main.go builds despite its ignore constraint (which keeps it out of Goofy's module).
(cd "${mod}" && go build -o "${pkg}/capdserver" ./benchapi-capdserver/main.go)
echo "${pkg}/capdserver"
