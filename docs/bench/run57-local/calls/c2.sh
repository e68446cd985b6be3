#!/usr/bin/env bash
# Run 57 call C2: the short form of c.sh (~300 s) for little device time: p and r correctness, main / p / r / r2
# speed, racecheck of r, topn_cluster by phase at R = 1.
# run(command="bash gpucall/c2.sh", carry=[".gpu/p.txz", ".gpu/v.txz"])
set -u
R=$OUT; mkdir -p $R
rm -rf .gpu/st-p .gpu/pq .gpu/pt .gpu/pr; for f in p v; do xz -dc .gpu/$f.txz | tar xf - -C .gpu; done
w=.gpu/st-p/bin; gd=.gpu/st-p/golden
V() { case $1 in main) echo SAMPLER_PTX_FILE=$PWD/.gpu/st-p/ptx-main.ptx;; p|q) echo SAMPLER_PTX_FILE=$PWD/.gpu/pq/ptx-$1.ptx;;
  r|r2|rm|rt*) echo SAMPLER_PTX_FILE=$PWD/.gpu/pr/ptx-$1.ptx;; t*) echo SAMPLER_PTX_FILE=$PWD/.gpu/pt/ptx-$1.ptx;; esac; }
bench() { awk -F'|' 'NF>10{print $2,$3,$4,$8,$19,$NF}' | grep -v "^ *R "; }
ok() { [ $SECONDS -lt $1 ]; }
cs=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for v in main p r r2 t1 t2 rt3 rt4 rt5; do env $(V $v) timeout 150 $w/gpu_suite synth 1:64 > /dev/null 2>&1 & done; wait
echo "== warm ($SECONDS s)"
for v in p r r2; do e=$(V $v)
  for s in "" SAMPLER_CLUSTER_TAIL=1; do echo "== $v golden '$s': $(env $e $s timeout 40 $w/gpu_suite golden $gd 2>&1 | tail -1)"; done
  echo "== $v adversarial ok: $(env $e timeout 40 $w/gpu_suite adversarial 2>&1 | grep -c 'bitwise ok')"
  echo "== $v synth: $(env $e timeout 40 $w/gpu_suite synth 1:1024 1:4096 16:1024 64:1024 384:4096 2>&1 | tail -5 | tr '\n' ' ')"
done
echo "== bench ($SECONDS s)"
for v in main p r r2; do echo "-- $v"; env $(V $v) timeout 40 $w/benchmark run --rows 1,16,64,384 --n 1024,4096 --json $R/$v.json 2>&1 | bench; done
if ok 230; then echo "-- racecheck r 1:1024: $(env $(V r) timeout 40 $cs --tool racecheck $w/gpu_suite synth 1:1024 2>&1 | grep -E 'bitwise|SUMMARY' | tr '\n' ' ')"; fi
if ok 260; then echo "== phases ($SECONDS s)"; for t in t1 t2 rt3 rt4 rt5 r; do
  echo "-- $t"; env $(V $t) timeout 15 $w/benchmark run --rows 1 --n 1024 --check-rows 0 --json $R/ph-$t.json 2>&1 | bench; done; fi
echo "== end ($SECONDS s)"
} > $R/c2.log 2>&1
cd $R && tar cf - *.json *.log 2>/dev/null | xz -9 > all.txz && rm -f *.json
cut -c1-180 c2.log
