#!/usr/bin/env bash
# Session 18 call V: the tree (PTX h = g + rest_mass four tiles a pass, the head loaded after; clusters of any size 2..16, cluster_auto the most CTAs >= 6 in one wave): correctness, h against g, the cluster sweep at R = 8-24, PDL at R = 8-16.
set -u
R=$OUT; rm -rf .gpu/stage; mkdir -p $R .gpu/stage
xz -dc .gpu/round.txz | tar xf - -C .gpu/stage
b=.gpu/stage/bin; gd=.gpu/stage/golden
xz -dc .gpu/ptx-g.ptx.xz > /tmp/ptx-g.ptx
bench() { awk -F'|' 'NF>10{print $2,$3,$4,$8,$NF}' | grep -v "^ *R "; }
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; cat .gpu/stage/commit
echo "== warm $(date -u +%T)"; timeout 200 $b/gpu_suite synth 1:64 > /dev/null 2>&1 & SAMPLER_PTX_FILE=/tmp/ptx-g.ptx timeout 200 $b/gpu_suite synth 1:64 > /dev/null 2>&1; wait
timeout 60 $b/benchmark run --rows 1 --n 1024 2>&1 | grep "cluster top-N"
echo "== devices (all) $(date -u +%T)"
SAMPLER_GOLDEN_DIR=$gd timeout 240 $b/devices --test-threads 1 --nocapture > $R/devices.log 2>&1; echo "rc $?"; grep -E "test result|clusters on CUDA" $R/devices.log
for c in "" 6 7 12; do echo "== golden cluster '$c'"; SAMPLER_CLUSTER=$c timeout 100 $b/gpu_suite golden $gd 2>&1 | tail -2; done
echo "== adversarial"; timeout 100 $b/gpu_suite adversarial > $R/adv.log 2>&1; echo "rc $? $(grep -c 'bitwise ok' $R/adv.log) ok"
echo "== adversarial cluster 7"; SAMPLER_CLUSTER=7 timeout 100 $b/gpu_suite adversarial > $R/adv7.log 2>&1; echo "rc $? $(grep -c 'bitwise ok' $R/adv7.log) ok"; grep -v "bitwise ok" $R/adv7.log | tail -2
echo "== synth"; timeout 100 $b/gpu_suite synth 1:1024 1:4096 8:1024 12:4096 16:1024 16:4096 16:0 20:1024 24:4096 64:1024 64:4096 384:4096 2>&1 | tail -12
echo "== h vs g $(date -u +%T)"
for pass in 1 2; do for v in g h; do
  echo "-- $v pass $pass"; env $([ $v = g ] && echo SAMPLER_PTX_FILE=/tmp/ptx-g.ptx) timeout 90 $b/benchmark run --rows 1,4,64,384 --n 1024,4096 --json $R/$v-$pass.json 2>&1 | bench
done; done
echo "== bf16 h vs g"; for v in g h; do env $([ $v = g ] && echo SAMPLER_PTX_FILE=/tmp/ptx-g.ptx) timeout 60 $b/benchmark run --dtype bf16 --rows 1,64 --n 1024,4096 --json $R/bf16-$v.json 2>&1 | bench; done
echo "== cluster sweep $(date -u +%T)"
for pass in 1 2; do for c in auto 0 5 6 7 8; do
  echo "-- cluster $c pass $pass"; env $([ $c != auto ] && echo SAMPLER_CLUSTER=$c) timeout 90 $b/benchmark run --rows 8,12,16,20,24 --n 1024,4096,0 --json $R/cl-$c-$pass.json 2>&1 | bench
done; done
echo "== PDL at R = 8-16"; for p in 1 auto; do env $([ $p = 1 ] && echo SAMPLER_PDL=1) timeout 90 $b/benchmark run --rows 8,12,16 --n 1024,4096,0 --json $R/pdl-$p.json 2>&1 | bench; done
echo "== end $(date -u +%T)"
} > $R/v.log 2>&1
cd $R && tar cf - *.json *.log | xz -9 > all.txz
head -48 v.log | cut -c1-220
