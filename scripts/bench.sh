#!/usr/bin/env bash
# The speed benchmark of issue 6: ours and both peers on the same shapes, in ONE device call.
#
#   scripts/bench.sh build     # here: release benchmark/autotune/gpu_suite + golden cases -> .gpu/ (git-ignored)
#   scripts/bench.sh device    # there: what the device call runs (reads .gpu/, .whl/fi066, .peers; writes $OUT)
#   scripts/bench.sh chart DIR # here: table.md + chart.svg/.png from a run's JSON files
#
# The device call (this workplace's `run` tool):
#   run(command="bash scripts/bench.sh device", carry=[".gpu", ".whl/fi066", ".peers"], timeout_s=600)
# (.peers = a copy of ../shared/peers/*.py, .whl/fi066 = the FlashInfer 0.6.6 + tvm-ffi 0.1.9 wheels:
#  ../shared/peers/README.md.)  Environment knobs: ROWS, NS (ours and peers' shapes), AUTOTUNE=1
#  (sweep chunk counts first and benchmark with the fresh table), BASELINE=1 (also ours with one
#  block per row), PEERS=0 (skip the peers), GOLDEN=0 (skip the golden bitwise check), RAW=0 (skip
#  ours with raw logprobs, SAMPLER.md 10.3, on RAW_ROWS = 1,64,384 -> raw.json), BF16=0 (skip ours
#  with bf16 logits on BF16_ROWS = $ROWS -> bf16.json: issue 12 item 4, floor at 2 bytes per logit;
#  the kernels read the bf16 in place, widened at load, bitwise vs the CPU on the same bf16 for R <= 16),
#  ANCHORS=1 (also the selection-only anchors CUB DeviceBatchedTopK and DeepSelect from
#  .gpux-anchors/anchors.tgz, built by `scripts/anchors.sh build`; carry ".gpux-anchors" too ->
#  anchors.json, anchors.md).
#
# Device part, in order: FlashInfer's JIT prebuild in the background; golden cases CUDA vs CPU
# (bitwise); [autotune]; our benchmark (copy floor, eager step, graph replay, per kernel, bitwise
# vs CPU for R <= 16); [baseline]; FlashInfer and torch peers; the target table with ratios.
# $OUT gets: bench.log, ours.json, ours.csv, table.md, fi.json, torch.json, raw.json, bf16.json [, tuning.json, base.json].
# Afterwards, here: copy $OUT's files to docs/bench/<run>/ and `scripts/bench.sh chart docs/bench/<run>`
# (table.md again, chart.svg from `benchmark chart`, chart.png from scripts/bench_chart.py with Pillow).
set -u
here="$(cd "$(dirname "$0")/.." && pwd)"
cd "$here"
ROWS="${ROWS:-1,6,16,64,96,256,384}"
NS="${NS:-1024,4096,0}"

case "${1:-}" in
build)
    set -e
    export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$here/target}"
    cargo build --release --example benchmark --example autotune --example gpu_suite --example conformance
    mkdir -p .gpu/bin .gpu/golden
    for e in benchmark autotune gpu_suite conformance; do cp "$CARGO_TARGET_DIR/release/examples/$e" .gpu/bin/; done
    strip .gpu/bin/* 2>/dev/null || true
    cp "${GOLDEN_DIR:-$here/conformance/golden}"/*.json .gpu/golden/
    mkdir -p .gpu/golden/next && cp "${GOLDEN_DIR:-$here/conformance/golden}"/next/*.json .gpu/golden/next/
    git rev-parse HEAD > .gpu/commit 2>/dev/null || true
    du -sh .gpu
    ;;
device)
    out="${OUT:-/tmp/bench-out}"
    mkdir -p "$out"
    bin=.gpu/bin
    rc=0
    {
        echo "== bench on $(hostname) at $(date -u +%FT%TZ), commit $(cat .gpu/commit 2>/dev/null), ROWS=$ROWS NS=$NS"
        nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader
        driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)
        if [ "${PEERS:-1}" = 1 ]; then
            python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/fi066/*.whl && export PYTHONPATH=/tmp/site
            export PYTHONUNBUFFERED=1 PATH=$PATH:/usr/local/cuda/bin
            (cd .peers && python3 flashinfer_peer.py --prebuild > /tmp/prebuild.log 2>&1; echo $? > /tmp/prebuild.rc) &
            prebuild=$!
        fi
        if [ "${GOLDEN:-1}" = 1 ]; then
            echo "== golden cases: CUDA vs expected and vs CPU (bitwise)"
            timeout 200 $bin/gpu_suite golden .gpu/golden > /tmp/golden.log 2>&1 || rc=1
            grep -v -E "^  ok |: ok" /tmp/golden.log | tail -15
        fi
        if [ "${AUTOTUNE:-0}" = 1 ]; then
            echo "== autotune"
            timeout 240 $bin/autotune --driver "$driver" --out "$out/tuning.json" 2>&1 | tr '\r' '\n' | grep -v "^autotune \[" || rc=1
            export SAMPLER_CUDA_TUNING="$out/tuning.json"
        fi
        echo "== ours"
        timeout 240 $bin/benchmark run --rows "$ROWS" --n "$NS" --json "$out/ours.json" --csv "$out/ours.csv" || rc=1
        if [ "${PROFILE:-0}" = 1 ]; then
            # Nsight Compute on a few kernels of two shapes (warp stall reasons, throughput).
            ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
            echo "== profile (${ncu:-no ncu})"
            if [ -n "$ncu" ]; then
                for shape in "1 1024" "384 0"; do
                    set -- $shape
                    timeout 150 "$ncu" -k "regex:${PROFILE_KERNELS:-topn_chunk|topn_merge|row_mass|mask_check_chunk}" -c 4 \
                        --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section LaunchStats --section Occupancy \
                        $bin/benchmark run --rows $1 --n $2 --reps 1 --check-rows 0 > "$out/ncu-R$1-N$2.txt" 2>&1 || rc=1
                    grep -iE "^  [a-z_]+_t[0-9]+|Duration|Issued Instruction|stall|Achieved Occupancy|Registers Per|Dynamic Shared|Memory Throughput|Compute \\(SM\\) Throughput" "$out/ncu-R$1-N$2.txt" | cut -c1-220 | head -120
                done
            fi
        fi
        if [ "${RAW:-1}" = 1 ]; then
            # SAMPLER.md 10.3: every request reports raw logprobs (mask_check's tile sums + raw_logprobs).
            echo "== ours, raw logprobs"
            timeout 150 $bin/benchmark run --rows "${RAW_ROWS:-1,64,384}" --n "$NS" --reps 30 --logprobs-mode raw --json "$out/raw.json" || rc=1
        fi
        if [ "${BF16:-1}" = 1 ]; then
            # Issue 12 item 4: the same step on bf16 logits (half the bytes read; floor at 2 bytes per logit).
            echo "== ours, bf16 logits"
            timeout 200 $bin/benchmark run --rows "${BF16_ROWS:-$ROWS}" --n "$NS" --reps 30 --dtype bf16 --json "$out/bf16.json" || rc=1
        fi
        if [ "${BASELINE:-0}" = 1 ]; then
            echo "== ours, one block per row (chunks 1)"
            timeout 200 $bin/benchmark run --rows "$ROWS" --n "$NS" --chunks 1 --check-rows 0 --reps 20 --json "$out/base.json" || rc=1
        fi
        if [ "${PEERS:-1}" = 1 ]; then
            echo "== peers (waiting for the FlashInfer prebuild)"
            wait $prebuild
            echo "prebuild exit $(cat /tmp/prebuild.rc)"; tail -3 /tmp/prebuild.log
            pn=$(echo "$NS" | tr ',' '\n' | sort -n | paste -sd,)
            (cd .peers && timeout 200 python3 flashinfer_peer.py --graph --rows "$ROWS" --n "$pn" --json "$out/fi.json") || rc=1
            (cd .peers && timeout 120 python3 torch_sampler.py --rows "$ROWS" --n "$pn" --json "$out/torch.json") || rc=1
        fi
        if [ "${ANCHORS:-0}" = 1 ]; then
            # docs/GPU_NOTES.md "Selection anchors": compiles with the device's nvcc, then times each.
            echo "== selection anchors (CUB, DeepSelect)"
            rm -rf /tmp/anc && mkdir -p /tmp/anc && tar xzf .gpux-anchors/anchors.tgz -C /tmp/anc &&
                OUT="$out" timeout 280 bash /tmp/anc/scripts/anchors.sh device || rc=1
        fi
        echo "== table"
        $bin/benchmark table "$out/ours.json" --fi "$out/fi.json" --torch "$out/torch.json" --bf16 "$out/bf16.json" --md "$out/table.md"
        echo "== bench exit status: $rc"
        exit $rc
    } 2>&1 | tee "$out/bench.log"
    exit "${PIPESTATUS[0]}"
    ;;
chart)
    # here, after the device call: docs/bench/<run>/{ours,fi,torch}.json -> table.md, chart.svg, chart.png
    d="${2:?usage: $0 chart DIR}"
    b="${CARGO_TARGET_DIR:-$here/target}/release/examples/benchmark"
    "$b" table "$d/ours.json" --fi "$d/fi.json" --torch "$d/torch.json" --bf16 "$d/bf16.json" --md "$d/table.md" > /dev/null
    "$b" chart "$d/ours.json" --fi "$d/fi.json" --torch "$d/torch.json" "$d/chart.svg"
    python3 "$here/scripts/bench_chart.py" "$d" || echo "no Pillow: chart.svg only (pip install pillow)"
    ;;
*)
    echo "usage: $0 build|device|chart DIR" >&2
    exit 2
    ;;
esac
