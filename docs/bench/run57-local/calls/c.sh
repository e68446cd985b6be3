#!/usr/bin/env bash
# Run 57 call C (prepared in session 22): run 56's P (p, q, t1..t5; docs/bench/run56-bars/NOTES.md) with the
# scatter fix (bars 6ea972a), r = q + every CTA finding the pass boundaries itself from the leader's chunk totals
# (one cluster barrier a pass, not two; r-local), r2 = r + the later passes' histograms zeroed while the load is
# in flight (r2), rm = main + r (r-main), rt3..rt5 = r stopped after pass 0 / every pass / the sends. Every
# variant by SAMPLER_PTX_FILE on st-p's binaries (SMEM base 2560).
# run(command="bash gpucall/c.sh", carry=[".gpu/p.txz", ".gpu/v.txz"])
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
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; cat .gpu/st-p/commit
for v in main p q r r2 rm t1 t2 t3 t4 t5 rt3 rt4 rt5; do env $(V $v) timeout 200 $w/gpu_suite synth 1:64 > /dev/null 2>&1 & done; wait
echo "== warm ($SECONDS s)"
for v in p r; do e=$(V $v)
  for s in "" SAMPLER_CLUSTER=6 "SAMPLER_CLUSTER=0 SAMPLER_STREAM_SELECT=1" SAMPLER_CLUSTER_TAIL=1 SAMPLER_FOLD_TAIL=0; do
    echo "== $v golden '$s': $(env $e $s timeout 60 $w/gpu_suite golden $gd 2>&1 | tail -1)"; done
  echo "== $v adversarial: $(env $e timeout 60 $w/gpu_suite adversarial 2>&1 | tee $R/adv-$v.log | grep -c 'bitwise ok') ok; $(grep -v 'bitwise ok' $R/adv-$v.log | tail -2)"
  echo "== $v synth"; env $e timeout 100 $w/gpu_suite synth 1:1024 1:4096 1:0 8:1024 16:1024 16:4096 20:0 64:1024 64:4096 64:0 256:4096 384:4096 384:0 2>&1 | tail -13
  echo "== $v synth tail: $(env $e SAMPLER_CLUSTER_TAIL=1 timeout 60 $w/gpu_suite synth 1:1024 4:1024 16:1024 1:4096 2>&1 | tail -4 | tr '\n' ' ')"
done
for v in q rm r2; do echo "== $v adversarial ok: $(env $(V $v) timeout 60 $w/gpu_suite adversarial 2>&1 | grep -c 'bitwise ok')"; done
for v in rm r2; do echo "== $v golden: $(env $(V $v) timeout 60 $w/gpu_suite golden $gd 2>&1 | tail -1)"
  echo "== $v synth: $(env $(V $v) timeout 60 $w/gpu_suite synth 1:1024 1:4096 16:1024 16:4096 2>&1 | tail -4 | tr '\n' ' ')"; done
if ok 150; then echo "== p devices ($SECONDS s)"; SAMPLER_GOLDEN_DIR=$gd timeout 100 $w/devices --test-threads 1 > $R/devices-p.log 2>&1; echo "rc $?"; grep -E "test result" $R/devices-p.log; fi
echo "== bench ($SECONDS s)"
for v in main p q r r2 rm; do echo "-- $v pass 1"; env $(V $v) timeout 60 $w/benchmark run --rows 1,4,8,16,64,256,384 --n 1024,4096,0 --json $R/$v-1.json 2>&1 | bench; done
if ok 300; then echo "== racecheck ($SECONDS s)"
  for t in "p 1:1024" "r 1:1024" "r 64:4096"; do set -- $t
    echo "-- $1 $2: $(env $(V $1) timeout 40 $cs --tool racecheck $w/gpu_suite synth $2 2>&1 | grep -E 'bitwise|SUMMARY' | tr '\n' ' ')"; done
  echo "-- r tail 1:1024: $(env $(V r) SAMPLER_CLUSTER_TAIL=1 timeout 40 $cs --tool racecheck $w/gpu_suite synth 1:1024 2>&1 | grep -E 'bitwise|SUMMARY' | tr '\n' ' ')"; fi
if ok 360; then echo "== phases ($SECONDS s)"; for t in t1 t2 t3 t4 t5 q rt3 rt4 rt5 r; do
  echo "-- $t"; env $(V $t) timeout 30 $w/benchmark run --rows 1 --n 1024,4096 --check-rows 0 --json $R/ph-$t.json 2>&1 | bench; done; fi
if ok 420; then echo "== tail ($SECONDS s)"; for v in main p r; do
  echo "-- tail $v"; env $(V $v) SAMPLER_CLUSTER_TAIL=1 timeout 40 $w/benchmark run --rows 1,4,8,16 --n 1024,4096 --json $R/tail-$v.json 2>&1 | bench; done; fi
if ok 460; then echo "== bench pass 2 ($SECONDS s)"; for v in main p r; do echo "-- $v pass 2"; env $(V $v) timeout 40 $w/benchmark run --rows 1,4,8,16,64,256,384 --n 1024,4096,0 --json $R/$v-2.json 2>&1 | bench; done; fi
echo "== end ($SECONDS s)"
} > $R/c.log 2>&1
cd $R && tar cf - *.json *.log 2>/dev/null | xz -9 > all.txz && rm -f *.json
cut -c1-180 c.log
