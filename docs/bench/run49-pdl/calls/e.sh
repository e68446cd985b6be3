#!/usr/bin/env bash
set -u
R=$OUT; rm -rf .gpu/stage; mkdir -p $R .gpu/stage
xz -dc .gpu/round.txz | tar xf - -C .gpu/stage
b=.gpu/stage/bin; gd=.gpu/stage/golden
{
echo "== e (main 0b73a1f, own PTX) devices clusters $(date -u +%T)"
SAMPLER_GOLDEN_DIR=$gd timeout 200 $b/devices --test-threads 1 --nocapture cuda_counts::golden_and_adversarial_rows_through_clusters 2>&1 | tail -3
echo "== golden default"; timeout 100 $b/gpu_suite golden $gd 2>&1 | tail -2
echo "== golden cluster 16"; SAMPLER_CLUSTER=16 timeout 100 $b/gpu_suite golden $gd 2>&1 | tail -2
echo "== golden cluster 8"; SAMPLER_CLUSTER=8 timeout 100 $b/gpu_suite golden $gd 2>&1 | tail -2
echo "== adversarial cluster 16"; SAMPLER_CLUSTER=16 timeout 100 $b/gpu_suite adversarial > $R/adv-e16.log 2>&1; echo "rc $? $(grep -c 'bitwise ok' $R/adv-e16.log) ok"; grep -v "bitwise ok" $R/adv-e16.log | tail -3
echo "== synth"; timeout 60 $b/gpu_suite synth 1:1024 1:4096 4:1024 8:4096 16:1024 16:0 1:0 64:4096 384:4096 2>&1 | tail -9
echo "== racecheck R=1 N=1024 $(date -u +%T)"; SAN=$(ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1); [ -n "$SAN" ] || SAN=compute-sanitizer
timeout 200 $SAN --tool racecheck --print-limit 5 $b/gpu_suite synth 1:1024 2>&1 | tail -4
echo "== end $(date -u +%T)"
} > $R/e.log 2>&1
cat $R/e.log | cut -c1-220
