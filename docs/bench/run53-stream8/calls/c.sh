#!/usr/bin/env bash
# Session 19 call C: k = main + i (f's per-quad vote below N = 1024) + s (the stream pass's eight 16-byte loads a
# thread for f32 logits, four for bf16 / f16, guarded last step) + N = 1024 one block a row from R = 33 (was 65), as its
# own stage, against main's stage.
# run(command="bash gpucall/c.sh", carry=[".gpu/ck.txz"])
set -u
R=$OUT; mkdir -p $R
rm -rf .gpu/st-main .gpu/st-k; xz -dc .gpu/ck.txz | tar xf - -C .gpu
m=.gpu/st-main/bin; k=.gpu/st-k/bin; gd=.gpu/st-k/golden
bench() { awk -F'|' 'NF>10{print $2,$3,$4,$8,$19,$NF}' | grep -v "^ *R "; }
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== warm $(date -u +%T)"
timeout 240 $m/gpu_suite synth 1:64 > /dev/null 2>&1 & timeout 240 $k/gpu_suite synth 1:64 > /dev/null 2>&1; wait
timeout 60 $k/benchmark run --rows 1 --n 1024 2>&1 | grep -E "cluster top-N"
echo "== k devices (all) $(date -u +%T)"
SAMPLER_GOLDEN_DIR=$gd timeout 240 $k/devices --test-threads 1 --nocapture > $R/devices-k.log 2>&1; echo "rc $?"; grep -E "test result|on CUDA:" $R/devices-k.log | cut -c1-220
for e in "" SAMPLER_CLUSTER=6 SAMPLER_CLUSTER=16 "SAMPLER_CLUSTER=0 SAMPLER_STREAM_SELECT=1"; do echo "== k golden '$e'"; env $e timeout 100 $k/gpu_suite golden $gd 2>&1 | tail -2; done
echo "== k adversarial"; timeout 100 $k/gpu_suite adversarial > $R/adv-k.log 2>&1; echo "rc $? $(grep -c 'bitwise ok' $R/adv-k.log) ok"; grep -v "bitwise ok" $R/adv-k.log | tail -3
echo "== k synth"; timeout 200 $k/gpu_suite synth 1:1024 1:0 8:0 12:0 16:0 16:1024 20:0 32:4096 64:1024 64:4096 64:0 128:1024 256:4096 384:4096 384:1024 384:0 2>&1 | tail -16
echo "== bench $(date -u +%T)"
for pass in 1 2; do for v in main k; do b=$m; [ $v = k ] && b=$k
  echo "-- $v pass $pass"; timeout 150 $b/benchmark run --rows 1,4,8,12,16,20,32,48,64,128,256,384 --n 1024,4096,0 --json $R/$v-$pass.json 2>&1 | bench
done; done
echo "== bf16 $(date -u +%T)"
for pass in 1 2; do for v in main k; do b=$m; [ $v = k ] && b=$k
  echo "-- bf16 $v pass $pass"; timeout 100 $b/benchmark run --dtype bf16 --rows 1,16,20,64,256,384 --n 1024,4096,0 --json $R/bf16-$v-$pass.json 2>&1 | bench
done; done
echo "== k at N = 1024 over 4 blocks (the old mid rule)"; SAMPLER_STREAM_CHUNKS=4 timeout 60 $k/benchmark run --rows 40,48,64 --n 1024 2>&1 | bench; timeout 60 $k/benchmark run --rows 40,48,64 --n 1024 2>&1 | bench
echo "== head tile 1024 at N = 1024"; SAMPLER_HEAD_TILE=1024 timeout 60 $k/benchmark run --rows 1,16,64 --n 1024 2>&1 | bench
echo "== end $(date -u +%T)"
} > $R/c.log 2>&1
cd $R && tar cf - *.json *.log | xz -9 > all.txz && rm -f *.json
grep -E "==|rc |GOLDEN|ok\)|MISMATCH|FAIL" c.log | head -60 | cut -c1-200
