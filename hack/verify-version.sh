#!/usr/bin/env bash
# Fails when VERSION does not flow everywhere a release needs it: clusterctl's metadata.yaml must
# list VERSION's release series, and the manager image in config/manager (what
# infrastructure-components.yaml deploys) must carry VERSION as its tag, and clusterctl-settings.json
# (CAPI's create-local-repository.py) must name it as nextVersion. `make set-manifest-image`
# updates the image; a new minor release adds its series to metadata.yaml.
set -euo pipefail
cd "$(dirname "$0")/.."

version="$(tr -d '[:space:]' < VERSION)"
if [[ ! "$version" =~ ^v([0-9]+)\.([0-9]+)\.([0-9]+)(-[0-9A-Za-z.-]+)?$ ]]; then
	echo "VERSION '$version' is not a semantic version (vMAJOR.MINOR.PATCH)" >&2
	exit 1
fi
major="${BASH_REMATCH[1]}" minor="${BASH_REMATCH[2]}"

# metadata.yaml: a "- major: M" line followed by "  minor: N".
if ! awk -v M="$major" -v N="$minor" '
	$1 == "-" && $2 == "major:" { m = $3; next }
	$1 == "minor:" && m == M && $2 == N { found = 1 }
	END { exit !found }' metadata.yaml; then
	echo "metadata.yaml has no release series $major.$minor for VERSION $version" >&2
	exit 1
fi

tag="$(awk '$1 == "newTag:" { print $2 }' config/manager/kustomization.yaml)"
if [[ "$tag" != "$version" ]]; then
	echo "config/manager/kustomization.yaml tags the manager image '$tag', VERSION is $version: run 'make set-manifest-image'" >&2
	exit 1
fi

next="$(sed -n 's/.*"nextVersion": *"\([^"]*\)".*/\1/p' clusterctl-settings.json)"
if [[ "$next" != "$version" ]]; then
	echo "clusterctl-settings.json names nextVersion '$next', VERSION is $version" >&2
	exit 1
fi
