#!/usr/bin/env bash
# A whole GPU round of the merged tree in TWO device calls (correctness, then speed).
#
#   scripts/final-round.sh build          # here: every binary, the wheel, golden cases -> .gpux-final/*.tgz
#   run(command="bash scripts/final-round.sh check", carry=[".gpux-final", ".whl/fi066"], timeout_s=600)
#   run(command="bash scripts/final-round.sh speed", carry=[".gpux-final", ".gpux-anchors/anchors.tgz", ".whl/fi066", ".peers"], timeout_s=600)
#   run(command="bash scripts/final-round.sh counts", carry=[".gpux-final"], timeout_s=600)
#   run(command="bash scripts/final-round.sh stream", carry=[".gpux-final"], timeout_s=600)
#
# counts: Caps::counts_in_topn on CUDA (off by default; SAMPLER_COUNTS_IN_TOPN=1) beside off, in
#        one call: tests/cuda_counts (every golden case, counts on, vs the CPU: public API and backend
#        level at chunks 1/2/4), gpu_suite golden + adversarial with the variable 0 and 1, then
#        `benchmark run` with 0 and 1 on the same shapes (ours only; per-kernel times, node counts)
#        -> $OUT/counts.log, ours-counts0.json, ours-counts1.json. COUNTS_ROWS / COUNTS_NS: the shapes.
#
# stream: Caps::stream_select (force_topn_stream, off by default; SAMPLER_STREAM_SELECT=1) beside
#        off, in one call: tests/cuda_counts (golden cases and adversarial rows at N = 1/50/1024/4096
#        with the stream select on, vs the CPU, with each row's fallback code), gpu_suite golden +
#        adversarial with the variable 0 and 1, then `benchmark run` with 0 and 1 (ours only)
#        -> $OUT/stream.log, ours-stream0.json, ours-stream1.json. STREAM_ROWS / STREAM_NS: the shapes.
# check: tests/cuda_backend (public device API, graphs, bf16/f16 device logits), gpu_suite golden
#        (f32, then bf16/f16 device logits), gpu_suite adversarial (selection edge cases),
#        sample --backend cuda, compute-sanitizer memcheck + racecheck on representative steps,
#        then the Python wheel on torch CUDA tensors (scripts/python-gpu.sh device).
# speed: scripts/bench.sh device (ours f32 + bf16 + raw logprobs, through the backend and through
#        Sampler, FlashInfer 0.6.6 and torch side by side, and the CUB / DeepSelect anchors).
# Logs and JSON land in $OUT; copy them to docs/bench/<run>/ here.
set -u
here="$(cd "$(dirname "$0")/.." && pwd)"
cd "$here"
f=.gpux-final

case "${1:-}" in
build)
    set -e
    export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$here/target}"
    bash scripts/engine-gpu-round.sh build      # .gpu-engine: cuda_backend, benchmark, sample, gpu_suite
    bash scripts/bench.sh build                 # .gpu: benchmark, autotune, gpu_suite, conformance
    bash scripts/python-gpu.sh build            # .gpu-py: the abi3 wheel + golden cases
    [ -f .gpux-anchors/anchors.tgz ] || bash scripts/anchors.sh build
    mkdir -p $f
    tar czf $f/tree.tgz .gpu .gpu-engine .gpu-py scripts sampler-py/tests sampler-py/bench sampler-py/pyproject.toml README.md
    ls -la $f
    ;;
check)
    out="${OUT:-/tmp/final-out}"
    mkdir -p "$out" && tar xzf $f/tree.tgz
    rc=0
    {
        echo "== final round (check) at $(date -u +%FT%TZ), commit $(cat .gpu/commit)"
        d=.gpu-engine
        echo "== tests/cuda_backend"
        SAMPLER_GOLDEN_DIR=$d/golden timeout 200 $d/bin/cuda_backend --test-threads 1 2>&1 | grep -vE "^test .* ok$" | tail -25 || rc=1
        echo "== gpu_suite golden (f32, bf16, f16)"
        timeout 200 .gpu/bin/gpu_suite golden .gpu/golden 2>&1 | grep -v -E "^  ok |: ok" | tail -12 || rc=1
        echo "== gpu_suite adversarial"
        timeout 90 .gpu/bin/gpu_suite adversarial 2>&1 | tail -12 || rc=1
        echo "== sample --backend cuda"
        timeout 60 $d/bin/sample --backend cuda --steps 3 | grep -E "sampler|step" || rc=1
        g=.gpu/golden
        cs=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
        echo "== compute-sanitizer ($cs)"
        for tool in ${SAN_TOOLS:-memcheck racecheck}; do
            for st in ${SAN_STEPS:-$g/case-101-021.json $g/case-102-002.json $g/case-102-000.json $g/next/tree-501-023.json}; do
                timeout ${SAN_TIMEOUT:-60} "$cs" --tool "$tool" --error-exitcode 9 .gpu/bin/gpu_suite step $st > "$out/san.txt" 2>&1
                s=$?
                echo "-- $tool $(basename $st): exit $s; $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$out/san.txt" | head -2 | tr '\n' ' ')"
                [ "$s" = 0 ] || { rc=1; grep -E "Error|error" "$out/san.txt" | head -5; }
            done
        done
        if [ "${PY:-1}" = 1 ]; then
            echo "== Python on torch CUDA tensors"
            OUT="$out" PYTEST_S=${PYTEST_S:-90} FI_S=${FI_S:-45} bash scripts/python-gpu.sh device > "$out/python.txt" 2>&1 || rc=1
            grep -E "passed|failed|error|overhead|us|==" "$out/python.txt" | tail -40
        fi
        echo "== check rc=$rc"
    } 2>&1 | tee "$out/check.log"
    exit $rc
    ;;
counts)
    out="${OUT:-/tmp/final-out}"
    mkdir -p "$out" && tar xzf $f/tree.tgz
    rc=0
    {
        echo "== counts in top-N (SAMPLER_COUNTS_IN_TOPN) at $(date -u +%FT%TZ), commit $(cat .gpu/commit)"
        d=.gpu-engine
        echo "== tests/cuda_counts (golden, counts on, vs CPU)"
        SAMPLER_GOLDEN_DIR=$d/golden timeout 200 $d/bin/cuda_counts --test-threads 1 --nocapture 2>&1 | grep -vE "^test .* ok$" | tail -15 || rc=1
        for c in 0 1; do
            echo "== gpu_suite golden, SAMPLER_COUNTS_IN_TOPN=$c"
            SAMPLER_COUNTS_IN_TOPN=$c timeout 200 .gpu/bin/gpu_suite golden .gpu/golden 2>&1 | grep -v -E "^  ok |: ok" | tail -8 || rc=1
            echo "== gpu_suite adversarial, SAMPLER_COUNTS_IN_TOPN=$c"
            SAMPLER_COUNTS_IN_TOPN=$c timeout 90 .gpu/bin/gpu_suite adversarial 2>&1 | tail -6 || rc=1
        done
        for c in 0 1; do
            echo "== ours, SAMPLER_COUNTS_IN_TOPN=$c"
            SAMPLER_COUNTS_IN_TOPN=$c timeout 200 .gpu/bin/benchmark run --rows "${COUNTS_ROWS:-1,16,64,256,384}" --n "${COUNTS_NS:-1024,4096,0}" \
                --json "$out/ours-counts$c.json" || rc=1
        done
        echo "== counts rc=$rc"
        exit $rc
    } 2>&1 | tee "$out/counts.log"
    exit "${PIPESTATUS[0]}"
    ;;
stream)
    out="${OUT:-/tmp/final-out}"
    mkdir -p "$out" && tar xzf $f/tree.tgz
    rc=0
    {
        echo "== stream select (SAMPLER_STREAM_SELECT) at $(date -u +%FT%TZ), commit $(cat .gpu/commit)"
        d=.gpu-engine
        echo "== tests/cuda_counts (golden + adversarial, stream select on, vs CPU)"
        SAMPLER_GOLDEN_DIR=$d/golden timeout 240 $d/bin/cuda_counts --test-threads 1 --nocapture 2>&1 | grep -vE "^test .* ok$" | tail -25 || rc=1
        for c in 1 0; do
            echo "== gpu_suite golden, SAMPLER_STREAM_SELECT=$c"
            SAMPLER_STREAM_SELECT=$c timeout 200 .gpu/bin/gpu_suite golden .gpu/golden 2>&1 | grep -v -E "^  ok |: ok" | tail -8 || rc=1
        done
        echo "== gpu_suite adversarial (the environment's setting, then the other)"
        SAMPLER_STREAM_SELECT=1 timeout 120 .gpu/bin/gpu_suite adversarial 2>&1 | tail -12 || rc=1
        for c in 1 0; do
            echo "== ours, SAMPLER_STREAM_SELECT=$c"
            SAMPLER_STREAM_SELECT=$c timeout 200 .gpu/bin/benchmark run --rows "${STREAM_ROWS:-1,16,64,256,384}" --n "${STREAM_NS:-1024,4096,0}" \
                --json "$out/ours-stream$c.json" || rc=1
        done
        echo "== stream rc=$rc"
        exit $rc
    } 2>&1 | tee "$out/stream.log"
    exit "${PIPESTATUS[0]}"
    ;;
speed)
    out="${OUT:-/tmp/final-out}"
    mkdir -p "$out" && tar xzf $f/tree.tgz
    OUT="$out" GOLDEN=0 ANCHORS=${ANCHORS:-1} RAW=${RAW:-1} RAW_ROWS=${RAW_ROWS:-1,64} \
        ROWS=${ROWS:-1,16,64,256,384} BF16_ROWS=${BF16_ROWS:-1,64,384} bash scripts/bench.sh device
    ;;
*)
    echo "usage: $0 build|check|speed|counts|stream" >&2
    exit 2
    ;;
esac
