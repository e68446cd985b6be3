#!/usr/bin/env bash
# Issue 12 (select): golden bitwise, the benchmark, then chunk-count sweeps on a few shapes.
set -u
here="$(cd "$(dirname "$0")/.." && pwd)"; cd "$here"
out="${OUT:-/tmp/bench-out}"; mkdir -p "$out"
PEERS=0 GOLDEN=1 RAW=0 ROWS="${ROWS:-1,16,64,384}" NS="${NS:-1024,4096,0}" timeout 110 bash scripts/bench.sh device > "$out/main.log" 2>&1
cp /tmp/golden.log "$out/" 2>/dev/null
tail -40 "$out/main.log"
if grep -q "FAIL" /tmp/golden.log || grep -q "ERROR" "$out/main.log"; then echo "== golden or benchmark failed: no sweep"; exit 1; fi
for ch in ${SWEEP:-2 8}; do
    echo "== chunks $ch"
    timeout 35 .gpu/bin/benchmark run --rows 1,64,384 --n 1024,4096 --chunks $ch --check-rows 0 --reps 20 --json "$out/ch$ch.json" 2>&1 | grep "^|" | cut -c1-60,130-400
done
