#!/usr/bin/env bash
# Session 21 call P2 (the device budget's last ~300 s): p and q (see p.sh) correctness and one speed pass beside main.
# run(command="bash gpucall/p2.sh", carry=[".gpu/p.txz", ".gpu/q.txz"])
set -u
R=$OUT; mkdir -p $R
rm -rf .gpu/st-p .gpu/pq; for f in p q; do xz -dc .gpu/$f.txz | tar xf - -C .gpu; done
w=.gpu/st-p/bin; gd=.gpu/st-p/golden; M=SAMPLER_PTX_FILE=$PWD/.gpu/st-p/ptx-main.ptx; Q=SAMPLER_PTX_FILE=$PWD/.gpu/pq/ptx-q.ptx
bench() { awk -F'|' 'NF>10{print $2,$3,$4,$8,$19,$NF}' | grep -v "^ *R "; }
ok() { [ $SECONDS -lt $1 ]; }
cs=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; cat .gpu/st-p/commit
for e in X=1 $M $Q; do env $e timeout 150 $w/gpu_suite synth 1:64 > /dev/null 2>&1 & done; wait
echo "== p synth ($SECONDS s)"; timeout 60 $w/gpu_suite synth 1:1024 1:4096 1:0 16:1024 64:1024 64:4096 384:4096 2>&1 | tail -7
for e in "" SAMPLER_CLUSTER_TAIL=1; do echo "== p golden '$e'"; env $e timeout 60 $w/gpu_suite golden $gd 2>&1 | tail -2; done
echo "== p adversarial ok: $(timeout 60 $w/gpu_suite adversarial 2>&1 | grep -c 'bitwise ok')"
echo "== q synth"; env $Q timeout 60 $w/gpu_suite synth 1:1024 1:4096 1:0 8:1024 2>&1 | tail -4
echo "== bench ($SECONDS s)"
for v in main p q; do e="X=1"; [ $v = main ] && e=$M; [ $v = q ] && e=$Q
  echo "-- $v"; env $e timeout 60 $w/benchmark run --rows 1,16,64,384 --n 1024,4096,0 --json $R/$v.json 2>&1 | bench; done
if ok 200; then echo "== tail ($SECONDS s)"; for v in main q; do e=$M; [ $v = q ] && e=$Q
  echo "-- tail $v"; env $e SAMPLER_CLUSTER_TAIL=1 timeout 30 $w/benchmark run --rows 1,16 --n 1024 --json $R/tail-$v.json 2>&1 | bench; done; fi
if ok 215; then echo "-- racecheck 1:1024: $(timeout 30 $cs --tool racecheck $w/gpu_suite synth 1:1024 2>&1 | grep -E 'bitwise|SUMMARY' | tr '\n' ' ')"; fi
echo "== end ($SECONDS s)"
} > $R/p2.log 2>&1
cat $R/p2.log | cut -c1-200
