#!/usr/bin/env bash
# Run 58 call U (staged for the next session): rf (main + the staging walk without a split value by a counting
# walk, one block scan and a storing walk at every N; branch sf), scb (sc with candidates only when they end the
# passes for both selections, at most 64 a selection), rsw (main + the staging walk at N >= 1024 by count walk, block scan, store walk; branch sw) and rsa
# (rsw at every N) for correctness and speed beside r and sc; spt4r = spt4 + one more cluster barrier round with a
# release arrive (what a release barrier costs at that point).
set -u
R=$OUT; mkdir -p $R
export CUDA_CACHE_MAXSIZE=4294967296
rm -rf .gpu/st-p .gpu/w3; for f in p w3; do xz -dc .gpu/$f.txz | tar xf - -C .gpu; done
w=.gpu/st-p/bin; gd=.gpu/st-p/golden
V() { echo SAMPLER_PTX_FILE=$PWD/.gpu/w3/ptx-$1.ptx; }
bench() { awk -F'|' 'NF>10{print $2,$3,$4,$8,$19,$NF}' | grep -v "^ *R "; }
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for v in r rf scb rsw rsa spt4 spt4r; do env $(V $v) timeout 100 $w/gpu_suite synth 1:64 > /dev/null 2>&1 & done; wait
echo "== warm ($SECONDS s)"
for v in rf rsw scb rsa; do e=$(V $v)
  for s in "" SAMPLER_CLUSTER=3 SAMPLER_CLUSTER_TAIL=1; do echo "-- $v golden '$s': $(env $e $s timeout 60 $w/gpu_suite golden $gd 2>&1 | tail -1)"; done
  echo "-- $v adversarial: $(env $e timeout 60 $w/gpu_suite adversarial 2>&1 | grep -c 'bitwise ok') ok"
  echo "-- $v synth: $(env $e timeout 60 $w/gpu_suite synth 1:1024 1:4096 1:0 4:4096 8:1024 8:4096 16:1024 16:512 2>&1 | grep -c 'bitwise ok') of 8 bitwise ok"
  echo "-- $v synth tail: $(env $e SAMPLER_CLUSTER_TAIL=1 timeout 60 $w/gpu_suite synth 1:1024 4:1024 16:1024 2>&1 | grep -c 'bitwise ok') of 3"; done
cs=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
echo "-- rf devices, tail on: $(env $(V rf) SAMPLER_CLUSTER_TAIL=1 SAMPLER_GOLDEN_DIR=$gd timeout 120 $w/devices --test-threads 1 2>&1 | grep -E 'test result' | tail -1)"
echo "-- rf racecheck tail 1:1024: $(env $(V rf) SAMPLER_CLUSTER_TAIL=1 timeout 40 $cs --tool racecheck $w/gpu_suite synth 1:1024 2>&1 | grep -E 'bitwise|SUMMARY' | tr '\n' ' ')"
echo "== bench ($SECONDS s)"
b() { for v in "$@"; do echo "-- $v pass $pass"
  env $(V $v) SAMPLER_CLUSTER_TAIL=1 timeout 60 $w/benchmark run --rows 1,4,8,16 --n 1024,4096,0 --json $R/$v-$pass.json 2>&1 | bench; done; }
pass=1; b r rf rsw rsa scb
echo "== release barrier round ($SECONDS s)"; for t in spt4 spt4r; do
  echo "-- $t"; env $(V $t) timeout 30 $w/benchmark run --rows 1,16 --n 1024,4096 --check-rows 0 2>&1 | bench; done
echo "== bench pass 2 ($SECONDS s)"; pass=2; b r rf rsw scb
echo "== end ($SECONDS s)"
} > $R/u.log 2>&1
cd $R && tar cf - *.json *.log 2>/dev/null | xz -9 > all.txz && rm -f *.json
cut -c1-200 u.log
