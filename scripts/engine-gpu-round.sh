#!/usr/bin/env bash
# Issue 11 on the H200 in ONE device call: the engine's path through the
# public API (device logits, graphs, bf16/f16), sample --backend cuda, and
# the benchmark beside the backend-level figure.
#
#   scripts/engine-gpu-round.sh build    # here: binaries + golden cases into .gpu-engine/ (git-ignored)
#   run(command="bash scripts/engine-gpu-round.sh device", carry=[".gpu-engine"], timeout_s=600)
#
# On the device, logging to $OUT/engine-gpu.log:
#   1. tests/cuda_backend.rs: every golden case on CUDA vs CPU (conformance),
#      and through Sampler with device logits (eager and graph replay) and
#      bf16/f16 logits vs their f32 widening, bitwise;
#   2. gpu_suite golden (CUDA vs expected and vs CPU);
#   3. sample --backend cuda (the verify step R = 16 must print <= 0.3 ms);
#   4. benchmark run: backend eager/graph vs Sampler eager/graph with device logits.
set -u
here="$(cd "$(dirname "$0")/.." && pwd)"
cd "$here"
d=.gpu-engine

case "${1:-}" in
build)
    set -e
    grep -qx '/.gpu-engine/' .git/info/exclude 2>/dev/null || echo '/.gpu-engine/' >> "$(git rev-parse --git-path info/exclude)"
    cargo build --release --example benchmark --example sample --example gpu_suite
    t=$(cargo test --release --test cuda_backend --no-run --message-format=json 2>/dev/null | grep -o '"executable":"[^"]*cuda_backend[^"]*"' | tail -1 | cut -d'"' -f4)
    rm -rf $d && mkdir -p $d/bin $d/golden/next
    cp target/release/examples/benchmark target/release/examples/sample target/release/examples/gpu_suite "$t" $d/bin/
    mv $d/bin/$(basename "$t") $d/bin/cuda_backend
    # tests/cuda_counts: the golden cases with SAMPLER_COUNTS_IN_TOPN=1 (final-round.sh counts).
    tc=$(cargo test --release --test cuda_counts --no-run --message-format=json 2>/dev/null | grep -o '"executable":"[^"]*cuda_counts[^"]*"' | tail -1 | cut -d'"' -f4)
    cp "$tc" $d/bin/cuda_counts
    strip $d/bin/* 2>/dev/null || true
    golden="${GOLDEN_DIR:-$here/conformance/golden}"
    cp "$golden"/*.json $d/golden/ && cp "$golden"/next/*.json $d/golden/next/
    git rev-parse HEAD > $d/commit
    du -sh $d
    echo 'now: run(command="bash scripts/engine-gpu-round.sh device", carry=[".gpu-engine"], timeout_s=600)'
    ;;
device)
    out="${OUT:-/tmp/engine-gpu-out}"
    mkdir -p "$out"
    log="$out/engine-gpu.log"
    rc=0
    {
        echo "== engine-gpu-round on $(hostname) at $(date -u +%FT%TZ), commit $(cat $d/commit)"
        nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
        echo "== 1. tests/cuda_backend (public device API, graphs, bf16/f16)"
        SAMPLER_GOLDEN_DIR=$d/golden timeout 200 $d/bin/cuda_backend --test-threads 1 --nocapture || rc=1
        echo "== 2. gpu_suite golden"
        timeout 120 $d/bin/gpu_suite golden $d/golden || rc=1
        echo "== 3. sample --backend cuda"
        timeout 60 $d/bin/sample --backend cuda --steps 3 | grep -E "sampler|step" || rc=1
        timeout 60 $d/bin/sample --backend cuda --steps 3 --force-topk 1024 | grep -E "sampler|step" || rc=1
        echo "== 4. benchmark (backend level and through Sampler)"
        timeout 240 $d/bin/benchmark run --rows ${ROWS:-1,16,64,384} --n ${NS:-1024,4096,0} --reps ${REPS:-30} --json "$out/bench.json" || rc=1
        echo "== done, rc=$rc"
    } > "$log" 2>&1
    cat "$log" | tail -c 11000
    exit $rc
    ;;
*)
    echo "usage: $0 build|device" >&2
    exit 2
    ;;
esac
