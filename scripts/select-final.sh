#!/usr/bin/env bash
# Issue 12 (select), one device call: variant A (the branch) golden + adversarial + the table's
# shapes; variants B (warp-aggregated wide histogram) and C (4 keys per thread register bitonic
# sort) golden + a few shapes; an Nsight Compute look at topn_chunk/topn_merge.
set -u
here="$(cd "$(dirname "$0")/.." && pwd)"; cd "$here"
out="${OUT:-/tmp/bench-out}"; mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== A golden"; timeout 60 .gpu/bin/gpu_suite golden .gpu/golden > "$out/goldenA.log" 2>&1; echo "rc $?"; tail -1 "$out/goldenA.log"
echo "== A adversarial"; timeout 40 .gpu/bin/gpu_suite adversarial 2>&1 | tee "$out/advA.log"
echo "== A bench"; timeout 60 .gpu/bin/benchmark run --rows 1,16,64,256,384 --n 1024,4096,0 --reps 30 --json "$out/oursA.json" --csv "$out/oursA.csv" 2>&1 | grep "^|" | cut -c1-75,130-420
for x in B C; do
  echo "== $x golden"; timeout 40 .gpu$x/gpu_suite golden .gpu/golden > "$out/golden$x.log" 2>&1; echo "rc $?"; tail -1 "$out/golden$x.log"
  echo "== $x bench"; timeout 30 .gpu$x/benchmark run --rows 1,64,384 --n 1024,4096 --reps 20 --check-rows 1 --json "$out/ours$x.json" 2>&1 | grep "^|" | cut -c1-75,130-420
done
ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
echo "== ncu (${ncu:-none})"
if [ -n "$ncu" ]; then
  timeout 45 "$ncu" -k "regex:topn_" -c 2 --section SpeedOfLight --section WarpStateStats --section Occupancy --section LaunchStats \
    .gpu/bin/benchmark run --rows 64 --n 4096 --reps 1 --check-rows 0 > "$out/ncu.txt" 2>&1
  grep -iE "^  [a-z_]+_t[0-9]+|Duration|stall|Achieved Occupancy|Registers Per|Dynamic Shared|Memory Throughput|Compute \(SM\)|Block Limit" "$out/ncu.txt" | cut -c1-160 | head -60
fi
