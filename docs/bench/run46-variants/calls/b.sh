#!/usr/bin/env bash
# Session 17 call B: PTX variants against the binaries' own (a = main 04b6c74):
#  b: two-level block collectives + cluster one-walk classification, quad walks
#  c: the cluster change of b only;  d: b + zeroing only what is added into
#  e: d + relaxed cluster arrives (fence only in threads that wrote remotely), PTX ISA 8.0
# Logs go straight to $OUT (a timeout still returns them).
set -u
R=$OUT; mkdir -p $R .gpu/stage
xz -dc .gpu/round-main.txz | tar xf - -C .gpu/stage
b=.gpu/stage/bin; gd=.gpu/stage/golden
for v in d e; do xz -dc .gpu/ptx-$v.ptx.xz > /tmp/ptx-$v.ptx; done
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader | tee $R/gpu.txt
e() { [ $1 = a ] || echo SAMPLER_PTX_FILE=/tmp/ptx-$1.ptx; }
bench() { awk -F'|' 'NF>10{print $2,$3,$4,$8,$NF} /cluster top-N/{print}'; }
{
echo "== warm $(date -u +%T)"
for v in a d e; do env $(e $v) timeout 300 $b/gpu_suite synth 1:64 > $R/warm-$v.log 2>&1 & done; wait
echo "== item 0 (a) $(date -u +%T)"
timeout 100 $b/gpu_suite synth 1:1024 4:4096 8:1024 16:1024 1:0 2>&1 | tail -7
for v in e; do
  echo "== $v devices clusters $(date -u +%T)"
  env $(e $v) SAMPLER_GOLDEN_DIR=$gd timeout 150 $b/devices --test-threads 1 --nocapture cuda_counts::golden_and_adversarial_rows_through_clusters > $R/dev-$v.log 2>&1; echo "rc $?"; tail -4 $R/dev-$v.log
done
echo "== e golden default $(date -u +%T)"; env $(e e) timeout 120 $b/gpu_suite golden $gd 2>&1 | tail -3
echo "== e golden cluster 16"; env $(e e) SAMPLER_CLUSTER=16 timeout 120 $b/gpu_suite golden $gd 2>&1 | tail -3
echo "== e golden stream 8 chunks"; env $(e e) SAMPLER_CLUSTER=0 SAMPLER_STREAM_SELECT=1 SAMPLER_STREAM_CHUNKS=8 timeout 120 $b/gpu_suite golden $gd 2>&1 | tail -3
echo "== e adversarial (cluster 16, then stream) $(date -u +%T)"; env $(e e) SAMPLER_CLUSTER=16 timeout 100 $b/gpu_suite adversarial > $R/adv-e16.log 2>&1; echo "rc $? $(grep -c 'bitwise ok' $R/adv-e16.log) ok"; grep -v "bitwise ok" $R/adv-e16.log | tail -4
env $(e e) SAMPLER_CLUSTER=0 SAMPLER_STREAM_SELECT=1 timeout 100 $b/gpu_suite adversarial > $R/adv-e0.log 2>&1; echo "rc $? $(grep -c 'bitwise ok' $R/adv-e0.log) ok"; grep -v "bitwise ok" $R/adv-e0.log | tail -4
echo "== e synth $(date -u +%T)"; env $(e e) timeout 100 $b/gpu_suite synth 1:1024 1:4096 4:1024 8:4096 16:1024 64:4096 384:4096 64:0 2>&1 | tail -9
for p in 1 2; do vs="a d e"; [ $p = 2 ] && vs="a e"; for v in $vs; do
  echo "== bench $v$p $(date -u +%T)"
  env $(e $v) timeout 90 $b/benchmark run --rows 1,4,16,64,384 --n 1024,4096,0 --json $R/ours-$v$p.json 2>&1 | bench | tail -16
done; done
for v in a e; do echo "== fused tail $v $(date -u +%T)"; env $(e $v) SAMPLER_CLUSTER_TAIL=1 timeout 60 $b/benchmark run --rows 1,4 --n 1024,4096 --json $R/tail-$v.json 2>&1 | bench | tail -5; done
for v in a e; do echo "== bf16 $v $(date -u +%T)"; env $(e $v) timeout 60 $b/benchmark run --dtype bf16 --rows 1,16,384 --n 1024,4096 --json $R/bf16-$v.json 2>&1 | bench | tail -7; done
echo "== end $(date -u +%T)"
} > $R/b.log 2>&1
tail -c 11500 $R/b.log
