#!/usr/bin/env bash
# clusterctl's rules for the flavors in templates/: a ClusterClass file (clusterclass-*.yaml) has no
# ${VARIABLES} (clusterctl does not substitute them in a ClusterClass it adds to a cluster) and no
# namespaces (clusterctl puts it in the cluster's target namespace). Every variable of a
# cluster-template*.yaml is documented in README.md's table of flavors.
set -euo pipefail
cd "$(dirname "$0")/.."

fail=0
for f in templates/clusterclass-*.yaml; do
	if grep -n '\${' "$f"; then
		echo "$f: a ClusterClass file must not use \${...} variables" >&2
		fail=1
	fi
	if grep -nE '^  namespace:' "$f"; then
		echo "$f: a ClusterClass file must not set metadata.namespace (clusterctl sets the target namespace)" >&2
		fail=1
	fi
done
for f in templates/cluster-template*.yaml; do
	for v in $(grep -o '\${[A-Z_][A-Z0-9_]*' "$f" | sed 's/^\${//' | sort -u); do
		if ! grep -q "\`$v\`" README.md; then
			echo "$f: variable $v is not documented in README.md" >&2
			fail=1
		fi
	done
done
exit "$fail"
