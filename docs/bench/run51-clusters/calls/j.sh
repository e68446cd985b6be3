#!/usr/bin/env bash
# Next call (PENDING "After the eighteenth session" item 4): PTX j = main + j.patch (the last digit's four
# histograms at 1024 bins: 16 KB less shared memory a CTA, so 6 CTAs hold a row at the 4096 tile and R = 16
# N = 4096 takes the cluster path) against main. j.patch changes the host too (GPU_CLUSTER_HIST_BYTES sizes the
# launch), so j runs on its own stage: build here
#   git apply docs/bench/run51-clusters/j.patch; regenerate (both); PY=0 ANCHORS=0 scripts/gpu/round.sh build;
#   strip to benchmark / gpu_suite / devices + golden -> .gpu/round-j.txz; git checkout .; main's stage -> .gpu/round.txz
# run(command="bash gpucall/j.sh", carry=[".gpu/round.txz", ".gpu/round-j.txz"])   (two stages: ~16 MB)
set -u
R=$OUT; mkdir -p $R
for v in main j; do
  f=.gpu/round.txz; [ $v = j ] && f=.gpu/round-j.txz
  rm -rf .gpu/st-$v; mkdir -p .gpu/st-$v; xz -dc $f | tar xf - -C .gpu/st-$v
done
bench() { awk -F'|' 'NF>10{print $2,$3,$4,$8,$NF}' | grep -v "^ *R "; }
{
for v in main j; do timeout 200 .gpu/st-$v/bin/gpu_suite synth 1:64 > /dev/null 2>&1 & done; wait
b=.gpu/st-j/bin; gd=.gpu/st-j/golden
echo "== j devices (all)"; SAMPLER_GOLDEN_DIR=$gd timeout 240 $b/devices --test-threads 1 --nocapture 2>&1 | grep -E "clusters on CUDA|test result"
for c in "" 6 16; do echo "== j golden cluster '$c'"; SAMPLER_CLUSTER=$c timeout 100 $b/gpu_suite golden $gd 2>&1 | tail -2; done
echo "== j adversarial cluster 6"; SAMPLER_CLUSTER=6 timeout 100 $b/gpu_suite adversarial 2>&1 | grep -c "bitwise ok"
echo "== j synth"; timeout 100 $b/gpu_suite synth 1:1024 1:4096 8:4096 16:4096 16:1024 16:0 2>&1 | tail -6
for pass in 1 2; do for v in main j; do
  echo "-- $v pass $pass"; timeout 90 .gpu/st-$v/bin/benchmark run --rows 1,4,8,16 --n 1024,4096,0 --json $R/$v-$pass.json 2>&1 | bench
done; done
} > $R/j.log 2>&1
cat $R/j.log | cut -c1-200
