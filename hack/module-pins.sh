# Sourced by the build scripts of the plane's binaries (hack/envtest.sh, hack/capi-managers.sh).
#
# pin_to_goofy_versions TOOLS_DIR SKIP_REGEX: requires in TOOLS_DIR's go.mod, at Goofy's version,
# every module of the tools' module graph whose packages Goofy's own build and tests compile too
# (modules matching SKIP_REGEX are left alone). The tools then compile exactly the packages Goofy's
# tests and go vet compile (same versions, same flags), and Go's build cache compiles each of them
# once per run. Callers run `go mod tidy` afterwards.
#
# goofy_pins_hash: a short hash of those pins and of this file, kept in the tools module's .tidy-done,
# so that a change of Goofy's go.mod (or of how pins are chosen) prepares the tools module again.
goofy_pins() {
  go -C "${repo_root:?}" list -deps -test \
    -f '{{with .Module}}{{if not .Main}}{{.Path}}@{{.Version}}{{end}}{{end}}' ./... | sort -u
}

goofy_pins_hash() {
  { goofy_pins; cat "${BASH_SOURCE[0]}"; } | sha256sum | cut -c1-16
}

pin_to_goofy_versions() {
  local dir="$1" skip="$2" pin own requires=()
  # Only modules already in the tools' own module graph: a module only Goofy uses would bring its
  # requirements along and raise versions the tools never asked for (CAPI's go.mod would lift
  # tablewriter to a major API that etcdctl does not build with).
  (cd "${dir}" && GOFLAGS=-mod=mod go mod tidy -e >&2)
  own="$(cd "${dir}" && go list -m -f '{{.Path}}' all)"
  while read -r pin; do
    [[ -z "${pin}" || "${pin}" =~ ${skip} ]] && continue
    grep -qxF "${pin%@*}" <<< "${own}" || continue
    requires+=("-require=${pin}")
  done < <(goofy_pins)
  (cd "${dir}" && go mod edit "${requires[@]}")
}
