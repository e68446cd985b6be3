#!/usr/bin/env bash
# Session 17 call F: PTX f (the classification walk skips a warp's quads with one vote when none is kept; a tie's per-rank counts loaded by 16 lanes at once) against e (main e52c694).
set -u
R=$OUT; rm -rf .gpu/stage; mkdir -p $R .gpu/stage
xz -dc .gpu/round.txz | tar xf - -C .gpu/stage
b=.gpu/stage/bin; gd=.gpu/stage/golden
for v in e f; do xz -dc .gpu/ptx-$v.ptx.xz > /tmp/ptx-$v.ptx; done
e() { echo SAMPLER_PTX_FILE=/tmp/ptx-$1.ptx; }
bench() { awk -F'|' 'NF>10{print $2,$3,$4,$8,$NF} /cluster top-N/{print}'; }
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== warm $(date -u +%T)"
for v in e f; do env $(e $v) timeout 200 $b/gpu_suite synth 1:64 > /dev/null 2>&1 & done; wait
echo "== f devices clusters $(date -u +%T)"
env $(e f) SAMPLER_GOLDEN_DIR=$gd timeout 100 $b/devices --test-threads 1 --nocapture cuda_counts::golden_and_adversarial_rows_through_clusters 2>&1 | tail -4
echo "== f golden default"; env $(e f) timeout 100 $b/gpu_suite golden $gd 2>&1 | tail -2
echo "== f golden cluster 16"; env $(e f) SAMPLER_CLUSTER=16 timeout 100 $b/gpu_suite golden $gd 2>&1 | tail -2
echo "== f adversarial cluster 16"; env $(e f) SAMPLER_CLUSTER=16 timeout 100 $b/gpu_suite adversarial > $R/adv-f16.log 2>&1; echo "rc $? $(grep -c 'bitwise ok' $R/adv-f16.log) ok"; grep -v "bitwise ok" $R/adv-f16.log | tail -3
echo "== f synth"; env $(e f) timeout 60 $b/gpu_suite synth 1:1024 1:4096 4:1024 8:4096 16:0 1:0 2>&1 | tail -6
for p in 1 2; do for v in e f; do [ $p = 2 ] && [ $v = e ] && continue;
  echo "== bench $v$p $(date -u +%T)"
  env $(e $v) timeout 60 $b/benchmark run --rows 1,4,8,16 --n 1024,4096,0 --json $R/ours-$v$p.json 2>&1 | bench | tail -13
done; done
for v in e f; do echo "== bf16 $v"; env $(e $v) timeout 60 $b/benchmark run --dtype bf16 --rows 1,16 --n 1024,0 --json $R/bf16-$v.json 2>&1 | bench | tail -10; done
echo "== end $(date -u +%T)"
} > $R/f.log 2>&1
cat $R/f.log | cut -c1-220
