#!/usr/bin/env bash
# `make test-all`: everything CI checks, as .ci/run runs it. The process-plane tiers spend most of
# their time waiting for CAPI's controllers, while the checks and unit tests keep both cores busy,
# so the two kinds run side by side:
#   1. go vet (every analyzer, the three modules), which compiles every package once for everything
#      after it; the tests then run without go test's own vet pass;
#   2. `make e2e` and CAPI's QuickStartSpec (`make e2e-upstream`) in the background, each on a
#      plane of its own (their ports and directories are their own: docs/development.md); most of
#      QuickStartSpec's time is waiting (CAPI's 30 s retries, its resourceVersion check's minute
#      and a half), which the unit tests fill;
#   3. meanwhile `make test`, then `make verify` and staticcheck (with warm caches they take
#      little);
#   4. when all of that has ended, the suite's heavy stress scenario may start.
# Each step's duration is printed and, when PHASES_FILE is set, appended to it as "name seconds".
# The background tiers log to out/test-report/*.log, printed whole when they end. E2E_UPSTREAM_FOCUS
# picks the upstream specs (the CI subset by default).
set -euo pipefail
cd "$(dirname "$0")/.."

focus="${E2E_UPSTREAM_FOCUS:-QuickStartSpec default}"
report=out/test-report
mkdir -p "${report}"

record() {
  printf '== %s took %ds\n' "$1" "$2"
  [[ -z "${PHASES_FILE:-}" ]] || printf '%s %d\n' "$1" "$2" >> "${PHASES_FILE}"
}

# step NAME COMMAND...: runs the command in the foreground and records its duration.
step() {
  local name="$1" start rc=0; shift
  start=$(date +%s)
  echo "== ${name} ($(date -u +%H:%M:%S))"
  "$@" || rc=$?
  record "${name}" $(( $(date +%s) - start ))
  return "${rc}"
}

# background NAME LOG COMMAND...: runs the command with its output in LOG; its duration and exit
# status land in LOG.result.
background() {
  local name="$1" log="$2"; shift 2
  echo "== ${name} started in the background ($(date -u +%H:%M:%S)), log ${log}"
  ( start=$(date +%s); status=0
    "$@" > "${log}" 2>&1 || status=$?
    echo "$(( $(date +%s) - start )) ${status}" > "${log}.result" ) &
}

# finish NAME LOG: prints a background tier's log and duration; fails if it failed.
finish() {
  local name="$1" log="$2" seconds status
  echo "== ${name}: its log (${log})"
  cat "${log}"
  read -r seconds status < "${log}.result"
  record "${name}" "${seconds}"
  return "${status}"
}

# The binaries the planes run are built first, once (no-ops when .ci/run built them).
ENVTEST_BINARIES="kube-apiserver kubectl etcd etcdctl plane-controllers" hack/envtest.sh >/dev/null
hack/capi-managers.sh >/dev/null
make --no-print-directory tools >/dev/null
# The Goofy manager every plane of the run runs, built once (harness.PrebuiltManagerEnv).
make --no-print-directory build >/dev/null
export GOOFY_MANAGER_PREBUILT="${PWD}/bin/manager"
step "go vet (compiles every package)" make --no-print-directory vet
# go vet has just run every analyzer on every package of the three modules, so the tests below run
# without go test's own vet pass (a subset of those analyzers). That pass is not free on a fresh
# machine: its analyzers' facts are cached apart from go vet's, so it analyses every dependency
# again (about 2,000 packages, some 4 CPU-minutes), and make test and make e2e did it at the same
# time.
export GO_TEST_FLAGS="-vet=off${GO_TEST_FLAGS:+ ${GO_TEST_FLAGS}}"

rm -f "${report}"/*.result
# The suite's heavy scenario (25 clusters at once, its last) waits until everything else here has
# ended: beside the unit tests, or beside QuickStartSpec and staticcheck, it missed its time limits
# (test/e2e/order_test.go, CoresFreeEnv).
export GOOFY_E2E_CORES_FREE_FILE="${PWD}/${report}/cores-free"
rm -f "${GOOFY_E2E_CORES_FREE_FILE}"
background "make e2e" "${report}/e2e.log" make --no-print-directory e2e
e2e_pid=$!
# Started with the rest, not after make test: it then ended last and held the stress scenario back.
background "make e2e-upstream" "${report}/e2e-upstream.log" make --no-print-directory e2e-upstream E2E_FOCUS="${focus}"
upstream_pid=$!

status=0
# -count=1: every test runs (go test would reuse a result whose binary and inputs are unchanged,
# and with -trimpath that holds across clones).
step "make test" make --no-print-directory test GO_TEST_FLAGS="-count=1 ${GO_TEST_FLAGS:-}" || status=$?
step "make verify" make --no-print-directory verify || status=$?
step "staticcheck" make --no-print-directory staticcheck || status=$?
wait "${upstream_pid}" || true
touch "${GOOFY_E2E_CORES_FREE_FILE}"
wait "${e2e_pid}" || true

wait
finish "make e2e" "${report}/e2e.log" || status=$?
finish "make e2e-upstream" "${report}/e2e-upstream.log" || status=$?
exit "${status}"
