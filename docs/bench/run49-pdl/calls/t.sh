#!/usr/bin/env bash
# Session 18 call T: the tree (PTX g; PDL auto to R = 4; cluster_auto from the device's clusters at once): correctness, main's policy (PTX e, PDL off, its cluster sizes forced per shape) beside the tree at R = 1-16, then the speed round with FlashInfer 0.6.6.
set -u
R=$OUT; rm -rf .gpu/stage; mkdir -p $R .gpu/stage
xz -dc .gpu/round.txz | tar xf - -C .gpu/stage
b=.gpu/stage/bin; gd=.gpu/stage/golden
xz -dc .gpu/ptx-e.ptx.xz > /tmp/ptx-e.ptx
bench() { awk -F'|' 'NF>10{print $2,$3,$4,$8,$NF} /cluster top-N/{print}'; }
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== warm $(date -u +%T)"; timeout 200 $b/gpu_suite synth 1:64 > /dev/null 2>&1 & SAMPLER_PTX_FILE=/tmp/ptx-e.ptx timeout 200 $b/gpu_suite synth 1:64 > /dev/null 2>&1; wait
echo "== devices (all) $(date -u +%T)"
SAMPLER_GOLDEN_DIR=$gd timeout 240 $b/devices --test-threads 1 > $R/devices.log 2>&1; echo "rc $?"; grep "test result" $R/devices.log
echo "== golden"; timeout 100 $b/gpu_suite golden $gd 2>&1 | tail -2
echo "== golden cluster 4"; SAMPLER_CLUSTER=4 timeout 100 $b/gpu_suite golden $gd 2>&1 | tail -2
echo "== adversarial"; timeout 100 $b/gpu_suite adversarial > $R/adv.log 2>&1; echo "rc $? $(grep -c 'bitwise ok' $R/adv.log) ok"
echo "== adversarial cluster 4"; SAMPLER_CLUSTER=4 timeout 100 $b/gpu_suite adversarial > $R/adv4.log 2>&1; echo "rc $? $(grep -c 'bitwise ok' $R/adv4.log) ok"; grep -v "bitwise ok" $R/adv4.log | tail -2
echo "== synth"; timeout 100 $b/gpu_suite synth 5:1024 7:4096 7:0 8:1024 12:1024 15:4096 15:0 16:0 16:1024 2>&1 | tail -9
echo "== before/after $(date -u +%T)"
for pass in 1 2; do
  echo "-- tree pass $pass"; timeout 90 $b/benchmark run --rows 1,4,7,12,15,16 --n 1024,4096,0 --json $R/new-$pass.json 2>&1 | bench | tail -19
  echo "-- main pass $pass"
  for g in "16 1,4 1024,4096,0" "8 7 1024,4096,0" "0 12,15,16 1024,4096" "8 12,15,16 0"; do set -- $g
    SAMPLER_PTX_FILE=/tmp/ptx-e.ptx SAMPLER_PDL=0 SAMPLER_CLUSTER=$1 timeout 90 $b/benchmark run --rows $2 --n $3 --json $R/old-$1-$2-$pass.json 2>&1 | bench | grep -v "^ *R " | grep -v "cluster top-N"
  done
done
} > $R/t.log 2>&1
cd $R && tar cf - *.json *.log | xz -9 > all.txz
cat t.log | cut -c1-200 | head -60
