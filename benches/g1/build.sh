#!/usr/bin/env bash
# Builds benches/g1/g1.cu here (no GPU needed) with pip's CUDA 13.0 wheels, for the H200's driver
# (580, CUDA 13.0): sm_90 SASS plus compute_90 PTX of ISA 9.0 (no newer than that driver's JIT
# accepts), cudart linked statically. Output: .gpux-g1/g1 (git-ignored; carry it to the device),
# .gpux-g1/ptxas.txt (registers, spills) and .gpux-g1/sass-loops.txt (SASS per logit of hot loops).
#
#   bash benches/g1/build.sh            # creates .venv-g1 with the wheels on first use
#   NVCC=/path/to/nvcc bash benches/g1/build.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="$root/.gpux-g1"
# The wheels' venv: G1_VENV, else ./.venv if it already has them, else ./.gpux-g1-venv (git-ignored).
venv="${G1_VENV:-}"
if [ -z "$venv" ]; then
    venv="$root/.gpux-g1-venv"
    ls "$root"/.venv/lib/python3*/site-packages/nvidia/cu13/bin/nvcc > /dev/null 2>&1 && venv="$root/.venv"
fi
if [ -z "${NVCC:-}" ]; then
    if ! ls "$venv"/lib/python3*/site-packages/nvidia/cu13/bin/nvcc > /dev/null 2>&1; then
        python3 -m venv "$venv"
        # nvcc, crt and nvvm must be the same release (pip would otherwise pull the newest crt/nvvm).
        "$venv/bin/pip" install -q "nvidia-cuda-nvcc==13.0.*" "nvidia-cuda-crt==13.0.*" "nvidia-nvvm==13.0.*" \
            "nvidia-cuda-runtime==13.0.*" "nvidia-cuda-cccl==13.0.*" \
            "nvidia-cuda-cuobjdump==13.2.*" "nvidia-cuda-nvdisasm==13.2.*"
    fi
    NVCC="$(ls "$venv"/lib/python3*/site-packages/nvidia/cu13/bin/nvcc | head -1)"
fi
cu="$(dirname "$(dirname "$NVCC")")"
export PATH="$cu/bin:$PATH"  # cuobjdump -sass needs nvdisasm
mkdir -p "$out"
"$NVCC" --version | tail -1
"$NVCC" -std=c++17 -O3 -lineinfo \
    -gencode=arch=compute_90,code=sm_90 -gencode=arch=compute_90,code=compute_90 \
    -cudart static -Xptxas -v -Xcompiler -Wall,-Wextra \
    "$root/benches/g1/g1.cu" -o "$out/g1" -L"$cu/lib" 2> "$out/ptxas.txt" || { cat "$out/ptxas.txt"; exit 1; }
# Everything nvcc printed besides ptxas' register report (warnings) is shown here.
grep -v -E "^ptxas info|bytes stack frame|^$" "$out/ptxas.txt" || true
echo "ptxas: $(grep -c 'Used' "$out/ptxas.txt") entries; entries with a stack frame or spills:"
awk '/Compiling entry function/ {name=$0; sub(/.*function ./, "", name); sub(/. for .*/, "", name)}
     /bytes stack frame/ && !/^ *0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads/ {print "  " name ":" $0; n++}
     END {if (!n) print "  none"}' "$out/ptxas.txt"
# The PTX embedded for the JIT must be ISA <= 9.0 (driver 580 = CUDA 13.0).
cuobjdump="$cu/bin/cuobjdump"
"$cuobjdump" -ptx "$out/g1" > "$out/g1.ptx"
echo "embedded PTX: $(grep "^.version" "$out/g1.ptx" | sort -u | tr '\n' ' ')($(grep -c "^.target" "$out/g1.ptx") module(s))"
"$cuobjdump" -sass "$out/g1" > "$out/g1.sass"
python3 "$root/benches/g1/sass_loops.py" "$out/g1.sass" | tee "$out/sass-loops.txt"
# The device script travels with the binary, so the run works whether or not this branch is merged.
# The source too: run.sh rebuilds with the device's nvcc if this binary does not start there
# (other system libraries).
cp "$root/benches/g1/run.sh" "$out/run.sh"
cp "$root/benches/g1/g1.cu" "$out/g1.cu"
ls -la "$out/g1" "$out/run.sh"
