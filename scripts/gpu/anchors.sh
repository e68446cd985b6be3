#!/usr/bin/env bash
# Selection-only anchors beside our sampler on the H200 (issue 12, "How it is measured"):
#   - CUB's cub::DeviceBatchedTopK::MaxPairs from CCCL main (header-only), SM90 cluster backend,
#     with determinism::gpu_to_gpu + tie_break::prefer_smaller_index (lower ids win ties: our rule)
#     and, for scale, determinism::not_guaranteed;
#   - DeepSeek's DeepSelect fp32 top-k kernel (csrc/cuda_kernels/v3_fp32) built for sm_90a
#     (the PyPI wheel tokenspeed-deepselect carries only sm_100a/sm_103a code).
# Shapes: V = 129280 fp32 logits, R in ROWS (1,16,64,256,384), k in 1024 and 4096. Each call is
# timed alone: median of REPS (30) CUDA-event timings, L2 flushed before each by a 256 MiB memset,
# graph replay (and eager); GB/s = R * V * 4 bytes (one read of the logits) / median.
# benches/anchors/harness.cuh says what is checked (exact top-k set, lower-id ties, a tie row).
#
#   scripts/gpu/anchors.sh build    # here: stage CCCL + CUTLASS headers, the DeepSelect sources and
#                               # the drivers into .gpu/anchors/anchors.tgz (git-ignored, ~6 MB)
#   scripts/gpu/anchors.sh device   # there: compile with the device's nvcc (sm_90a, -O3, all builds in
#                               # parallel), run each binary, write $OUT/anchors.json + anchors.md
#   scripts/gpu/anchors.sh check    # here: compile every build with NVCC (e.g. pip's nvidia-cuda-nvcc)
#                               # and run benches/anchors/harness_test.cu (host-only test of the checks)
#
# The device call (this workplace's `run` tool), from /work/main with .gpux-anchors carried; the
# script runs from the tarball, so it works whether or not this branch is merged:
#   run(command="mkdir -p /tmp/anc && tar xzf .gpu/anchors/anchors.tgz -C /tmp/anc && bash /tmp/anc/scripts/gpu/anchors.sh device",
#       carry=[".gpu/anchors"], timeout_s=300)
#
# Sources (build):
#   CCCL     the search tool's `fetch github:NVIDIA/cccl` git dir (CCCL_GIT, default
#            /work/.mirror/NVIDIA+cccl/repo), at CCCL_REV (default its HEAD): cub/, libcudacxx/, thrust/.
#   CUTLASS  `fetch github:NVIDIA/cutlass` (CUTLASS_GIT), at CUTLASS_REV: include/cute, include/cutlass
#            (DeepSelect includes CuTe's TMA copy and barrier wrappers).
#   DeepSelect  a source tree with csrc/ (DEEPSELECT_SRC, default $ANCHORS_DIR/ds): upstream
#            deepseek-ai/DeepSelect commit 0f03b68 for the fp32 kernel (cuda_kernels/v3_fp32/topk_select.cuh,
#            cuda_kernels/common_parts.cuh less its bf16 base class), the small headers it includes, and
#            kerutils reduced to what the kernel uses; see its PROVENANCE file. Its code is MIT-licensed
#            and stays out of this repository (only .gpu/anchors, git-ignored, holds it).
set -u
here="$(cd "$(dirname "$0")/../.." && pwd)"
ROWS="${ROWS:-1,16,64,256,384}"
REPS="${REPS:-30}"
KS="${KS:-1024 4096}"
# Where the tarball goes (and DeepSelect's staged sources are): .gpu/anchors of the checkout
# (git-ignored); `scripts/gpu/round.sh build` copies the tarball into the round's staging.
ANCHORS_DIR="${ANCHORS_DIR:-$here/.gpu/anchors}"

# The builds: name, source, extra flags. CUB needs CUB_DISABLE_TOPK_UNSUPPORTED_ARCH_ASSERT with
# nvcc 13.0 (see docs/gpu/HOWTO.md "Selection anchors"); its runtime dispatch still picks the
# cluster backend on sm_90 for these requests.
builds() {
    for k in $KS; do
        echo "cub_k${k}_lowid cub_topk.cu -DANCHOR_K=$k -DCUB_LOWID=1"
        echo "cub_k${k}_any cub_topk.cu -DANCHOR_K=$k -DCUB_LOWID=0"
        echo "ds_k${k}_unsorted deepselect_topk.cu -DANCHOR_K=$k -DDS_SORTED=0"
        echo "ds_k${k}_sorted deepselect_topk.cu -DANCHOR_K=$k -DDS_SORTED=1"
    done
}

# nvcc flags per source (root = the unpacked tarball).
flags_for() {
    local src="$1" root="$2"
    local common="-std=c++20 -O3 -gencode=arch=compute_90a,code=sm_90a -Xcompiler -O2 -DNDEBUG
        -I $root/cccl/libcudacxx/include -I $root/cccl/cub -I $root/cccl/thrust -I $root/benches/anchors"
    case "$src" in
    cub_topk.cu) echo "$common -DCUB_DISABLE_TOPK_UNSUPPORTED_ARCH_ASSERT" ;;
    deepselect_topk.cu)
        # DeepSelect's own nvcc flags (setup.py): fast math without flushing subnormals, since the
        # kernel adds integers as fp32 subnormals.
        echo "$common --expt-relaxed-constexpr --expt-extended-lambda --use_fast_math --ftz=false
            -Wno-deprecated-declarations -DKERUTILS_IS_BUILD_ON_CUDA
            -I $root/deepselect/csrc -I $root/deepselect/csrc/kerutils/include -I $root/cutlass/include" ;;
    esac
}

# Compiles every build in parallel into $2/bin; logs in $2/build-NAME.log; prints one line each.
compile_all() {
    local nvcc="$1" work="$2" root="$3" extra="${4:-}"
    mkdir -p "$work/bin"
    local pids=() names=()
    while read -r name src defs; do
        # At most JOBS compilers at once (default: all of them; `check` here uses 2).
        while [ "$(jobs -rp | wc -l)" -ge "${JOBS:-64}" ]; do wait -n; done
        (
            # shellcheck disable=SC2046
            timeout "${BUILD_TIMEOUT:-150}" "$nvcc" $(flags_for "$src" "$root") $defs $extra \
                "$root/benches/anchors/$src" -o "$work/bin/$name" > "$work/build-$name.log" 2>&1
            echo $? > "$work/build-$name.rc"
        ) &
        pids+=($!)
        names+=("$name")
    done < <(builds)
    for p in "${pids[@]}"; do wait "$p"; done
    local failed=0
    for name in "${names[@]}"; do
        local rc
        rc=$(cat "$work/build-$name.rc" 2>/dev/null || echo 1)
        if [ "$rc" = 0 ]; then
            echo "build $name: ok"
        else
            failed=1
            echo "build $name: FAILED (exit $rc); last lines:"
            grep -E "error|Error" "$work/build-$name.log" | head -5 | cut -c1-400
            tail -5 "$work/build-$name.log" | cut -c1-400
        fi
    done
    return $failed
}

case "${1:-}" in
build)
    set -e
    dest="$ANCHORS_DIR"
    stage="$(mktemp -d)"
    trap 'rm -rf "$stage"' EXIT
    cccl_git="${CCCL_GIT:-/work/.mirror/NVIDIA+cccl/repo}"
    cutlass_git="${CUTLASS_GIT:-/work/.mirror/NVIDIA+cutlass/repo}"
    ds="${DEEPSELECT_SRC:-$dest/ds}"
    for d in "$cccl_git" "$cutlass_git"; do
        [ -d "$d" ] || { echo "missing $d: fetch github:NVIDIA/cccl and github:NVIDIA/cutlass with the search tool's fetch" >&2; exit 1; }
    done
    [ -f "$ds/csrc/cuda_kernels/v3_fp32/topk_select.cuh" ] || { echo "missing DeepSelect sources in $ds (DEEPSELECT_SRC)" >&2; exit 1; }
    cccl_rev="${CCCL_REV:-$(git --git-dir="$cccl_git" rev-parse HEAD)}"
    cutlass_rev="${CUTLASS_REV:-$(git --git-dir="$cutlass_git" rev-parse HEAD)}"
    mkdir -p "$stage/cccl" "$stage/cutlass" "$stage/deepselect" "$stage/benches" "$stage/scripts/gpu"
    git --git-dir="$cccl_git" archive "$cccl_rev" cub/cub libcudacxx/include thrust/thrust LICENSE | tar x -C "$stage/cccl"
    # cutlass's archive of the whole tree trips on LFS media; take only the headers.
    # (git archive still reports the missing LFS media objects of the snapshot on stderr: noise.)
    git --git-dir="$cutlass_git" archive "$cutlass_rev" include/cute include/cutlass LICENSE.txt 2>/dev/null | tar x -C "$stage/cutlass"
    [ -f "$stage/cutlass/include/cute/arch/copy_sm90_tma.hpp" ] || { echo "CUTLASS headers missing from $cutlass_git" >&2; exit 1; }
    cp -r "$ds/csrc" "$stage/deepselect/"
    for f in PROVENANCE LICENSE; do [ -f "$ds/$f" ] && cp "$ds/$f" "$stage/deepselect/"; done
    cp -r "$here/benches/anchors" "$stage/benches/"
    cp "$here/scripts/gpu/anchors.sh" "$stage/scripts/gpu/"
    {
        echo "cccl $cccl_rev"
        echo "cutlass $cutlass_rev"
        echo "deepselect $(head -1 "$ds/PROVENANCE" 2>/dev/null || echo unknown)"
        echo "drivers $(git -C "$here" rev-parse HEAD 2>/dev/null || echo unknown)"
    } > "$stage/SOURCES"
    mkdir -p "$dest"
    tar czf "$dest/anchors.tgz" -C "$stage" .
    cat "$stage/SOURCES"
    du -sh "$dest/anchors.tgz"
    ;;
check)
    # Compile everything here (no GPU): NVCC=/path/to/nvcc scripts/gpu/anchors.sh check
    work="$(mktemp -d)"
    mkdir -p "$work/src"
    tar xzf "$ANCHORS_DIR/anchors.tgz" -C "$work/src"
    nvcc="${NVCC:-nvcc}"
    lib="$(dirname "$(dirname "$(command -v "$nvcc" || echo "$nvcc")")")/lib"
    JOBS="${JOBS:-2}" compile_all "$nvcc" "$work" "$work/src" "-L$lib"
    rc=$?
    # The checks the drivers print (exact top-k set, lower-id ties) are tested on the host.
    "$nvcc" -std=c++20 "$work/src/benches/anchors/harness_test.cu" -o "$work/harness_test" "-L$lib" &&
        "$work/harness_test" || rc=1
    ls -la "$work/bin"
    rm -rf "$work"
    exit $rc
    ;;
device)
    # Runs from the unpacked tarball (this script's ../), or from a checkout after `build`.
    root="$here"
    if [ ! -d "$root/cccl" ]; then
        root="$(mktemp -d)"
        tar xzf "$ANCHORS_DIR/anchors.tgz" -C "$root"
    fi
    out="${OUT:-/tmp/anchors-out}"
    mkdir -p "$out"
    work="$(mktemp -d)"
    nvcc="${NVCC:-/usr/local/cuda/bin/nvcc}"
    start=$(date +%s)
    {
        echo "== anchors on $(hostname) at $(date -u +%FT%TZ); ROWS=$ROWS REPS=$REPS KS=$KS"
        cat "$root/SOURCES" 2>/dev/null
        nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader 2>&1 | head -1
        "$nvcc" --version | tail -1
        echo "== compile ($(nproc) cores, ${JOBS:-all} builds at a time)"
        compile_all "$nvcc" "$work" "$root" || true
        echo "== compile took $(( $(date +%s) - start )) s"
        : > "$out/anchors.jsonl"
        while read -r name src defs; do
            if [ -x "$work/bin/$name" ]; then
                echo "== run $name"
                timeout "${RUN_TIMEOUT:-60}" "$work/bin/$name" --rows "$ROWS" --reps "$REPS" \
                    > "$work/$name.jsonl" 2> "$work/$name.err"
                rc=$?
                cat "$work/$name.jsonl" >> "$out/anchors.jsonl"
                [ "$rc" = 0 ] || { echo "run $name: exit $rc"; tail -5 "$work/$name.err"; }
                [ -s "$work/$name.err" ] && [ "$rc" = 0 ] && tail -3 "$work/$name.err"
            else
                echo "== skip $name (no binary)"
            fi
        done < <(builds)
        for f in "$work"/build-*.log; do cp "$f" "$out/" 2>/dev/null; done
        echo "== table"
        python3 - "$out" <<'PY'
import json, sys, pathlib
out = pathlib.Path(sys.argv[1])
rows = [json.loads(l) for l in (out / "anchors.jsonl").read_text().splitlines() if l.strip().startswith("{")]
(out / "anchors.json").write_text(json.dumps(rows, indent=1))
hdr = "| anchor | variant | tie rule | R | k | us (graph) | us (eager) | GB/s | top-k set | lower-id ties | tie row: set / lower id |"
lines = [hdr, "|" + "---|" * 11]
for r in rows:
    if "error" in r:
        lines.append("| {anchor} | {variant} | | {R} | {k} | failed: {error} | | | | | |".format(**r))
        continue
    lines.append("| {anchor} | {variant} | {tie_rule} | {R} | {k} | {graph_us:.1f} | {eager_us:.1f} | {gbps:.0f} | {set_ok} | {lowid_ok} | {tie_row_set_ok} / {tie_row_lowid_ok} |".format(**r))
text = "\n".join(lines) + "\n"
(out / "anchors.md").write_text(text)
print(text)
PY
        echo "== anchors took $(( $(date +%s) - start )) s"
    } 2>&1 | tee "$out/anchors.log"
    ;;
*)
    echo "usage: $0 build|device|check" >&2
    exit 2
    ;;
esac
