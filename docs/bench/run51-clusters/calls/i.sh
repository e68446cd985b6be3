#!/usr/bin/env bash
# Next call (PENDING "After the eighteenth session" item 3): PTX i = main + i.patch (the cluster classification walk
# votes once a quad below N = 1024, force top-k off's prefix path) against main's own PTX.
# Build here: git apply docs/bench/run51-clusters/i.patch; regenerate --ptx; xz -9 -c sampler-host/ptx/sampler_kernels.ptx
#   > .gpu/ptx-i.ptx.xz; git checkout sampler-host/ptx sampler-kernels; a fresh stripped stage as .gpu/round.txz.
# run(command="bash gpucall/i.sh", carry=[".gpu/round.txz", ".gpu/ptx-i.ptx.xz"])
set -u
R=$OUT; rm -rf .gpu/stage; mkdir -p $R .gpu/stage
xz -dc .gpu/round.txz | tar xf - -C .gpu/stage
b=.gpu/stage/bin; gd=.gpu/stage/golden
xz -dc .gpu/ptx-i.ptx.xz > /tmp/ptx-i.ptx
bench() { awk -F'|' 'NF>10{print $2,$3,$4,$8,$NF}' | grep -v "^ *R "; }
{
timeout 200 $b/gpu_suite synth 1:64 > /dev/null 2>&1 & SAMPLER_PTX_FILE=/tmp/ptx-i.ptx timeout 200 $b/gpu_suite synth 1:64 > /dev/null 2>&1; wait
echo "== i devices clusters"; SAMPLER_PTX_FILE=/tmp/ptx-i.ptx SAMPLER_GOLDEN_DIR=$gd timeout 200 $b/devices --test-threads 1 --nocapture cuda_counts::golden_and_adversarial_rows_through_clusters 2>&1 | grep -E "clusters on CUDA|test result"
for c in "" 6 16; do echo "== i golden cluster '$c'"; SAMPLER_PTX_FILE=/tmp/ptx-i.ptx SAMPLER_CLUSTER=$c timeout 100 $b/gpu_suite golden $gd 2>&1 | tail -2; done
echo "== i synth"; SAMPLER_PTX_FILE=/tmp/ptx-i.ptx timeout 100 $b/gpu_suite synth 1:0 4:0 8:0 16:0 1:1024 16:1024 2>&1 | tail -6
for pass in 1 2; do for v in main i; do
  echo "-- $v pass $pass"; env $([ $v = i ] && echo SAMPLER_PTX_FILE=/tmp/ptx-i.ptx) timeout 90 $b/benchmark run --rows 1,4,8,12,16 --n 1024,4096,0 --json $R/$v-$pass.json 2>&1 | bench
done; done
for v in main i; do echo "-- bf16 $v"; env $([ $v = i ] && echo SAMPLER_PTX_FILE=/tmp/ptx-i.ptx) timeout 60 $b/benchmark run --dtype bf16 --rows 1,16 --n 0 2>&1 | bench; done
} > $R/i.log 2>&1
cat $R/i.log | cut -c1-200
