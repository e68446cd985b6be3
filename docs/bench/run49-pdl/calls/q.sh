#!/usr/bin/env bash
# Session 18 call Q: the tree's PTX (g: griddepcontrol at every entry + the cluster tie counts by 16 lanes) with PDL auto (R <= 4): correctness, PDL at R = 1..8 off vs auto, a cluster-size sweep at R = 16-64, bf16.
set -u
R=$OUT; rm -rf .gpu/stage; mkdir -p $R .gpu/stage
xz -dc .gpu/round.txz | tar xf - -C .gpu/stage
b=.gpu/stage/bin; gd=.gpu/stage/golden
bench() { awk -F'|' 'NF>10{print $2,$3,$4,$8,$NF} /cluster top-N/{print}'; }
SAN=$(ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1); [ -n "$SAN" ] || SAN=compute-sanitizer
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; cat .gpu/stage/commit
echo "== warm $(date -u +%T)"; timeout 200 $b/gpu_suite synth 1:64 > /dev/null 2>&1
echo "== devices (all) $(date -u +%T)"
SAMPLER_GOLDEN_DIR=$gd timeout 240 $b/devices --test-threads 1 > $R/devices.log 2>&1; echo "rc $?"; grep "test result" $R/devices.log
for c in "" 16 8; do echo "== golden cluster '$c'"; SAMPLER_CLUSTER=$c timeout 100 $b/gpu_suite golden $gd 2>&1 | tail -2; done
echo "== golden PDL=1 (every R)"; SAMPLER_PDL=1 timeout 100 $b/gpu_suite golden $gd 2>&1 | tail -2
echo "== adversarial"; timeout 100 $b/gpu_suite adversarial > $R/adv.log 2>&1; echo "rc $? $(grep -c 'bitwise ok' $R/adv.log) ok"
echo "== adversarial cluster 16"; SAMPLER_CLUSTER=16 timeout 100 $b/gpu_suite adversarial > $R/adv16.log 2>&1; echo "rc $? $(grep -c 'bitwise ok' $R/adv16.log) ok"
echo "== synth"; timeout 100 $b/gpu_suite synth 1:1024 1:4096 1:0 2:1024 4:1024 4:0 8:4096 16:1024 16:0 64:4096 384:4096 2>&1 | tail -11
echo "== memcheck + racecheck R=4 N=1024 (PDL auto) $(date -u +%T)"
timeout 150 $SAN --tool memcheck $b/gpu_suite synth 4:1024 1:0 2>&1 | tail -2
timeout 150 $SAN --tool racecheck $b/gpu_suite synth 4:1024 2>&1 | tail -1
for pass in 1 2; do for p in 0 auto; do
  echo "== bench PDL=$p pass $pass $(date -u +%T)"
  env $([ $p = 0 ] && echo SAMPLER_PDL=0) timeout 90 $b/benchmark run --rows 1,2,4,8 --n 1024,4096,0 --json $R/pdl-$p-$pass.json 2>&1 | bench | tail -12
done; done
for pass in 1 2; do for c in auto 4 8; do
  echo "== bench cluster=$c pass $pass $(date -u +%T)"
  env $([ $c != auto ] && echo SAMPLER_CLUSTER=$c) timeout 90 $b/benchmark run --rows 16,32,64 --n 1024,4096,0 --json $R/cl-$c-$pass.json 2>&1 | bench | tail -9
done; done
echo "== bf16 auto"; timeout 60 $b/benchmark run --dtype bf16 --rows 1,4,16 --n 1024,0 --json $R/bf16.json 2>&1 | bench | tail -6
echo "== end $(date -u +%T)"
} > $R/q.log 2>&1
cd $R && tar cf - *.json *.log | xz -9 > all.txz
cat $R/q.log | cut -c1-200 | head -150
