#!/usr/bin/env bash
# The Python wheel on the H200 (issue 14), in ONE device call.
#
#   scripts/python-gpu.sh build     # here: build the abi3 wheel + copy the golden cases -> .gpu-py/ (git-ignored)
#   scripts/python-gpu.sh device    # there: install the wheel offline, run the tests and the overhead benchmark
#
# The device call (this workplace's `run` tool; the device has no network, so the
# wheel is built here and carried; torch and numpy come with the device image):
#   run(command="bash scripts/python-gpu.sh device", carry=[".gpu-py", ".whl/fi066"], timeout_s=600)
# (.whl/fi066 = the FlashInfer 0.6.6 + tvm-ffi 0.1.9 wheels of ../shared/peers/README.md; without
#  them the FlashInfer column is skipped.)
#
# What the device part checks today:
#   - pytest sampler-py/tests: the CPU suite, plus tests/test_gpu.py: every golden case through
#     Python on the CUDA backend (host numpy logits) bitwise equal to the Rust CPU runner;
#   - bench/overhead.py at R = 64, V = 129280: Python call vs the Rust step on the same inputs
#     (binding overhead), the functional API, and FlashInfer's Python call.
# TODO(engine branch): once sampler_host::Sampler takes device-resident logits and sampler_py
# wires DLPack kDLCUDA tensors (dlpack.rs: device_error), the skipped tests of test_gpu.py run
# as they are: golden cases through torch CUDA tensors in f32 and bf16, zero copy by data
# pointer, CUDA-graph capture of a Python call; and bench/overhead.py should time the torch CUDA
# tensor path. Record the overhead figure in docs/GPU_NOTES.md.
set -u
here="$(cd "$(dirname "$0")/.." && pwd)"
cd "$here"

case "${1:-}" in
build)
    set -e
    rm -rf .gpu-py && mkdir -p .gpu-py/wheel .gpu-py/golden/next
    # manylinux off: the wheel only has to install on the device image.
    python3 -m maturin build --release --compatibility linux --out .gpu-py/wheel -m sampler-py/Cargo.toml
    cp "${GOLDEN_DIR:-$here/../shared/golden}"/*.json .gpu-py/golden/
    cp "${GOLDEN_DIR:-$here/../shared/golden}"/next/*.json .gpu-py/golden/next/
    git rev-parse HEAD > .gpu-py/commit 2>/dev/null || true
    du -sh .gpu-py
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
        if ls .whl/fi066/*.whl >/dev/null 2>&1; then
            python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/fi066/*.whl || true
            fi=--flashinfer
        else
            fi=
        fi
        export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 PATH=$PATH:/usr/local/cuda/bin
        python3 -c "import torch, sampler_py; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"
        echo "== pytest (CPU suite + GPU tests)"
        SAMPLER_GOLDEN_DIR=.gpu-py/golden timeout 300 python3 -m pytest -q -rs sampler-py/tests \
            -p no:cacheprovider --junitxml="$out/pytest.xml" || rc=1
        echo "== binding overhead, R = 64 (CUDA backend, host logits) and R = 64 CPU"
        timeout 120 python3 sampler-py/bench/overhead.py --backend cuda --rows 64 --iters 50 $fi --json "$out/overhead-cuda.json" || rc=1
        timeout 120 python3 sampler-py/bench/overhead.py --backend cpu --rows 64 --iters 5 --json "$out/overhead-cpu.json" || rc=1
        echo "== rc=$rc"
    }
    exit $rc
    ;;
*)
    sed -n '2,22p' "$0"
    exit 2
    ;;
esac
