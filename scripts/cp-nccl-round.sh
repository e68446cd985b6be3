#!/usr/bin/env bash
# Two-GPU round: NCCL context parallelism + the engine tests on the CUDA backend.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi -L
echo "== cp_nccl"
./.cpx/cp_nccl; echo "cp_nccl exit $?"
for t in engine_cp engine_golden engine_grammar engine_pool engine_prompt; do
  echo "== $t (SAMPLER_ENGINE_BACKEND=cuda)"
  SAMPLER_ENGINE_BACKEND=cuda ./.cpx/$t 2>&1 | tail -4
done
# Build here first (release, stripped) into the ignored .cpx/:
#   cargo build --release --example cp_nccl && cargo test --release --no-run --test 'engine_*'
#   copy target/release/examples/cp_nccl and target/release/deps/engine_* binaries to .cpx/, strip them,
#   copy this script to .cpx/run.sh; then one device call on nvidia-h200-x2 carrying .cpx.
