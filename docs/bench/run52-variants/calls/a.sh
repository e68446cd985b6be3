#!/usr/bin/env bash
# Session 19 call A: main's defaults (PENDING 18th item 0), variant i (PTX), variant j (own stage), the fused
# cluster tail and the 64-thread head tile re-measured.
# run(command="bash gpucall/a.sh", carry=[".gpu/both.txz", ".gpu/ptx-i.ptx.xz", ".gpu/ptx-s.ptx.xz"])
set -u
R=$OUT; mkdir -p $R
rm -rf .gpu/st-main .gpu/st-j; xz -dc .gpu/both.txz | tar xf - -C .gpu
xz -dc .gpu/ptx-i.ptx.xz > /tmp/ptx-i.ptx; xz -dc .gpu/ptx-s.ptx.xz > /tmp/ptx-s.ptx
S=SAMPLER_PTX_FILE=/tmp/ptx-s.ptx
I=SAMPLER_PTX_FILE=/tmp/ptx-i.ptx
m=.gpu/st-main/bin; j=.gpu/st-j/bin; gd=.gpu/st-main/golden
bench() { awk -F'|' 'NF>10{print $2,$3,$4,$8,$NF}' | grep -v "^ *R "; }
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; cat .gpu/st-main/commit .gpu/st-j/commit
echo "== warm $(date -u +%T)"
timeout 240 $m/gpu_suite synth 1:64 > /dev/null 2>&1 & env $S timeout 240 $m/gpu_suite synth 1:64 > /dev/null 2>&1 & env $I timeout 240 $m/gpu_suite synth 1:64 > /dev/null 2>&1 & timeout 240 $j/gpu_suite synth 1:64 > /dev/null 2>&1; wait
timeout 60 $m/benchmark run --rows 1 --n 1024 2>&1 | grep -E "cluster top-N|PDL"
echo "== main devices (all) $(date -u +%T)"
SAMPLER_GOLDEN_DIR=$gd timeout 240 $m/devices --test-threads 1 --nocapture > $R/devices-main.log 2>&1; echo "rc $?"; grep -E "test result|clusters on CUDA" $R/devices-main.log
echo "== main golden"; timeout 100 $m/gpu_suite golden $gd 2>&1 | tail -2
echo "== main adversarial"; timeout 100 $m/gpu_suite adversarial > $R/adv-main.log 2>&1; echo "rc $? $(grep -c 'bitwise ok' $R/adv-main.log) ok"
echo "== main synth"; timeout 120 $m/gpu_suite synth 1:1024 1:0 8:1024 8:0 16:1024 16:4096 20:0 24:0 64:4096 384:4096 2>&1 | tail -10
echo "== i devices clusters $(date -u +%T)"; env $I SAMPLER_GOLDEN_DIR=$gd timeout 200 $m/devices --test-threads 1 --nocapture cuda_counts::golden_and_adversarial_rows_through_clusters 2>&1 | grep -E "clusters on CUDA|test result"
for c in "" 6 16; do echo "== i golden cluster '$c'"; env $I SAMPLER_CLUSTER=$c timeout 100 $m/gpu_suite golden $gd 2>&1 | tail -2; done
echo "== i synth"; env $I timeout 100 $m/gpu_suite synth 1:0 4:0 8:0 16:0 1:1024 16:1024 2>&1 | tail -6
echo "== j devices (all) $(date -u +%T)"; SAMPLER_GOLDEN_DIR=$gd timeout 240 $j/devices --test-threads 1 --nocapture > $R/devices-j.log 2>&1; echo "rc $?"; grep -E "test result|clusters on CUDA" $R/devices-j.log
for c in "" 6 16; do echo "== j golden cluster '$c'"; SAMPLER_CLUSTER=$c timeout 100 $j/gpu_suite golden $gd 2>&1 | tail -2; done
echo "== j adversarial cluster 6"; SAMPLER_CLUSTER=6 timeout 100 $j/gpu_suite adversarial > $R/adv-j6.log 2>&1; echo "rc $? $(grep -c 'bitwise ok' $R/adv-j6.log) ok"
echo "== j synth"; timeout 100 $j/gpu_suite synth 1:1024 1:4096 8:4096 16:4096 16:1024 16:0 2>&1 | tail -6
echo "== s golden / adversarial / synth $(date -u +%T)"; env $S timeout 100 $m/gpu_suite golden $gd 2>&1 | tail -2
env $S SAMPLER_CLUSTER=0 SAMPLER_STREAM_SELECT=1 timeout 100 $m/gpu_suite golden $gd 2>&1 | tail -2
env $S timeout 100 $m/gpu_suite adversarial > $R/adv-s.log 2>&1; echo "rc $? $(grep -c 'bitwise ok' $R/adv-s.log) ok"
env $S timeout 150 $m/gpu_suite synth 1:0 20:0 32:4096 64:4096 64:0 128:4096 384:4096 384:1024 384:0 2>&1 | tail -9
echo "== s devices (all)"; env $S SAMPLER_GOLDEN_DIR=$gd timeout 240 $m/devices --test-threads 1 --nocapture > $R/devices-s.log 2>&1; echo "rc $?"; grep -E "test result" $R/devices-s.log
echo "== s bench"
for pass in 1 2; do for v in main s; do e=""; [ $v = s ] && e=$S
  echo "-- $v pass $pass"; env $e timeout 120 $m/benchmark run --rows 16,20,32,64,128,256,384 --n 1024,4096,0 --json $R/s-$v-$pass.json 2>&1 | bench
done; done
echo "-- one CTA a row at N = 1024 (SAMPLER_STREAM_CHUNKS=1)"; for v in main s; do e=""; [ $v = s ] && e=$S; env $e SAMPLER_STREAM_CHUNKS=1 timeout 60 $m/benchmark run --rows 24,32,48,64 --n 1024 --json $R/s-one-$v.json 2>&1 | bench; done
echo "-- bf16"; for v in main s; do e=""; [ $v = s ] && e=$S; env $e timeout 60 $m/benchmark run --dtype bf16 --rows 20,64,384 --n 4096,0 --json $R/s-bf16-$v.json 2>&1 | bench; done
echo "== bench $(date -u +%T)"
for pass in 1 2; do for v in main pdl0 i j; do
  b=$m; e=""; [ $v = j ] && b=$j; [ $v = i ] && e=$I; [ $v = pdl0 ] && e=SAMPLER_PDL=0
  echo "-- $v pass $pass"; env $e timeout 120 $b/benchmark run --rows 1,4,8,12,16,20,24,32,64 --n 1024,4096,0 --json $R/$v-$pass.json 2>&1 | bench
done; done
echo "== bf16 $(date -u +%T)"
for v in main i j; do b=$m; e=""; [ $v = j ] && b=$j; [ $v = i ] && e=$I
  echo "-- bf16 $v"; env $e timeout 60 $b/benchmark run --dtype bf16 --rows 1,4,16,64 --n 1024,0 --json $R/bf16-$v.json 2>&1 | bench; done
echo "== tail / head tile $(date -u +%T)"
for pass in 1 2; do for e in "" SAMPLER_CLUSTER_TAIL=1 SAMPLER_HEAD_TILE=64; do
  echo "-- '$e' pass $pass"; env $e timeout 60 $m/benchmark run --rows 1,4,8,16,64 --n 1024,4096 --json $R/t-$pass-${e#SAMPLER_}.json 2>&1 | bench; done; done
echo "== end $(date -u +%T)"
} > $R/a.log 2>&1
cd $R && tar cf - *.json *.log | xz -9 > all.txz && rm -f *.json
head -60 a.log | cut -c1-200
