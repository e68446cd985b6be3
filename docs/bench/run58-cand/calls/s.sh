#!/usr/bin/env bash
# Run 58 call S: devices with the fused tail on (r = main's PTX; run 57's e.sh); sp (merged histograms and chunk
# totals spread over the CTAs) and sc (sp + a selection ending after the second digit as <= 128 candidates the
# leader ranks) for correctness and speed beside r; topn_cluster by phase on sp (spt10 = return at entry,
# spt1 = zeroing + first barrier, spt3/4/6/7/5 = after pass 0 / every pass / the staging walk / the base atomics /
# the sends). Every variant by SAMPLER_PTX_FILE on st-p's binaries (SMEM base 2560; their host default has the
# tail off: SAMPLER_CLUSTER_TAIL=1 where main's default has it on, R <= 16).
set -u
R=$OUT; mkdir -p $R
export CUDA_CACHE_MAXSIZE=4294967296
rm -rf .gpu/st-p .gpu/w; for f in p w; do xz -dc .gpu/$f.txz | tar xf - -C .gpu; done
w=.gpu/st-p/bin; gd=.gpu/st-p/golden
V() { echo SAMPLER_PTX_FILE=$PWD/.gpu/w/ptx-$1.ptx; }
bench() { awk -F'|' 'NF>10{print $2,$3,$4,$8,$19,$NF}' | grep -v "^ *R "; }
ok() { [ $SECONDS -lt $1 ]; }
cs=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; cat .gpu/st-p/commit
for v in r sp sc spt10 spt1 spt3 spt4 spt6 spt7 spt5; do env $(V $v) timeout 200 $w/gpu_suite synth 1:64 > /dev/null 2>&1 & done; wait
echo "== warm ($SECONDS s)"
for v in sc sp; do e=$(V $v)
  for s in "" SAMPLER_CLUSTER=6 SAMPLER_CLUSTER=3 SAMPLER_CLUSTER_TAIL=1 "SAMPLER_CLUSTER_TAIL=1 SAMPLER_CLUSTER=5"; do
    echo "== $v golden '$s': $(env $e $s timeout 60 $w/gpu_suite golden $gd 2>&1 | tail -1)"; done
  echo "== $v adversarial: $(env $e timeout 60 $w/gpu_suite adversarial 2>&1 | tee $R/adv-$v.log | grep -c 'bitwise ok') ok; $(grep -v 'bitwise ok' $R/adv-$v.log | tail -2)"
  echo "== $v synth"; env $e timeout 100 $w/gpu_suite synth 1:1024 1:4096 1:0 2:1024 3:1024 5:1024 8:1024 12:1024 16:1024 16:512 16:4096 20:0 64:1024 256:4096 384:0 2>&1 | tail -15
  echo "== $v synth tail: $(env $e SAMPLER_CLUSTER_TAIL=1 timeout 60 $w/gpu_suite synth 1:1024 4:1024 16:1024 1:4096 2>&1 | tail -4 | tr '\n' ' ')"
  echo "== $v synth 3 CTAs: $(env $e SAMPLER_CLUSTER=3 timeout 60 $w/gpu_suite synth 1:1024 1:4096 7:1024 2>&1 | tail -3 | tr '\n' ' ')"
done
for v in r sc; do echo "== $v devices, tail on ($SECONDS s)"; env $(V $v) SAMPLER_CLUSTER_TAIL=1 SAMPLER_GOLDEN_DIR=$gd timeout 120 $w/devices --test-threads 1 > $R/devices-$v-tail.log 2>&1; echo "rc $?"
  grep -E "test result|FAILED|panicked" $R/devices-$v-tail.log | head -6; done
echo "== bench ($SECONDS s)"
for v in r sp sc; do echo "-- $v"
  env $(V $v) SAMPLER_CLUSTER_TAIL=1 timeout 60 $w/benchmark run --rows 1,4,8,16 --n 1024,4096,0 --json $R/$v-t1.json 2>&1 | bench
  env $(V $v) timeout 60 $w/benchmark run --rows 64,256,384 --n 1024,4096,0 --json $R/$v-1.json 2>&1 | bench; done
if ok 420; then echo "== phases ($SECONDS s)"; for t in spt10 spt1 spt3 spt4 spt6 spt7 spt5 sp sc r; do
  echo "-- $t"; env $(V $t) timeout 30 $w/benchmark run --rows 1,16 --n 1024,4096 --check-rows 0 --json $R/ph-$t.json 2>&1 | bench; done; fi
if ok 470; then echo "== bench pass 2 ($SECONDS s)"; for v in r sp sc; do echo "-- $v"
  env $(V $v) SAMPLER_CLUSTER_TAIL=1 timeout 60 $w/benchmark run --rows 1,4,8,16 --n 1024,4096,0 --json $R/$v-t2.json 2>&1 | bench; done; fi
if ok 520; then echo "== racecheck ($SECONDS s)"
  echo "-- sc tail 1:1024: $(env $(V sc) SAMPLER_CLUSTER_TAIL=1 timeout 40 $cs --tool racecheck $w/gpu_suite synth 1:1024 2>&1 | grep -E 'bitwise|SUMMARY' | tr '\n' ' ')"; fi
echo "== end ($SECONDS s)"
} > $R/s.log 2>&1
cd $R && tar cf - *.json *.log 2>/dev/null | xz -9 > all.txz && rm -f *.json
cut -c1-200 s.log
