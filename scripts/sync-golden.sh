#!/usr/bin/env bash
# Refreshes the in-tree conformance cases (conformance/golden/, what every
# golden runner reads) from the shared ones (../shared/golden beside the
# repository, or $SHARED_GOLDEN): the same layout, next/ included. Cases
# that are no longer in the shared tree are removed here too.
#
#   scripts/sync-golden.sh            # then review `git status conformance/` and commit
#
# tests/conformance/golden.rs (golden_copy_matches_shared) fails while the two differ
# for a file present in both.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
src="${SHARED_GOLDEN:-$here/../shared/golden}"
dst="$here/conformance/golden"
if [ ! -d "$src" ]; then
    echo "sync-golden: no shared golden cases at $src" >&2
    exit 1
fi
for sub in "" next; do
    [ -n "$sub" ] && [ ! -d "$src/$sub" ] && continue
    mkdir -p "$dst/$sub"
    find "$dst/$sub" -maxdepth 1 -name '*.json' -type f -delete
    find "$src/$sub" -maxdepth 1 -name '*.json' -type f -exec cp {} "$dst/$sub/" \;
    chmod u+w "$dst/$sub"/*.json 2>/dev/null || true
done
echo "sync-golden: $(find "$dst" -maxdepth 1 -name '*.json' | wc -l) cases in $dst, $(find "$dst/next" -maxdepth 1 -name '*.json' 2>/dev/null | wc -l) in next/"
