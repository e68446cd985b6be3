#!/usr/bin/env bash
# The Python wheel on the H200 (issue 14), in ONE device call.
#
#   scripts/python-gpu.sh build     # here: build the abi3 wheel + copy the golden cases -> .gpu-py/ (git-ignored)
#   scripts/python-gpu.sh device    # there: install the wheel offline, run the tests and the overhead benchmark
#
# The device call (this workplace's `run` tool; the device has no network, so the
# wheel is built here and carried; torch and numpy come with the device image):
#   scripts/python-gpu.sh build && scripts/python-gpu.sh pack /work/main/.gpux-py/g.tgz
#   run(command="mkdir -p /tmp/x && tar xzf .gpux-py/g.tgz -C /tmp/x && cd /tmp/x &&
#                FI_WHEELS=$OLDPWD/.whl/fi066 bash scripts/python-gpu.sh device",
#       carry=[".gpux-py", ".whl/fi066"], timeout_s=150)
# (.whl/fi066 = the FlashInfer 0.6.6 + tvm-ffi 0.1.9 wheels of ../shared/peers/README.md; without
#  them the FlashInfer column is skipped.) About 2 minutes in all.
#
# What the device part runs, most important first (each step under its own timeout, so a
# slow one cannot eat the rest; logs and JSON under $OUT):
#   1. pytest sampler-py/tests: the CPU suite plus tests/test_gpu.py: the golden cases through
#      torch CUDA tensors in float32 / bfloat16 / float16 bitwise equal to the CPU on the
#      rounded values, zero copy by data pointers, the caller-stream ordering, CUDA-graph
#      capture of a Python call (torch.cuda.graph), the README snippets, and the golden cases
#      through the CUDA backend from numpy logits;
#   2. bench/overhead.py --torch at R = 64, V = 129280: host time per call of the torch CUDA
#      path vs the Rust API (binding overhead), end to end and graph replay; the issue's
#      figure is the `OVERHEAD-SAME-CALL torch_full` line: each Python call minus the Rust
#      API's host time inside that same call, fresh output / out= / functional (<= 5 us);
#   3. the same with --flashinfer: FlashInfer's Python call on the same tensors beside ours;
#   4. bench/binding_profile.py: the host-only profile of the binding's pieces on this
#      machine's CPU (torch CPU tensors), to set beside the one recorded in docs/GPU_NOTES.md;
#   5. every OVERHEAD line again, last, so the log's tail has the figures.
set -u
here="$(cd "$(dirname "$0")/.." && pwd)"
cd "$here"

case "${1:-}" in
build)
    set -e
    rm -rf .gpu-py && mkdir -p .gpu-py/wheel .gpu-py/golden/next
    # manylinux off: the wheel only has to install on the device image.
    python3 -m maturin build --release --compatibility linux --out .gpu-py/wheel -m sampler-py/Cargo.toml
    cp "${GOLDEN_DIR:-$here/conformance/golden}"/*.json .gpu-py/golden/
    cp "${GOLDEN_DIR:-$here/conformance/golden}"/next/*.json .gpu-py/golden/next/
    git rev-parse HEAD > .gpu-py/commit 2>/dev/null || true
    du -sh .gpu-py
    ;;
pack)
    # The carry tarball: the wheel + golden cases, these scripts, the tests, the benchmark, README.
    set -e
    dst="${2:?pack needs the output .tgz path}"
    mkdir -p "$(dirname "$dst")"
    tar czf "$dst" .gpu-py scripts sampler-py/tests sampler-py/bench sampler-py/pyproject.toml README.md
    ls -la "$dst"
    ;;
device)
    out="${OUT:-/tmp/python-gpu-out}"
    mkdir -p "$out"
    rc=0
    exec > >(tee "$out/python-gpu.log") 2>&1
    {
        echo "== python-gpu on $(hostname) at $(date -u +%FT%TZ), commit $(cat .gpu-py/commit 2>/dev/null)"
        nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
        python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .gpu-py/wheel/*.whl || rc=1
        fiw="${FI_WHEELS:-.whl/fi066}"
        fi=
        if ls "$fiw"/*.whl >/dev/null 2>&1; then
            python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$fiw"/*.whl && fi=--flashinfer
        fi
        export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 PATH=$PATH:/usr/local/cuda/bin
        pre=
        if [ -n "$fi" ]; then
            # FlashInfer JIT-compiles its sampling module (a minute or more with nvcc): in the
            # background while our tests run, as scripts/bench.sh does (the tvm-ffi torch addon
            # separately, so the two builds do not race).
            (TVM_FFI_DISABLE_TORCH_C_DLPACK=1 python3 -c "import flashinfer.sampling as m; m.get_sampling_module()" > "$out/fi-prebuild.log" 2>&1;
             python3 -c "import torch, tvm_ffi" >> "$out/fi-prebuild.log" 2>&1; echo "prebuild rc=$?" >> "$out/fi-prebuild.log") &
            pre=$!
        fi
        python3 -c "import torch, sampler_py; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"
        echo "== pytest: tests/test_gpu.py (torch CUDA tensors), then the CPU suite"
        SAMPLER_GOLDEN_DIR=.gpu-py/golden timeout ${PYTEST_S:-75} python3 -m pytest -q -rs sampler-py/tests/test_gpu.py \
            -p no:cacheprovider --junitxml="$out/pytest-gpu.xml" || rc=1
        SAMPLER_GOLDEN_DIR=.gpu-py/golden timeout 30 python3 -m pytest -q -rs sampler-py/tests/test_api.py sampler-py/tests/test_golden.py \
            -p no:cacheprovider --junitxml="$out/pytest-cpu.xml" || rc=1
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
        echo "== binding overhead at R = 64 (the issue's figure: OVERHEAD-SAME-CALL torch_full)"
        for j in "$out/overhead-torch.json" "$out/overhead-torch-fi.json"; do
            [ -f "$j" ] && python3 -c "import json, sys; sys.path.insert(0, 'sampler-py/bench'); import overhead; print('\n'.join(overhead.overhead_lines(json.load(open(sys.argv[1])))))" "$j"
        done
        echo "== rc=$rc"
    }
    exit $rc
    ;;
*)
    sed -n '2,30p' "$0"
    exit 2
    ;;
esac
