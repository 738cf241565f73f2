#!/usr/bin/env bash
# The worked example of docs/architecture.md ("How to add a collector") stays true: its diff,
# docs/examples/add-a-collector.diff, applies to a scratch copy of this tree, touches no file
# outside its new crate but the three it may (the binary's dependency, its list line, the
# catalog rows), builds, and passes its tests (its own, and the binary's registry tests: every
# flag sets its own table, every catalog source has a descriptor).
#
# The scratch copy shares this tree's target directory, so that only the workspace's own crates
# are compiled again, not every dependency. Cargo names a workspace crate's artifacts by its path
# relative to the workspace, so the scratch build replaces this tree's artifacts of the crates
# the diff edits (and their dependents): afterwards the files it edits are touched here, which
# makes cargo rebuild those crates from this tree's sources at the next build. Only test
# harnesses are built, so no binary of this tree is replaced in the meantime.
set -euo pipefail
cd "$(dirname "$0")/.."
diff=docs/examples/add-a-collector.diff
allowed='^(crates/storage/.*|crates/exporter/Cargo.toml|crates/exporter/src/collectors/mod.rs|crates/metrics/src/catalog.rs)$'

touched=$(git apply --numstat "$diff" | awk '{print $3}')
outside=$(grep -Ev "$allowed" <<<"$touched" || true)
if [ -n "$outside" ]; then
  echo "check-example: the example touches files it should not need: $outside" >&2
  exit 1
fi
# Lines added or removed outside the new crate: the dependency, the list line, two rows of
# (at most) two lines each.
edited=$(git apply --numstat "$diff" | awk '$3 !~ /^crates\/storage\// {n += $1 + $2} END {print n + 0}')
if [ "$edited" -gt 6 ]; then
  echo "check-example: the example edits $edited lines outside its crate (at most 6)" >&2
  exit 1
fi

root=$PWD
scratch=$(mktemp -d "${TMPDIR:-/tmp}/add-a-collector.XXXXXX")
# Whatever happens, this tree's edited files become newer than the scratch build's artifacts.
trap 'rm -rf "$scratch"; grep -Ev "^crates/storage/" <<<"$touched" | xargs -r touch' EXIT
git ls-files -z | xargs -0 cp --parents -t "$scratch"
(cd "$scratch" && git apply "$root/$diff")
# Its crate's tests, the catalog's (naming rules), and the binary's registry tests.
if ! (cd "$scratch" && CARGO_TARGET_DIR="$root/target" cargo test -p dgx-pixels-storage \
  -p dgx-pixels-metrics --lib -p dgx-pixels-exporter --bin dgx-pixels-exporter) \
  >"$scratch/test.log" 2>&1; then
  tail -60 "$scratch/test.log" >&2
  echo "check-example: the example does not build or pass its tests" >&2
  exit 1
fi
grep -E '^test result' "$scratch/test.log"
echo "check-example: $diff applies, touches $(wc -l <<<"$touched") files ($edited lines outside its crate), builds and passes"
