#!/usr/bin/env bash
# Ahead-of-time build of the generated AscendC kernels with CANN's bisheng
# (run on a machine with CANN installed; see docs/ASCEND.md). Not run in CI.
#   ASCEND_HOME_PATH=/usr/local/Ascend/ascend-toolkit/latest ./build_aot.sh [OUT_DIR]
#   AUTO_SYNC=off ./build_aot.sh ...   # without the compiler's auto-sync (the emitted barriers only)
# Flags (asc-devkit's dav-c220-vec target and tools/aclrtc):
#   -xasc                  the AscendC language switch (else *.cpp is host C++: __gm__/__aicore__ fail)
#   --npu-arch=dav-2201    910B/910C AI vector cores
#   --cce-auto-sync=on|off stated explicitly (its default is documented only for <<<>>> builds)
#   -ffp-contract=off      no FMA contraction: sk::exp, ln_fixed and the IEEE divisions match the CPU bit for bit
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$here/build}"
home="${ASCEND_HOME_PATH:?set ASCEND_HOME_PATH to the CANN toolkit}"
auto_sync="${AUTO_SYNC:-on}"
mkdir -p "$out"
for src in "$here"/*.cpp; do
  k="$(basename "$src" .cpp)"
  bisheng -xasc --npu-arch=dav-2201 -O2 -std=c++17 --cce-auto-sync="$auto_sync" -ffp-contract=off \
    -I"$here/include" \
    -I"$home/include" -I"$home/compiler/tikcpp" -I"$home/compiler/tikcpp/tikcfw" \
    -I"$home/compiler/tikcpp/tikcfw/impl" -I"$home/compiler/tikcpp/tikcfw/interface" \
    -c "$src" -o "$out/$k.o"
  echo "built $out/$k.o (auto-sync $auto_sync)"
done
