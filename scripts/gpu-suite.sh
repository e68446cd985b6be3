#!/usr/bin/env bash
# The GPU suite: build here, run on the H200 in ONE device call.
#
#   scripts/gpu-suite.sh build     # here: release binaries + golden cases into .gpu/ (git-ignored)
#   scripts/gpu-suite.sh device    # there: what the device call runs (reads .gpu/, writes $OUT)
#
# The device call (the `run` tool of this workplace), carrying .gpu:
#   run(command="bash scripts/gpu-suite.sh device", carry=[".gpu"], timeout_s=600)
#
# On the device it runs, logging everything to $OUT/gpu-suite.log:
#   1. every golden case on CUDA vs the CPU backend and vs expected (gpu_suite golden),
#      then the selection's edge cases at V = 129280 (gpu_suite adversarial)
#   2. compute-sanitizer memcheck and racecheck on representative steps
#      (force top-k with verify + masks, force top-k from V = 152064, and
#      force top-k off at V = 152064: the big local-memory variants)
#   3. the timing table (gpu_suite timing): R in 1,16,64,256 x N in 1024,4096,off, V = 129280
#   4. tree verification (gpu_suite tree): one 64-node tree at R = 64 vs 64 decode rows
# Results of each run go into docs/GPU_NOTES.md (by hand, from the log).
set -u
here="$(cd "$(dirname "$0")/.." && pwd)"
cd "$here"

case "${1:-}" in
build)
    set -e
    export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$here/target}"
    cargo build --release --example gpu_suite --example conformance
    mkdir -p .gpu/bin .gpu/golden
    cp "$CARGO_TARGET_DIR/release/examples/gpu_suite" "$CARGO_TARGET_DIR/release/examples/conformance" .gpu/bin/
    strip .gpu/bin/* 2>/dev/null || true
    golden="${GOLDEN_DIR:-$here/conformance/golden}"
    cp "$golden"/*.json .gpu/golden/
    mkdir -p .gpu/golden/next && cp "$golden"/next/*.json .gpu/golden/next/
    git rev-parse HEAD > .gpu/commit 2>/dev/null || true
    du -sh .gpu
    echo 'now: run(command="bash scripts/gpu-suite.sh device", carry=[".gpu"], timeout_s=600)'
    ;;
device)
    out="${OUT:-/tmp/gpu-suite-out}"
    mkdir -p "$out"
    log="$out/gpu-suite.log"
    bin=.gpu/bin
    g=.gpu/golden
    rc=0
    {
        echo "== gpu-suite on $(hostname) at $(date -u +%FT%TZ), commit $(cat .gpu/commit 2>/dev/null)"
        nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader
        echo "== 1. golden cases: CUDA vs expected and vs CPU"
        timeout 240 $bin/gpu_suite golden $g || rc=1
        echo "== selection edge cases at V = 129280: CUDA vs CPU bitwise (gpu_suite adversarial)"
        timeout 60 $bin/gpu_suite adversarial || rc=1
        echo "== conformance --backend cuda (one case)"
        timeout 30 $bin/conformance $g/case-101-021.json --backend cuda > "$out/conformance-cuda.json" && echo "conformance --backend cuda: exit 0, $(wc -c < "$out/conformance-cuda.json") bytes" || rc=1
        steps="$g/case-101-021.json $g/case-101-017.json $g/case-102-002.json $g/case-102-000.json $g/next/tree-501-023.json $g/next/tree-501-004.json"
        cs=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
        echo "== 2. compute-sanitizer ($cs)"
        for tool in memcheck racecheck; do
            for st in $steps; do
                echo "-- $tool $(basename $st)"
                timeout ${SAN_TIMEOUT:-90} "$cs" --tool "$tool" --error-exitcode 9 $bin/gpu_suite step $st > "$out/san.txt" 2>&1
                s=$?
                grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Error|error|step " "$out/san.txt" | head -n 12
                echo "-- $tool $(basename $st) exit status: $s$( [ $s = 124 ] && echo ' (timed out)')"
                [ "$s" = 0 ] || rc=1
            done
        done
        echo "== 3. timing"
        timeout 200 $bin/gpu_suite timing ${TIMING_ARGS:-} || rc=1
        echo "== 4. tree verification timing (SAMPLER.md 11)"
        timeout 120 $bin/gpu_suite tree || rc=1
        echo "== gpu-suite exit status: $rc"
        exit $rc
    } 2>&1 | tee "$log"
    exit "${PIPESTATUS[0]}"
    ;;
*)
    echo "usage: $0 build|device" >&2
    exit 2
    ;;
esac
