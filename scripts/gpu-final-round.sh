#!/usr/bin/env bash
# Final round after the speed work and the mask side stream: golden on CUDA vs CPU,
# sanitizers on a masked step, the CUDA backend tests and the engine suites on CUDA.
set -u
nvidia-smi -L
echo "== golden: CUDA vs expected and vs CPU"
timeout 240 ./.cpx/gpu_suite golden .cpx/golden 2>&1 | tail -8
cs=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
for tool in memcheck racecheck; do
  for st in case-101-021 case-102-001; do
    echo "-- $tool $st"
    timeout 120 "$cs" --tool $tool --error-exitcode 9 ./.cpx/gpu_suite step .cpx/golden/$st.json 2>&1 | grep -E "ERROR SUMMARY|RACECHECK SUMMARY|step " | head -4
  done
done
echo "== cuda_backend tests"
./.cpx/cuda_backend 2>&1 | tail -3
for t in engine_grammar engine_cp engine_pool; do
  echo "== $t (SAMPLER_ENGINE_BACKEND=cuda)"
  SAMPLER_ENGINE_BACKEND=cuda ./.cpx/$t 2>&1 | tail -2
done
