#!/usr/bin/env bash
# Run 58 call T: topn_cluster's phases by in-kernel %clock stamps (sptime / sctime: sp / sc with thread 0 of each
# CTA stamping 25 points into shared memory and printing them by vprintf at the end; timing only), spv (sp with
# the classification walk's vote at every N) for correctness and speed, beside r / sp / sc.
set -u
R=$OUT; mkdir -p $R
export CUDA_CACHE_MAXSIZE=4294967296
rm -rf .gpu/st-p .gpu/w2; for f in p w2; do xz -dc .gpu/$f.txz | tar xf - -C .gpu; done
w=.gpu/st-p/bin; gd=.gpu/st-p/golden
V() { echo SAMPLER_PTX_FILE=$PWD/.gpu/w2/ptx-$1.ptx; }
bench() { awk -F'|' 'NF>10{print $2,$3,$4,$8,$19,$NF}' | grep -v "^ *R "; }
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for v in r sp sc spv sptime sctime; do env $(V $v) timeout 200 $w/gpu_suite synth 1:64 > /dev/null 2>&1 & done; wait
echo "== warm ($SECONDS s)"
for v in sptime sctime; do for sh in 1:1024 1:4096 16:1024 1:0 4:1024; do
  env $(V $v) SAMPLER_CLUSTER_TAIL=0 timeout 60 $w/gpu_suite synth $sh > $R/ts-$v-$sh.log 2>&1
  echo "-- $v $sh: $(grep -c '^TS' $R/ts-$v-$sh.log) stamps lines; $(grep -v '^TS' $R/ts-$v-$sh.log | tail -1)"; done; done
echo "== spv ($SECONDS s)"; e=$(V spv)
for s in "" SAMPLER_CLUSTER=6 SAMPLER_CLUSTER_TAIL=1; do echo "-- golden '$s': $(env $e $s timeout 60 $w/gpu_suite golden $gd 2>&1 | tail -1)"; done
echo "-- adversarial: $(env $e timeout 60 $w/gpu_suite adversarial 2>&1 | grep -c 'bitwise ok') ok"
echo "-- synth: $(env $e timeout 60 $w/gpu_suite synth 1:1024 1:4096 1:0 8:1024 16:1024 16:512 2>&1 | grep -c 'bitwise ok') of 6 bitwise ok"
echo "-- synth tail: $(env $e SAMPLER_CLUSTER_TAIL=1 timeout 60 $w/gpu_suite synth 1:1024 4:1024 16:1024 2>&1 | grep -c 'bitwise ok') of 3"
echo "== bench ($SECONDS s)"
for pass in 1 2; do for v in r sp spv sc; do echo "-- $v pass $pass"
  env $(V $v) SAMPLER_CLUSTER_TAIL=1 timeout 60 $w/benchmark run --rows 1,4,8,16 --n 1024,4096,0 --json $R/$v-$pass.json 2>&1 | bench; done; done
echo "== end ($SECONDS s)"
} > $R/t.log 2>&1
cd $R && tar cf - *.json *.log 2>/dev/null | xz -9 > all.txz && rm -f *.json ts-*.log
cut -c1-200 t.log
