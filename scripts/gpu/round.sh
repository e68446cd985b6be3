#!/usr/bin/env bash
# Every GPU round of the tree, from one staging folder (.gpu/, git-ignored).
# docs/gpu/HOWTO.md says how to run them and where the results go.
#
#   scripts/gpu/round.sh build            # here: every binary, the wheel, the golden cases, the
#                                         # anchors' sources -> .gpu/stage/, packed as .gpu/round.tgz
# then one device call per round (the workplace's `run` tool), e.g.
#   run(command="bash scripts/gpu/round.sh check",  carry=[".gpu/round.tgz", ".whl/fi066"], timeout_s=600)
#   run(command="bash scripts/gpu/round.sh speed",  carry=[".gpu/round.tgz", ".whl/fi066", ".peers"], timeout_s=600)
#   run(command="bash scripts/gpu/round.sh counts", carry=[".gpu/round.tgz"], timeout_s=600)
#   run(command="bash scripts/gpu/round.sh stream", carry=[".gpu/round.tgz"], timeout_s=600)
#   run(command="bash scripts/gpu/round.sh python", carry=[".gpu/round.tgz", ".whl/fi066"], timeout_s=300)
#   run(command="bash scripts/gpu/round.sh nccl",   carry=[".gpu/round.tgz"], kind="nvidia-h200-x2", timeout_s=600)
#   run(command="bash scripts/gpu/round.sh anchors", carry=[".gpu/round.tgz"], timeout_s=300)
# and afterwards, here: copy $OUT's files to docs/bench/<run>/ (`scripts/gpu/round.sh chart DIR`
# draws table.md and the charts of a speed run) and write docs/bench/<run>/NOTES.md.
#
# check:   tests/devices cuda_backend (public device API, graphs, bf16/f16 device logits), gpu_suite
#          golden (f32, then bf16/f16 device logits), gpu_suite adversarial (selection edge cases),
#          sample --backend cuda, compute-sanitizer memcheck + racecheck on representative steps
#          (SAN_TOOLS, SAN_STEPS, SAN_TIMEOUT; SAN_SYNTH: benchmark-shaped `gpu_suite synth R:N` steps), then the Python wheel on torch CUDA tensors (the
#          python round; PY=0 skips it). SUITE=1 adds gpu_suite's timing and tree tables and one
#          `conformance --backend cuda` case.
# counts:  Caps::counts_in_topn (SAMPLER_COUNTS_IN_TOPN) both ways: tests/devices cuda_counts (every
#          golden case vs the CPU, on and off, chunks 1/2/4), gpu_suite golden + adversarial with the
#          variable 0 and 1, then `benchmark run` with 0 and 1 on COUNTS_ROWS x COUNTS_NS
#          -> counts.log, ours-counts0.json, ours-counts1.json.
# stream:  Caps::stream_select (force_topn_stream, off by default; SAMPLER_STREAM_SELECT) beside off:
#          tests/devices cuda_counts (golden cases and adversarial rows at N = 1/50/1024/4096 with the
#          stream select on, vs the CPU, with each row's fallback code), gpu_suite golden + adversarial
#          with the variable 1 and 0, then `benchmark run` with 1 and 0 on STREAM_ROWS x STREAM_NS
#          -> stream.log, ours-stream0.json, ours-stream1.json.
# speed:   ours (f32, bf16, raw logprobs; backend level and through Sampler), FlashInfer 0.6.6 and
#          torch side by side, the CUB / DeepSelect anchors; knobs ROWS, NS, RAW, RAW_ROWS, BF16,
#          BF16_ROWS, GOLDEN, AUTOTUNE, BASELINE, PROFILE, PEERS, ANCHORS, STREAM (see speed() below)
#          -> bench.log, ours.json, ours.csv, table.md, fi.json, torch.json, raw.json, bf16.json.
# python:  the wheel offline on the device: pytest (tests/test_gpu.py on torch CUDA tensors, the
#          CPU suite, tests/test_flashinfer_api.py on numpy / torch CPU / torch CUDA), the binding overhead beside the Rust API and FlashInfer, the host profile.
# nccl:    two GPUs: examples/cp_nccl (context parallelism over NCCL) and the engine tests on the
#          CUDA backend, then examples/vocab_parallel TP = 2 over NCCL (bitwise vs one GPU, the
#          golden cases, the exchange table) and over communicators made outside the sampler.
# anchors: the selection-only anchors alone (scripts/gpu/anchors.sh device).
# chunks:  the streaming top-N over several blocks a row (SAMPLER_STREAM_CHUNKS), correctness then speed.
# profile: Nsight Compute source counters (per SASS instruction) of the hot kernels, PROF_SHAPES.
# ab:      a kernel change against AB_PTX (SAMPLER_PTX_FILE): correctness, then f32 / bf16 / chunks.
# variants: several PTX builds (VARIANTS="b c", .gpu/ptx-<v>.ptx.xz) against the binaries' own: the JIT warmed
#          for all at once, correctness of each, then f32 benchmarks interleaved and bf16.
# cluster: the top-N over thread-block clusters (Caps::cluster, SAMPLER_CLUSTER): the JIT warmed, tests/devices
#          cuda_counts clusters (golden + adversarial rows at 2/4/8/16 CTAs a row), gpu_suite golden (f32, bf16/f16)
#          at CL_CHECK sizes, adversarial (CL_ADV), synth; then `benchmark run` at CL_LIST sizes (0: off, the
#          streaming top-N) interleaved twice on CL_ROWS x CL_NS, and bf16 -> cluster.log, cl<C>-<pass>.json.
# Logs and JSON land in $OUT (default /tmp/gpu-out).
set -u
here="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$here"
g=.gpu
s=$g/stage
out="${OUT:-/tmp/gpu-out}"

# The golden cases: in the tree (conformance/golden) or beside it (../shared/golden).
golden_src() {
    if [ -n "${GOLDEN_DIR:-}" ]; then echo "$GOLDEN_DIR"
    elif [ -d "$here/conformance/golden" ]; then echo "$here/conformance/golden"
    else echo "$here/../shared/golden"; fi
}

# A test binary's path from `cargo test --no-run`.
test_exe() {
    cargo test --release --test "$1" --no-run --message-format=json 2>/dev/null \
        | grep -o "\"executable\":\"[^\"]*/$1-[^\"]*\"" | tail -1 | cut -d'"' -f4
}

# On the device: unpack the staged tree once.
unpack() {
    mkdir -p "$out"
    if [ ! -d $s/bin ]; then
        [ -f $g/round.tgz ] || { echo "no $g/round.tgz: run 'scripts/gpu/round.sh build' and carry .gpu/round.tgz" >&2; exit 2; }
        mkdir -p $s && tar xzf $g/round.tgz -C $s
    fi
}

build() {
    set -e
    export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$here/target}"
    local t="$CARGO_TARGET_DIR/release"
    rm -rf $s && mkdir -p $s/bin $s/golden/next $s/wheel
    cargo build --release --example benchmark --example autotune --example gpu_suite --example conformance \
        --example sample --example vocab_parallel --example cp_nccl
    for e in benchmark autotune gpu_suite conformance sample vocab_parallel cp_nccl; do cp "$t/examples/$e" $s/bin/; done
    # The test binaries the rounds run (cuda_backend, cuda_counts; the engine tests on CUDA).
    for b in devices engine; do
        local exe
        exe=$(test_exe $b)
        [ -n "$exe" ] || { echo "no test binary for --test $b" >&2; exit 1; }
        cp "$exe" $s/bin/$b
    done
    strip $s/bin/* 2>/dev/null || true
    local gd
    gd=$(golden_src)
    cp "$gd"/*.json $s/golden/ && cp "$gd"/next/*.json $s/golden/next/
    # The wheel (manylinux off: it only has to install on the device image). PY=0 skips it.
    if [ "${PY:-1}" = 1 ]; then
        python3 -m maturin --version >/dev/null 2>&1 || python3 -m pip install -q "maturin>=1.5,<2"
        # `bench`: the _bench_* hooks of sampler-py/bench/*.py.
        python3 -m maturin build --release --features bench --compatibility linux --out $s/wheel -m sampler-py/Cargo.toml
    fi
    # The anchors' sources (CCCL, CUTLASS, DeepSelect): built once, kept in .gpu/anchors.tgz.
    # ANCHORS=0 skips them (the speed and anchors rounds then skip the anchors).
    set +e
    if [ "${ANCHORS:-1}" = 1 ]; then
        local a=$g/anchors/anchors.tgz
        [ -f $a ] || [ ! -f .gpux-anchors/anchors.tgz ] || { mkdir -p $g/anchors && cp .gpux-anchors/anchors.tgz $a; }
        [ -f $a ] || bash scripts/gpu/anchors.sh build
        if [ -f $a ]; then cp $a $s/anchors.tgz; else echo "WARNING: no anchors staged (scripts/gpu/anchors.sh build failed): speed and anchors skip them" >&2; fi
    fi
    set -e
    git rev-parse HEAD > $s/commit 2>/dev/null || true
    tar czf $g/round.tgz -C $s .
    du -sh $s $g/round.tgz
    echo 'now, e.g.: run(command="bash scripts/gpu/round.sh check", carry=[".gpu/round.tgz", ".whl/fi066"], timeout_s=600)'
}

check() {
    local rc=0 b=$s/bin gd=$s/golden
    {
        echo "== check at $(date -u +%FT%TZ), commit $(cat $s/commit)"
        nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
        echo "== tests/devices/cuda_backend"
        SAMPLER_GOLDEN_DIR=$gd timeout 200 $b/devices cuda_backend:: --test-threads 1 2>&1 | grep -vE "^test .* ok$" | tail -25 || rc=1
        echo "== gpu_suite golden (f32, bf16, f16)"
        timeout 200 $b/gpu_suite golden $gd 2>&1 | grep -v -E "^  ok |: ok" | tail -12 || rc=1
        echo "== gpu_suite adversarial"
        timeout 90 $b/gpu_suite adversarial 2>&1 | tail -12 || rc=1
        echo "== sample --backend cuda"
        timeout 60 $b/sample --backend cuda --steps 3 | grep -E "sampler|step" || rc=1
        if [ "${SUITE:-0}" = 1 ]; then
            echo "== conformance --backend cuda (one case)"
            timeout 30 $b/conformance $gd/case-101-021.json --backend cuda > "$out/conformance-cuda.json" \
                && echo "conformance --backend cuda: exit 0, $(wc -c < "$out/conformance-cuda.json") bytes" || rc=1
            echo "== gpu_suite timing"
            timeout 200 $b/gpu_suite timing ${TIMING_ARGS:-} || rc=1
            echo "== gpu_suite tree (SAMPLER.md 11)"
            timeout 120 $b/gpu_suite tree || rc=1
        fi
        local cs
        cs=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
        echo "== compute-sanitizer ($cs)"
        for tool in ${SAN_TOOLS:-memcheck racecheck}; do
            for st in ${SAN_STEPS:-$gd/case-101-021.json $gd/case-102-002.json $gd/case-102-000.json $gd/next/tree-501-023.json}; do
                timeout ${SAN_TIMEOUT:-60} "$cs" --tool "$tool" --error-exitcode 9 $b/gpu_suite step $st > "$out/san.txt" 2>&1
                local st_rc=$?
                echo "-- $tool $(basename $st): exit $st_rc; $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$out/san.txt" | head -2 | tr '\n' ' ')"
                [ "$st_rc" = 0 ] || { rc=1; grep -E "Error|error" "$out/san.txt" | head -5; }
            done
            # Benchmark-shaped steps (the golden steps have N <= 64): 8 blocks a row, the paired select.
            for sy in ${SAN_SYNTH:-1:4096 16:4096 1:0}; do
                timeout ${SAN_TIMEOUT:-60} "$cs" --tool "$tool" --error-exitcode 9 $b/gpu_suite synth $sy > "$out/san.txt" 2>&1
                local sy_rc=$?
                echo "-- $tool synth $sy: exit $sy_rc; $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$out/san.txt" | head -2 | tr '\n' ' ')"
                [ "$sy_rc" = 0 ] || { rc=1; grep -E "Error|error|MISMATCH" "$out/san.txt" | head -5; }
            done
        done
        if [ "${PY:-1}" = 1 ]; then
            echo "== Python on torch CUDA tensors"
            PYTEST_S=${PYTEST_S:-90} FI_S=${FI_S:-45} python_round > "$out/python.txt" 2>&1 || rc=1
            grep -E "passed|failed|error|overhead|us|==" "$out/python.txt" | tail -40
        fi
        echo "== check rc=$rc"
        exit $rc
    } 2>&1 | tee "$out/check.log"
    return "${PIPESTATUS[0]}"
}

counts() {
    local b=$s/bin gd=$s/golden
    {
        local rc=0
        echo "== counts in top-N (SAMPLER_COUNTS_IN_TOPN) at $(date -u +%FT%TZ), commit $(cat $s/commit)"
        echo "== tests/devices/cuda_counts (golden, counts on and off, vs CPU)"
        SAMPLER_GOLDEN_DIR=$gd timeout 200 $b/devices cuda_counts:: --test-threads 1 --nocapture 2>&1 | grep -vE "^test .* ok$" | tail -15 || rc=1
        for c in 0 1; do
            echo "== gpu_suite golden, SAMPLER_COUNTS_IN_TOPN=$c"
            SAMPLER_COUNTS_IN_TOPN=$c timeout 200 $b/gpu_suite golden $gd 2>&1 | grep -v -E "^  ok |: ok" | tail -8 || rc=1
            echo "== gpu_suite adversarial, SAMPLER_COUNTS_IN_TOPN=$c"
            SAMPLER_COUNTS_IN_TOPN=$c timeout 90 $b/gpu_suite adversarial 2>&1 | tail -6 || rc=1
        done
        for c in 0 1; do
            echo "== ours, SAMPLER_COUNTS_IN_TOPN=$c"
            SAMPLER_COUNTS_IN_TOPN=$c timeout 200 $b/benchmark run --rows "${COUNTS_ROWS:-1,16,64,256,384}" --n "${COUNTS_NS:-1024,4096,0}" \
                --json "$out/ours-counts$c.json" || rc=1
        done
        echo "== counts rc=$rc"
        exit $rc
    } 2>&1 | tee "$out/counts.log"
    return "${PIPESTATUS[0]}"
}

stream() {
    local b=$s/bin gd=$s/golden
    {
        local rc=0
        echo "== stream select (SAMPLER_STREAM_SELECT) at $(date -u +%FT%TZ), commit $(cat $s/commit)"
        echo "== tests/devices/cuda_counts (golden + adversarial, stream select on, vs CPU)"
        SAMPLER_GOLDEN_DIR=$gd timeout 240 $b/devices cuda_counts:: --test-threads 1 --nocapture 2>&1 | grep -vE "^test .* ok$" | tail -25 || rc=1
        for c in 1 0; do
            echo "== gpu_suite golden, SAMPLER_STREAM_SELECT=$c"
            SAMPLER_STREAM_SELECT=$c timeout 200 $b/gpu_suite golden $gd 2>&1 | grep -v -E "^  ok |: ok" | tail -8 || rc=1
        done
        echo "== gpu_suite adversarial (the environment's setting, then the other)"
        SAMPLER_CLUSTER=0 SAMPLER_STREAM_SELECT=1 timeout 120 $b/gpu_suite adversarial 2>&1 | tail -12 || rc=1
        for c in 1 0; do
            echo "== ours, SAMPLER_STREAM_SELECT=$c"
            SAMPLER_STREAM_SELECT=$c timeout 200 $b/benchmark run --rows "${STREAM_ROWS:-1,16,64,256,384}" --n "${STREAM_NS:-1024,4096,0}" \
                --json "$out/ours-stream$c.json" || rc=1
        done
        echo "== stream rc=$rc"
        exit $rc
    } 2>&1 | tee "$out/stream.log"
    return "${PIPESTATUS[0]}"
}

# The speed benchmark: ours and both peers on the same shapes (defaults: the last full round's).
speed() {
    local b=$s/bin rc=0 prebuild=
    local ROWS="${ROWS:-1,16,64,256,384}" NS="${NS:-1024,4096,0}"
    local GOLDEN="${GOLDEN:-0}" ANCHORS="${ANCHORS:-1}" RAW="${RAW:-1}" RAW_ROWS="${RAW_ROWS:-1,64}" BF16_ROWS="${BF16_ROWS:-1,64,384}"
    {
        echo "== bench on $(hostname) at $(date -u +%FT%TZ), commit $(cat $s/commit 2>/dev/null), ROWS=$ROWS NS=$NS"
        nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader
        local driver
        driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)
        if [ "${PEERS:-1}" = 1 ]; then
            python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/fi066/*.whl && export PYTHONPATH=/tmp/site
            export PYTHONUNBUFFERED=1 PATH=$PATH:/usr/local/cuda/bin
            (cd .peers && python3 flashinfer_peer.py --prebuild > /tmp/prebuild.log 2>&1; echo $? > /tmp/prebuild.rc) &
            prebuild=$!
        fi
        if [ "$GOLDEN" = 1 ]; then
            echo "== golden cases: CUDA vs expected and vs CPU (bitwise)"
            timeout 200 $b/gpu_suite golden $s/golden > /tmp/golden.log 2>&1 || rc=1
            grep -v -E "^  ok |: ok" /tmp/golden.log | tail -15
        fi
        if [ "${AUTOTUNE:-0}" = 1 ]; then
            echo "== autotune"
            timeout 240 $b/autotune --driver "$driver" --out "$out/tuning.json" 2>&1 | tr '\r' '\n' | grep -v "^autotune \[" || rc=1
            export SAMPLER_CUDA_TUNING="$out/tuning.json"
        fi
        echo "== ours"
        timeout 240 $b/benchmark run --rows "$ROWS" --n "$NS" --json "$out/ours.json" --csv "$out/ours.csv" || rc=1
        if [ "${PROFILE:-0}" = 1 ]; then
            # Nsight Compute on a few kernels of two shapes (warp stall reasons, throughput).
            local ncu
            ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
            echo "== profile (${ncu:-no ncu})"
            if [ -n "$ncu" ]; then
                for shape in "1 1024" "384 0"; do
                    set -- $shape
                    timeout 150 "$ncu" -k "regex:${PROFILE_KERNELS:-topn_chunk|topn_merge|row_mass|mask_check_chunk}" -c 4 \
                        --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section LaunchStats --section Occupancy \
                        $b/benchmark run --rows $1 --n $2 --reps 1 --check-rows 0 > "$out/ncu-R$1-N$2.txt" 2>&1 || rc=1
                    grep -iE "^  [a-z_]+_t[0-9]+|Duration|Issued Instruction|stall|Achieved Occupancy|Registers Per|Dynamic Shared|Memory Throughput|Compute \\(SM\\) Throughput" "$out/ncu-R$1-N$2.txt" | cut -c1-220 | head -120
                done
            fi
        fi
        if [ "${STREAM:-0}" = 1 ]; then
            # The one-read streaming top-N (Caps::stream_select, off by default) on the same shapes, same run.
            echo "== ours, stream select (SAMPLER_CLUSTER=0 SAMPLER_STREAM_SELECT=1)"
            SAMPLER_CLUSTER=0 SAMPLER_STREAM_SELECT=1 timeout 240 $b/benchmark run --rows "$ROWS" --n "$NS" --json "$out/stream.json" || rc=1
        fi
        if [ "$RAW" = 1 ]; then
            # SAMPLER.md 10.3: every request reports raw logprobs (mask_check's tile sums + raw_logprobs).
            echo "== ours, raw logprobs"
            timeout 150 $b/benchmark run --rows "$RAW_ROWS" --n "$NS" --reps 30 --logprobs-mode raw --json "$out/raw.json" || rc=1
        fi
        if [ "${BF16:-1}" = 1 ]; then
            # The same step on bf16 logits (half the bytes read; floor at 2 bytes per logit).
            echo "== ours, bf16 logits"
            timeout 200 $b/benchmark run --rows "$BF16_ROWS" --n "$NS" --reps 30 --dtype bf16 --json "$out/bf16.json" || rc=1
        fi
        if [ "${BASELINE:-0}" = 1 ]; then
            echo "== ours, one block per row (chunks 1)"
            timeout 200 $b/benchmark run --rows "$ROWS" --n "$NS" --chunks 1 --check-rows 0 --reps 20 --json "$out/base.json" || rc=1
        fi
        if [ "${PEERS:-1}" = 1 ]; then
            echo "== peers (waiting for the FlashInfer prebuild)"
            wait $prebuild
            echo "prebuild exit $(cat /tmp/prebuild.rc)"; tail -3 /tmp/prebuild.log
            local pn
            pn=$(echo "$NS" | tr ',' '\n' | sort -n | paste -sd,)
            (cd .peers && timeout 200 python3 flashinfer_peer.py --graph --rows "$ROWS" --n "$pn" --json "$out/fi.json") || rc=1
            (cd .peers && timeout 120 python3 torch_sampler.py --rows "$ROWS" --n "$pn" --json "$out/torch.json") || rc=1
        fi
        if [ "$ANCHORS" = 1 ]; then
            echo "== selection anchors (CUB, DeepSelect)"
            anchors_round || rc=1
        fi
        echo "== table"
        $b/benchmark table "$out/ours.json" --fi "$out/fi.json" --torch "$out/torch.json" --bf16 "$out/bf16.json" --md "$out/table.md"
        echo "== bench exit status: $rc"
        exit $rc
    } 2>&1 | tee "$out/bench.log"
    return "${PIPESTATUS[0]}"
}

# The anchors compile with the device's nvcc, then time each (docs/gpu/HOWTO.md "Selection anchors").
anchors_round() {
    [ -f $s/anchors.tgz ] || { echo "no anchors in the staged tree (round.sh build with ANCHORS=1)"; return 1; }
    rm -rf /tmp/anc && mkdir -p /tmp/anc && tar xzf $s/anchors.tgz -C /tmp/anc &&
        OUT="$out" timeout 280 bash /tmp/anc/scripts/gpu/anchors.sh device
}

# The Python wheel offline on the device (no network: the wheel was built here and carried;
# torch and numpy come with the device image), most important step first, each under its own timeout.
python_round() {
    local rc=0 fi= pre= gd=$s/golden
    {
        echo "== python-gpu on $(hostname) at $(date -u +%FT%TZ), commit $(cat $s/commit 2>/dev/null)"
        nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
        python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site $s/wheel/*.whl || rc=1
        local fiw="${FI_WHEELS:-.whl/fi066}"
        if ls "$fiw"/*.whl >/dev/null 2>&1; then
            python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$fiw"/*.whl && fi=--flashinfer
        fi
        export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 PATH=$PATH:/usr/local/cuda/bin
        if [ -n "$fi" ]; then
            # FlashInfer JIT-compiles its sampling module (a minute or more with nvcc): in the
            # background while our tests run (the tvm-ffi torch addon separately, so the two builds do not race).
            (TVM_FFI_DISABLE_TORCH_C_DLPACK=1 python3 -c "import flashinfer.sampling as m; m.get_sampling_module()" > "$out/fi-prebuild.log" 2>&1;
             python3 -c "import torch, tvm_ffi" >> "$out/fi-prebuild.log" 2>&1; echo "prebuild rc=$?" >> "$out/fi-prebuild.log") &
            pre=$!
        fi
        python3 -c "import torch, sampler_py; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"
        echo "== pytest: tests/test_gpu.py (torch CUDA tensors), then the CPU suite"
        SAMPLER_GOLDEN_DIR=$gd timeout ${PYTEST_S:-75} python3 -m pytest -q -rs sampler-py/tests/test_gpu.py \
            -p no:cacheprovider --junitxml="$out/pytest-gpu.xml" || rc=1
        SAMPLER_GOLDEN_DIR=$gd timeout 30 python3 -m pytest -q -rs sampler-py/tests/test_api.py sampler-py/tests/test_golden.py \
            -p no:cacheprovider --junitxml="$out/pytest-cpu.xml" || rc=1
        echo "== pytest: tests/test_flashinfer_api.py (numpy, torch CPU and torch CUDA tensors)"
        SAMPLER_GOLDEN_DIR=$gd timeout ${FIAPI_S:-60} python3 -m pytest -q -rs sampler-py/tests/test_flashinfer_api.py \
            -p no:cacheprovider --junitxml="$out/pytest-flashinfer-api.xml" || rc=1
        echo "== binding overhead, torch CUDA tensors, R = 64, V = 129280 (host time per call)"
        timeout ${OVH_S:-45} python3 sampler-py/bench/overhead.py --torch --rows 64 --iters 50 --json "$out/overhead-torch.json" || rc=1
        if [ -n "$fi" ]; then
            echo "== the same beside FlashInfer's Python call on the same tensors (waiting for its JIT build)"
            wait $pre; tail -2 "$out/fi-prebuild.log"
            timeout ${FI_S:-50} python3 sampler-py/bench/overhead.py --torch --rows 64 --iters 30 $fi --json "$out/overhead-torch-fi.json" || rc=1
        fi
        if [ "${PROF:-1}" = 1 ]; then  # PROF=0 skips it
            echo "== host-only profile of the binding's pieces on this machine (torch CPU tensors)"
            timeout ${PROF_S:-30} python3 sampler-py/bench/binding_profile.py --rows 64 --iters 1000 --json "$out/binding-profile.json" || rc=1
        fi
        echo "== binding overhead at R = 64 (the figure: OVERHEAD-SAME-CALL torch_full)"
        for j in "$out/overhead-torch.json" "$out/overhead-torch-fi.json"; do
            [ -f "$j" ] && python3 -c "import json, sys; sys.path.insert(0, 'sampler-py/bench'); import overhead; print('\n'.join(overhead.overhead_lines(json.load(open(sys.argv[1])))))" "$j"
        done
        echo "== rc=$rc"
        exit $rc
    } 2>&1 | tee "$out/python-gpu.log"
    return "${PIPESTATUS[0]}"
}

# The streaming top-N over several blocks a row (Caps::stream_chunks, SAMPLER_STREAM_CHUNKS): the
# devices test (golden + adversarial rows at 2/8/16 chunks vs the CPU), gpu_suite golden with 8 chunks,
# then `benchmark run` with the stream select on at SC_LIST chunk counts -> chunks.log, ours-sc<C>.json.
chunks() {
    local b=$s/bin gd=$s/golden rc=0
    {
        echo "== stream chunks at $(date -u +%FT%TZ), commit $(cat $s/commit)"
        SAMPLER_GOLDEN_DIR=$gd timeout 300 $b/devices cuda_counts:: --test-threads 1 --nocapture 2>&1 | grep -vE "^test .* ok$" | tail -12 || rc=1
        echo "== gpu_suite golden, SAMPLER_CLUSTER=0 SAMPLER_STREAM_SELECT=1 SAMPLER_STREAM_CHUNKS=8"
        SAMPLER_CLUSTER=0 SAMPLER_STREAM_SELECT=1 SAMPLER_STREAM_CHUNKS=8 timeout 200 $b/gpu_suite golden $gd 2>&1 | grep -v -E "^  ok |: ok" | tail -6 || rc=1
        for c in ${SC_LIST:-0 4 8 16}; do
            echo "== ours, SAMPLER_CLUSTER=0 SAMPLER_STREAM_SELECT=1 SAMPLER_STREAM_CHUNKS=$c"
            SAMPLER_CLUSTER=0 SAMPLER_STREAM_SELECT=1 SAMPLER_STREAM_CHUNKS=$c timeout 150 $b/benchmark run --rows "${SC_ROWS:-1,16,64}" \
                --n "${SC_NS:-1024,4096}" --reps 30 --json "$out/ours-sc$c.json" || rc=1
        done
        echo "== chunks rc=$rc"
        exit $rc
    } 2>&1 | tee "$out/chunks.log"
    return "${PIPESTATUS[0]}"
}

# Only the kept prefix ordered (issue 22, Caps::prefix_order): correctness (cuda_counts: golden and
# adversarial rows through the stream select and over chunks, top-k off and 50; gpu_suite golden with
# the stream select forced on and by default), then ours with SAMPLER_PREFIX_ORDER=1 and =0 side by side,
# then the streaming top-N over PO_CHUNKS blocks a row at small R.
prefix() {
    local b=$s/bin gd=$s/golden rc=0
    {
        echo "== prefix order at $(date -u +%FT%TZ), commit $(cat $s/commit)"
        SAMPLER_GOLDEN_DIR=$gd timeout 300 $b/devices cuda_counts:: --test-threads 1 --nocapture 2>&1 | grep -vE "^test .* ok$" | tail -30 || rc=1
        for c in 1 auto; do
            echo "== gpu_suite golden, SAMPLER_STREAM_SELECT=$c"
            if [ $c = auto ]; then SAMPLER_PREFIX_ORDER=1 timeout 200 $b/gpu_suite golden $gd; else SAMPLER_PREFIX_ORDER=1 SAMPLER_STREAM_SELECT=$c timeout 200 $b/gpu_suite golden $gd; fi 2>&1 | grep -v -E "^  ok |: ok" | tail -6 || rc=1
        done
        echo "== gpu_suite adversarial, SAMPLER_CLUSTER=0 SAMPLER_STREAM_SELECT=1"
        SAMPLER_PREFIX_ORDER=1 SAMPLER_CLUSTER=0 SAMPLER_STREAM_SELECT=1 timeout 120 $b/gpu_suite adversarial 2>&1 | tail -8 || rc=1
        for po in 1 0; do
            echo "== ours, SAMPLER_PREFIX_ORDER=$po"
            SAMPLER_PREFIX_ORDER=$po timeout 200 $b/benchmark run --rows "${PO_ROWS:-1,16,64,256,384}" --n "${PO_NS:-1024,4096,0}" \
                --json "$out/ours-po$po.json" || rc=1
        done
        for c in ${PO_CHUNKS:-4 8}; do
            echo "== ours, SAMPLER_CLUSTER=0 SAMPLER_STREAM_SELECT=1 SAMPLER_STREAM_CHUNKS=$c"
            SAMPLER_PREFIX_ORDER=1 SAMPLER_CLUSTER=0 SAMPLER_STREAM_SELECT=1 SAMPLER_STREAM_CHUNKS=$c timeout 150 $b/benchmark run --rows "${PO_CROWS:-1,16}" \
                --n "${PO_CNS:-1024,4096}" --json "$out/ours-po-sc$c.json" || rc=1
        done
        echo "== prefix rc=$rc"
        exit $rc
    } 2>&1 | tee "$out/prefix.log"
    return "${PIPESTATUS[0]}"
}

# A/B of a kernel change (the staged binaries' own PTX against AB_PTX, an xz-packed PTX of the same
# entries: `SAMPLER_PTX_FILE`): correctness of the staged kernels (cuda_backend, cuda_counts, gpu_suite
# golden by default and with the stream over AB_CHUNKS blocks, adversarial), then `benchmark run` at
# AB_ROWS x AB_NS with each PTX (f32), bf16 at AB_BROWS x AB_BNS with each, and the staged PTX over
# AB_CHUNKS blocks at R = 1, 16 -> ab.log, ours-b.json, ours-a.json, bf16-b.json, bf16-a.json, ours-b-sc*.json.
# AB_ENV: variables of the A side instead of (or beside) AB_PTX ("SAMPLER_KEPT_HEAD=0"); AB_ENV_C: a third
# side c with its own variables (ours-c.json, bf16-c.json).
ab() {
    local b=$s/bin gd=$s/golden rc=0 alt=/tmp/ab-alt.ptx
    {
        echo "== ab at $(date -u +%FT%TZ), commit $(cat $s/commit), A = ${AB_PTX:-none}"
        [ -n "${AB_PTX:-}" ] && xz -dc "$AB_PTX" > $alt
        SAMPLER_GOLDEN_DIR=$gd timeout 200 $b/devices cuda_backend:: --test-threads 1 2>&1 | grep -vE "^test .* ok$" | tail -8 || rc=1
        SAMPLER_GOLDEN_DIR=$gd timeout 200 $b/devices cuda_counts:: --test-threads 1 2>&1 | grep -vE "^test .* ok$" | tail -8 || rc=1
        echo "== gpu_suite golden (default)"
        timeout 200 $b/gpu_suite golden $gd 2>&1 | grep -v -E "^  ok |: ok" | tail -3 || rc=1
        echo "== gpu_suite golden, stream select over ${AB_CHUNKS:-8} blocks"
        SAMPLER_CLUSTER=0 SAMPLER_STREAM_SELECT=1 SAMPLER_STREAM_CHUNKS=${AB_CHUNKS:-8} timeout 200 $b/gpu_suite golden $gd 2>&1 | grep -v -E "^  ok |: ok" | tail -3 || rc=1
        echo "== gpu_suite golden, prefix order and stream select forced"
        SAMPLER_PREFIX_ORDER=1 SAMPLER_CLUSTER=0 SAMPLER_STREAM_SELECT=1 timeout 200 $b/gpu_suite golden $gd 2>&1 | grep -v -E "^  ok |: ok" | tail -3 || rc=1
        echo "== gpu_suite adversarial"
        SAMPLER_CLUSTER=0 SAMPLER_STREAM_SELECT=1 timeout 120 $b/gpu_suite adversarial 2>&1 | tail -8 || rc=1
        echo "== gpu_suite synth ${AB_SYNTH:-1:4096 16:4096 64:4096 384:4096 1:1024 1:0}"
        timeout 200 $b/gpu_suite synth ${AB_SYNTH:-1:4096 16:4096 64:4096 384:4096 1:1024 1:0} 2>&1 | tail -8 || rc=1
        for v in b a c; do
            [ $v = a ] && [ ! -f $alt ] && [ -z "${AB_ENV:-}" ] && continue
            [ $v = c ] && [ -z "${AB_ENV_C:-}" ] && continue
            local env=""
            [ $v = a ] && [ -f $alt ] && env="SAMPLER_PTX_FILE=$alt"
            [ $v = a ] && env="$env ${AB_ENV:-}"
            [ $v = c ] && env="${AB_ENV_C}"
            echo "== ours $v (f32)"
            env $env timeout 150 $b/benchmark run --rows "${AB_ROWS:-1,16,64,256,384}" --n "${AB_NS:-1024,4096,0}" --json "$out/ours-$v.json" || rc=1
            echo "== ours $v (bf16)"
            env $env timeout 100 $b/benchmark run --dtype bf16 --rows "${AB_BROWS:-1,16,64,256,384}" --n "${AB_BNS:-4096}" --json "$out/bf16-$v.json" || rc=1
        done
        for c in ${AB_SC:-4 8}; do
            echo "== ours b, SAMPLER_CLUSTER=0 SAMPLER_STREAM_SELECT=1 SAMPLER_STREAM_CHUNKS=$c"
            SAMPLER_CLUSTER=0 SAMPLER_STREAM_SELECT=1 SAMPLER_STREAM_CHUNKS=$c timeout 100 $b/benchmark run --rows 1,16 --n 4096 --json "$out/ours-b-sc$c.json" || rc=1
        done
        echo "== ab rc=$rc"
        exit $rc
    } 2>&1 | tee "$out/ab.log"
    return "${PIPESTATUS[0]}"
}

# Nsight Compute per SASS instruction (issue 22: where the time of a kernel goes): for each shape of
# PROF_SHAPES ("R:N" pairs), the first PROF_COUNT launches of PROF_KERNELS in one `benchmark run`, with
# the source counters (warp stall samples and instructions executed per SASS instruction), exported as
# CSV: ncu-<R>-<N>.txt (the details page) and sass-<R>-<N>-<kernel>.csv (the source page).
profile() {
    local b=$s/bin rc=0 ncu
    ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
    [ -n "$ncu" ] || { echo "no ncu"; return 1; }
    mkdir -p "$out/prof"
    for shape in ${PROF_SHAPES:-1:4096 64:1024 384:4096 256:0}; do
        local r=${shape%%:*} n=${shape##*:}
        local rep="$out/prof/r$r-n$n"
        echo "== ncu R=$r N=$n"
        timeout ${PROF_T:-150} "$ncu" --clock-control none -k "regex:${PROF_KERNELS:-force_topn_stream|topn_chunk|topn_merge|process|row_mass|token_info|finalize}" \
            -c ${PROF_COUNT:-6} ${PROF_EXTRA:-} --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section LaunchStats \
            --section Occupancy --section SourceCounters --section InstructionStats --section MemoryWorkloadAnalysis \
            -f -o "$rep" $b/benchmark run --rows $r --n $n --reps 1 --check-rows 0 > "$rep.run.txt" 2>&1 || rc=1
        tail -3 "$rep.run.txt"
        "$ncu" -i "$rep.ncu-rep" --page details > "$rep.details.txt" 2>&1 || rc=1
        grep -E "^  [a-z_]+_t[0-9]+|Duration|Registers Per|Achieved Occupancy|Executed Ipc A|Warp Cycles Per Issued|Dynamic Shared" "$rep.details.txt" | cut -c1-160
        local k
        for k in $(grep -oE "^  [a-z_]+_t[0-9]+" "$rep.details.txt" | sort -u); do
            "$ncu" -i "$rep.ncu-rep" -k "$k" -c 1 --page source --csv --print-source sass > "$rep.sass-$k.csv" 2>&1 || rc=1
        done
        ls -la "$out/prof" | tail -3
    done
    echo "== profile rc=$rc"
    return $rc
}

# Two GPUs: context parallelism and the engine tests on CUDA, then vocabulary-parallel sampling.
nccl() {
    local b=$s/bin
    # NVLink multicast off (KINDS.md).
    export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
    {
        echo "== nccl round on $(hostname) at $(date -u +%FT%TZ), commit $(cat $s/commit 2>/dev/null)"
        nvidia-smi -L
        echo "== cp_nccl"
        $b/cp_nccl; echo "cp_nccl exit $?"
        for t in cp golden grammar pool prompt; do
            echo "== tests/engine/$t (SAMPLER_ENGINE_BACKEND=cuda)"
            SAMPLER_ENGINE_BACKEND=cuda $b/engine $t:: 2>&1 | tail -4
        done
        echo "== vocab_parallel --tp 2 over NCCL (bitwise vs one GPU, golden cases, table)"
        timeout 420 $b/vocab_parallel --tp 2 --collective nccl --golden $s/golden --rows 1,64,384 --reps 5
        local a=$?
        echo "== the same check on communicators made outside the sampler (RawNcclCollective)"
        timeout 120 $b/vocab_parallel --tp 2 --collective nccl-raw --skip-table
        local c=$?
        echo "vocab_parallel exit status: $a (nccl), $c (nccl-raw)"
    } 2>&1 | tee "$out/nccl.log"
    # Exit status 0 = every vocab-parallel check equal.
    grep -q "vocab_parallel exit status: 0 (nccl), 0 (nccl-raw)" "$out/nccl.log"
}

# Several PTX builds of the same kernels beside the binaries' own (A): VARIANTS="b c d" names
# .gpu/ptx-<v>.ptx.xz (SAMPLER_PTX_FILE). The driver compiles each PTX module at its first load
# (about 70 s for the 142 entries, cached after that only when the compile finished): warm every
# variant at once first, with a long timeout, then correctness per variant, then benchmarks
# interleaved (A, each variant, A, each variant again).
variants() {
    local b=$s/bin gd=$s/golden rc=0 v
    # VAR_CHECK: the variants checked (a = the binaries' own PTX), VAR_FULL: those of them checked
    # three ways (golden by default, over 8 blocks, stream + prefix forced; the others: the last
    # only) with synth; VAR_BENCH=0 skips the benchmarks, VAR_CHECKS=0 the checks; VAR_EXTRA: a
    # command run after the checks (e.g. a knob sweep on the binaries' own PTX).
    local check="${VAR_CHECK:-a ${VARIANTS:-}}" full="${VAR_FULL:-a ${VARIANTS:-}}"
    {
        echo "== variants at $(date -u +%FT%TZ), commit $(cat $s/commit), VARIANTS=${VARIANTS:-}"
        for v in ${VARIANTS:-}; do xz -dc $g/ptx-$v.ptx.xz > /tmp/ptx-$v.ptx || rc=1; done
        timeout 300 $b/gpu_suite synth 1:64 > /dev/null 2>&1 &
        for v in ${VARIANTS:-}; do
            SAMPLER_PTX_FILE=/tmp/ptx-$v.ptx timeout 300 $b/gpu_suite synth 1:64 > /dev/null 2>&1 &
        done
        wait
        echo "== JIT warmed at $(date -u +%T)"
        [ "${VAR_CHECKS:-1}" = 1 ] && for v in $check; do
            local e=""; [ $v = a ] || e="SAMPLER_PTX_FILE=/tmp/ptx-$v.ptx"
            local f=0; case " $full " in *" $v "*) f=1 ;; esac
            echo "== $v gpu_suite golden ($([ $f = 1 ] && echo 'default; over 8 blocks; ')stream select + prefix order forced) at $(date -u +%T)"
            if [ $f = 1 ]; then
                env $e timeout 200 $b/gpu_suite golden $gd 2>&1 | tail -2 || rc=1
                env $e SAMPLER_CLUSTER=0 SAMPLER_STREAM_SELECT=1 SAMPLER_STREAM_CHUNKS=8 timeout 200 $b/gpu_suite golden $gd 2>&1 | tail -2 || rc=1
            fi
            env $e SAMPLER_CLUSTER=0 SAMPLER_STREAM_SELECT=1 SAMPLER_PREFIX_ORDER=1 SAMPLER_STREAM_CHUNKS=0 timeout 200 $b/gpu_suite golden $gd 2>&1 | tail -2 || rc=1
            echo "== $v gpu_suite adversarial (stream select; then bf16 / f16 device logits)"
            env $e SAMPLER_CLUSTER=0 SAMPLER_STREAM_SELECT=1 timeout 150 $b/gpu_suite adversarial > "$out/adv-$v.log" 2>&1
            local ar=$?; [ $ar = 0 ] || rc=1
            echo "adversarial exit $ar: $(grep -c 'bitwise ok' "$out/adv-$v.log") lines bitwise ok; others:"
            grep -v "bitwise ok" "$out/adv-$v.log" | tail -8
            grep -o "fallback codes per row.*" "$out/adv-$v.log" | sort | uniq -c | head -4
            if [ $f = 1 ]; then
                echo "== $v gpu_suite synth"
                env $e timeout 120 $b/gpu_suite synth ${VAR_SYNTH:-1:4096 16:4096 64:4096 384:4096 1:1024 16:1024 64:0} 2>&1 | tail -8 || rc=1
            fi
        done
        if [ -n "${VAR_EXTRA:-}" ]; then echo "== extra at $(date -u +%T): $VAR_EXTRA"; bash -c "$VAR_EXTRA" || rc=1; fi
        local pass
        [ "${VAR_BENCH:-1}" = 1 ] && for pass in "" 2; do
            for v in a ${VARIANTS:-}; do
                local e=""; [ $v = a ] || e="SAMPLER_PTX_FILE=/tmp/ptx-$v.ptx"
                echo "== ours $v$pass (f32) at $(date -u +%T)"
                env $e timeout 150 $b/benchmark run --rows "${VAR_ROWS:-1,16,64,384}" --n "${VAR_NS:-1024,4096,0}" --json "$out/ours-$v$pass.json" || rc=1
            done
        done
        [ "${VAR_BENCH:-1}" = 1 ] && for v in a ${VARIANTS:-}; do
            local e=""; [ $v = a ] || e="SAMPLER_PTX_FILE=/tmp/ptx-$v.ptx"
            echo "== ours $v (bf16)"
            env $e timeout 100 $b/benchmark run --dtype bf16 --rows "${VAR_BROWS:-1,16,384}" --n "${VAR_BNS:-1024,4096}" --json "$out/bf16-$v.json" || rc=1
        done
        echo "== variants rc=$rc at $(date -u +%T)"
        exit $rc
    } 2>&1 | tee "$out/variants.log"
    return "${PIPESTATUS[0]}"
}

cluster() {
    local b=$s/bin gd=$s/golden rc=0 c pass
    {
        echo "== cluster at $(date -u +%FT%TZ), commit $(cat $s/commit)"
        timeout 300 $b/gpu_suite synth 1:64 > /dev/null 2>&1
        echo "== JIT warmed at $(date -u +%T)"
        # A smoke step first: a cluster that never meets its barrier hangs every later step.
        SAMPLER_CLUSTER=8 timeout 60 $b/gpu_suite synth 1:1024 2>&1 | tail -3
        [ "${PIPESTATUS[0]}" = 0 ] || { echo "== smoke step failed: stopping"; exit 1; }
        if [ "${CL_CHECKS:-1}" = 1 ]; then
            echo "== devices cuda_counts clusters at $(date -u +%T)"
            SAMPLER_GOLDEN_DIR=$gd timeout 300 $b/devices --test-threads 1 --nocapture \
                cuda_counts::golden_and_adversarial_rows_through_clusters 2>&1 | tail -6 || rc=1
            for c in ${CL_CHECK:-8 16}; do
                echo "== gpu_suite golden, cluster $c, at $(date -u +%T)"
                SAMPLER_CLUSTER=$c timeout 200 $b/gpu_suite golden $gd 2>&1 | tail -3 || rc=1
            done
            echo "== gpu_suite adversarial, cluster ${CL_ADV:-16}, at $(date -u +%T)"
            SAMPLER_CLUSTER=${CL_ADV:-16} timeout 200 $b/gpu_suite adversarial > "$out/adv-cl.log" 2>&1 || rc=1
            echo "adversarial: $(grep -c 'bitwise ok' "$out/adv-cl.log") lines bitwise ok; others:"
            grep -v "bitwise ok" "$out/adv-cl.log" | tail -8
            echo "== gpu_suite synth, cluster 8, at $(date -u +%T)"
            SAMPLER_CLUSTER=8 timeout 120 $b/gpu_suite synth ${CL_SYNTH:-1:1024 1:4096 16:1024 16:4096 1:0 16:0} 2>&1 | tail -8 || rc=1
        fi
        [ "${CL_BENCH:-1}" = 1 ] && for pass in $(seq "${CL_PASSES:-2}"); do
            # A size with the suffix n: its fused tail off (SAMPLER_CLUSTER_TAIL=0).
            for c in ${CL_LIST:-0 8 16 16n}; do
                local t=1; case $c in *n) t=0 ;; esac
                echo "== ours, cluster $c, pass $pass, at $(date -u +%T)"
                SAMPLER_CLUSTER=${c%n} SAMPLER_CLUSTER_TAIL=$t timeout 150 $b/benchmark run --rows "${CL_ROWS:-1,4,16,32}" \
                    --n "${CL_NS:-1024,4096,0}" --json "$out/cl$c-$pass.json" 2>&1 \
                    | awk -F'|' 'NF > 10 { print $2, $3, $8, $NF } !/^\|/' | tail -${CL_TAIL:-16} || rc=1
            done
        done
        [ "${CL_BF16:-1}" = 1 ] && for c in ${CL_BLIST:-0 16}; do
            echo "== ours bf16, cluster $c, at $(date -u +%T)"
            SAMPLER_CLUSTER=${c%n} timeout 100 $b/benchmark run --dtype bf16 --rows "${CL_BROWS:-1,16}" \
                --n "${CL_BNS:-1024,4096}" --json "$out/bf16-cl$c.json" 2>&1 | awk -F'|' 'NF > 10 { print $2, $3, $8 }' | tail -6 || rc=1
        done
        echo "== cluster rc=$rc at $(date -u +%T)"
        exit $rc
    } 2>&1 | tee "$out/cluster.log"
    return "${PIPESTATUS[0]}"
}

case "${1:-}" in
build) build ;;
cluster) unpack; cluster ;;
check) unpack; check ;;
counts) unpack; counts ;;
stream) unpack; stream ;;
speed) unpack; speed ;;
python) unpack; python_round ;;
nccl) unpack; nccl ;;
anchors) unpack; anchors_round ;;
profile) unpack; profile 2>&1 | tee "$out/profile.log" ;;
chunks) unpack; chunks ;;
prefix) unpack; prefix ;;
ab) unpack; ab ;;
variants) unpack; variants ;;
chart)
    # Here, after a speed round: DIR/{ours,fi,torch,bf16}.json -> table.md, chart.svg, chart.png.
    d="${2:?usage: $0 chart DIR}"
    bm="${CARGO_TARGET_DIR:-$here/target}/release/examples/benchmark"
    "$bm" table "$d/ours.json" --fi "$d/fi.json" --torch "$d/torch.json" --bf16 "$d/bf16.json" --md "$d/table.md" > /dev/null
    "$bm" chart "$d/ours.json" --fi "$d/fi.json" --torch "$d/torch.json" "$d/chart.svg"
    python3 "$here/scripts/gpu/bench_chart.py" "$d" || echo "no Pillow: chart.svg only (pip install pillow)"
    ;;
*)
    sed -n '2,40p' "$0"
    exit 2
    ;;
esac
