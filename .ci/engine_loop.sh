#!/usr/bin/env bash
# CI: the engine loop on the CPU for a short run (a few seconds), and the
# MTP info pool sizes of SAMPLER.md section 9 (64 seqs, nextn 5).
set -euo pipefail
out=$(cargo run --release --example engine_loop -- --backend cpu --steps 8 --max-num-seqs 64 --nextn 5 --force-topk 4096)
echo "$out"
grep -q "= 10649600 bytes" <<<"$out"    # 325 * 4096 * 8 (force top-k 4096)
grep -q "= 168064000 bytes" <<<"$out"   # 325 * 129280 * 4 (force top-k off)
grep -q "^done: 8 steps" <<<"$out"
# Tree verification (SAMPLER.md section 11): the EAGLE-style tree drafter beside
# the chain drafter on the same synthetic model, fixed and without replacement.
for law in fixed without; do
  out=$(cargo run --release --example engine_loop -- --backend cpu --tree --tree-law "$law" --vocab 32000 --force-topk 1024 --steps 4 --batch 8 --temperature 0.3)
  echo "$out"
  grep -q "^done: chain .* | tree .* tokens/request-step" <<<"$out"
done
# The engine tests themselves run in `cargo test --workspace`; only the
# llguidance feature needs its own build.
cargo test --release -p sampler-host --features grammar-llguidance --lib engine::
