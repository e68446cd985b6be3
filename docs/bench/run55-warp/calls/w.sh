#!/usr/bin/env bash
# Session 20 call W: w = the warp scope (w1: its first form, the head's loads where the DSL ops had them) (the tail's kept head on warp 0 of process_draw_finish /
# topn_cluster_draw_finish) against main's PTX (SAMPLER_PTX_FILE) on the same binaries.
# run(command="bash gpucall/w.sh", carry=[".gpu/w.txz"])
set -u
R=$OUT; mkdir -p $R
rm -rf .gpu/st-w; xz -dc .gpu/w.txz | tar xf - -C .gpu
w=.gpu/st-w/bin; gd=.gpu/st-w/golden; M=SAMPLER_PTX_FILE=$PWD/.gpu/st-w/ptx-main.ptx; W1=SAMPLER_PTX_FILE=$PWD/.gpu/st-w/ptx-w1.ptx
bench() { awk -F'|' 'NF>10{print $2,$3,$4,$8,$19,$NF}' | grep -v "^ *R "; }
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; cat .gpu/st-w/commit
echo "== warm $(date -u +%T)"
timeout 240 $w/gpu_suite synth 1:64 > /dev/null 2>&1 & env $M timeout 240 $w/gpu_suite synth 1:64 > /dev/null 2>&1 & env $W1 timeout 240 $w/gpu_suite synth 1:64 > /dev/null 2>&1; wait
echo "== w synth first $(date -u +%T)"; timeout 100 $w/gpu_suite synth 1:1024 16:1024 64:4096 2>&1 | tail -3
echo "== w devices (all) $(date -u +%T)"
SAMPLER_GOLDEN_DIR=$gd timeout 240 $w/devices --test-threads 1 --nocapture > $R/devices-w.log 2>&1; echo "rc $?"; grep -E "test result|on CUDA:" $R/devices-w.log | cut -c1-220
for e in "" SAMPLER_CLUSTER=6 SAMPLER_CLUSTER=16 "SAMPLER_CLUSTER=0 SAMPLER_STREAM_SELECT=1" SAMPLER_CLUSTER_TAIL=1 SAMPLER_HEAD_TILE=64 SAMPLER_FOLD_TAIL=0 SAMPLER_FOLD_FINALIZE=0; do echo "== w golden '$e'"; env $e timeout 100 $w/gpu_suite golden $gd 2>&1 | tail -2; done
echo "== w adversarial"; timeout 100 $w/gpu_suite adversarial > $R/adv-w.log 2>&1; echo "rc $? $(grep -c 'bitwise ok' $R/adv-w.log) ok"; grep -v "bitwise ok" $R/adv-w.log | tail -3
echo "== w synth"; timeout 200 $w/gpu_suite synth 1:1024 1:4096 1:0 8:1024 16:1024 16:4096 20:0 64:1024 64:4096 64:0 256:4096 384:4096 384:1024 384:0 2>&1 | tail -14
echo "== w synth cluster tail"; SAMPLER_CLUSTER_TAIL=1 timeout 100 $w/gpu_suite synth 1:1024 4:1024 16:1024 2>&1 | tail -3
echo "== bench $(date -u +%T)"
for pass in 1 2; do for v in main w1 w; do e=""; [ $v = main ] && e=$M; [ $v = w1 ] && e=$W1
  echo "-- $v pass $pass"; env $e timeout 150 $w/benchmark run --rows 1,4,8,16,64,256,384 --n 1024,4096,0 --json $R/$v-$pass.json 2>&1 | bench
done; done
echo "== bf16 $(date -u +%T)"
for v in main w; do e=""; [ $v = main ] && e=$M
  echo "-- bf16 $v"; env $e timeout 100 $w/benchmark run --dtype bf16 --rows 1,16,64,384 --n 1024,4096,0 --json $R/bf16-$v.json 2>&1 | bench
done
echo "== cluster tail $(date -u +%T)"
for pass in 1 2; do for v in main w; do e=""; [ $v = main ] && e=$M
  echo "-- tail $v pass $pass"; env $e SAMPLER_CLUSTER_TAIL=1 timeout 60 $w/benchmark run --rows 1,4,8,16 --n 1024 --json $R/tail-$v-$pass.json 2>&1 | bench
done; done
echo "== head tile 1024 (the rest in one pass at N = 4096) $(date -u +%T)"
for pass in 1 2; do for v in main w; do e=""; [ $v = main ] && e=$M
  echo "-- ht1024 $v pass $pass"; env $e SAMPLER_HEAD_TILE=1024 timeout 60 $w/benchmark run --rows 1,16,64,256 --n 1024,4096 --json $R/ht-$v-$pass.json 2>&1 | bench
done; done
echo "== end $(date -u +%T)"
} > $R/w.log 2>&1
cd $R && tar cf - *.json *.log | xz -9 > all.txz && rm -f *.json
grep -E "==|rc |GOLDEN|ok\)|MISMATCH|FAIL" w.log | head -60 | cut -c1-200
