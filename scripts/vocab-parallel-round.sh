#!/usr/bin/env bash
# Vocabulary-parallel sampling over NCCL (issue 15): build here, run on two H200s in ONE device call.
#
#   scripts/vocab-parallel-round.sh build    # here: release binary + golden cases into .vpx/ (git-ignored)
#   scripts/vocab-parallel-round.sh device   # there: what the device call runs (reads .vpx/, writes $OUT)
#
# The device call (the `run` tool of this workplace), carrying .vpx:
#   run(command="bash scripts/vocab-parallel-round.sh device", kind="nvidia-h200-x2", carry=[".vpx"], timeout_s=600)
#
# On the device (log in $OUT/vocab-parallel.log):
#   1. examples/vocab_parallel with TP = 2 over NCCL on GPUs 0 and 1: every finishing rank
#      bitwise equal to the single-GPU sampler (CUDA) on the gathered logits, for the tour
#      batches (N = 1024, 4096, off) and every golden case, on equal and uneven layouts,
#      finishing on every rank and on the driver only;
#   2. the same bitwise check (tour batches) over communicators created outside the sampler and
#      wrapped in tp::RawNcclCollective (how an engine hands over its TP group's communicator);
#   3. the table: bytes gathered per rank and step time, vocab-parallel vs gather-then-sample,
#      R = 1, 64, 384 x N = 1024, 4096, off (V = 129280), plus the same payloads as
#      device-resident NCCL all-gathers.
# Record the result in docs/GPU_NOTES.md (by hand, from the log). Exit status 0 = all equal.
set -u
here="$(cd "$(dirname "$0")/.." && pwd)"
cd "$here"

case "${1:-}" in
build)
    set -e
    export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$here/target}"
    cargo build --release --example vocab_parallel
    mkdir -p .vpx/bin .vpx/golden/next
    cp "$CARGO_TARGET_DIR/release/examples/vocab_parallel" .vpx/bin/
    strip .vpx/bin/* 2>/dev/null || true
    golden="${GOLDEN_DIR:-$here/conformance/golden}"
    cp "$golden"/*.json .vpx/golden/
    cp "$golden"/next/*.json .vpx/golden/next/
    git rev-parse HEAD > .vpx/commit 2>/dev/null || true
    du -sh .vpx
    echo 'now: run(command="bash scripts/vocab-parallel-round.sh device", kind="nvidia-h200-x2", carry=[".vpx"], timeout_s=600)'
    ;;
device)
    out="${OUT:-/tmp/vocab-parallel-out}"
    mkdir -p "$out"
    log="$out/vocab-parallel.log"
    # NVLink multicast off (KINDS.md).
    export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
    {
        echo "== vocab-parallel round on $(hostname) at $(date -u +%FT%TZ), commit $(cat .vpx/commit 2>/dev/null)"
        nvidia-smi -L
        timeout 420 .vpx/bin/vocab_parallel --tp 2 --collective nccl --golden .vpx/golden --rows 1,64,384 --reps 5
        a=$?
        echo "== the same check on communicators made outside the sampler (tp::RawNcclCollective)"
        timeout 120 .vpx/bin/vocab_parallel --tp 2 --collective nccl-raw --skip-table
        b=$?
        echo "vocab_parallel exit status: $a (nccl), $b (nccl-raw)"
    } 2>&1 | tee "$log"
    grep -q "vocab_parallel exit status: 0 (nccl), 0 (nccl-raw)" "$log"
    ;;
*)
    echo "usage: $0 build|device" >&2
    exit 2
    ;;
esac
