#!/usr/bin/env bash
# Ahead-of-time build of the generated AscendC kernels with CANN's bisheng
# (run on a machine with CANN installed; see docs/ASCEND.md). Not run in CI.
#   ASCEND_HOME_PATH=/usr/local/Ascend/ascend-toolkit/latest ./build_aot.sh [OUT_DIR]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$here/build}"
home="${ASCEND_HOME_PATH:?set ASCEND_HOME_PATH to the CANN toolkit}"
mkdir -p "$out"
for src in "$here"/*.cpp; do
  k="$(basename "$src" .cpp)"
  # dav-2201 = Ascend 910B/910C AI vector cores; one device object per kernel.
  bisheng -O2 -std=c++17 --cce-aicore-arch=dav-c220-vec --cce-aicore-only -ffp-contract=off \
    -I"$home/compiler/tikcpp" -I"$home/compiler/tikcpp/tikcfw" \
    -I"$home/compiler/tikcpp/tikcfw/impl" -I"$home/compiler/tikcpp/tikcfw/interface" \
    -I"$home/include" -c "$src" -o "$out/$k.o"
  echo "built $out/$k.o"
done
