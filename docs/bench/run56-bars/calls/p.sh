#!/usr/bin/env bash
# Session 21 call P: p = the block collectives with one bar.sync each (two slot areas used in turn) and the
# store barriers owed until the next global read (process_draw_finish_t256: 41 -> 17 BAR.SYNC), against main's
# PTX (SAMPLER_PTX_FILE) on the same binaries; q = p + the cluster leader's bin reads without bank conflicts;
# t1..t5 = q's topn_cluster stopped after each phase (timing only); then sanitizers and Nsight Compute at R = 1.
# run(command="bash gpucall/p.sh", carry=[".gpu/p.txz", ".gpu/q.txz", ".gpu/pt.txz"])
set -u
R=$OUT; mkdir -p $R
rm -rf .gpu/st-p .gpu/pq .gpu/pt; for f in p q pt; do xz -dc .gpu/$f.txz | tar xf - -C .gpu; done
w=.gpu/st-p/bin; gd=.gpu/st-p/golden; M=SAMPLER_PTX_FILE=$PWD/.gpu/st-p/ptx-main.ptx; Q=SAMPLER_PTX_FILE=$PWD/.gpu/pq/ptx-q.ptx
T() { echo SAMPLER_PTX_FILE=$PWD/.gpu/pt/ptx-t$1.ptx; }
bench() { awk -F'|' 'NF>10{print $2,$3,$4,$8,$19,$NF}' | grep -v "^ *R "; }
ok() { [ $SECONDS -lt $1 ]; }   # start a section only before this many seconds
ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
cs=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; cat .gpu/st-p/commit
echo "== warm $(date -u +%T)"
for e in X=1 $M $Q $(T 1) $(T 2) $(T 3) $(T 4) $(T 5); do env $e timeout 200 $w/gpu_suite synth 1:64 > /dev/null 2>&1 & done; wait
echo "== p synth first $(date -u +%T) ($SECONDS s)"; timeout 100 $w/gpu_suite synth 1:1024 16:1024 64:4096 2>&1 | tail -3
echo "== p devices (all) $(date -u +%T)"
SAMPLER_GOLDEN_DIR=$gd timeout 200 $w/devices --test-threads 1 --nocapture > $R/devices-p.log 2>&1; echo "rc $?"; grep -E "test result|on CUDA:" $R/devices-p.log | cut -c1-220
for e in "" SAMPLER_CLUSTER=6 "SAMPLER_CLUSTER=0 SAMPLER_STREAM_SELECT=1" SAMPLER_CLUSTER_TAIL=1 SAMPLER_FOLD_TAIL=0; do echo "== p golden '$e'"; env $e timeout 100 $w/gpu_suite golden $gd 2>&1 | tail -2; done
echo "== p adversarial"; timeout 100 $w/gpu_suite adversarial > $R/adv-p.log 2>&1; echo "rc $? $(grep -c 'bitwise ok' $R/adv-p.log) ok"; grep -v "bitwise ok" $R/adv-p.log | tail -3
echo "== p synth"; timeout 200 $w/gpu_suite synth 1:1024 1:4096 1:0 8:1024 16:1024 16:4096 20:0 64:1024 64:4096 64:0 256:4096 384:4096 384:1024 384:0 2>&1 | tail -14
echo "== p synth cluster tail"; SAMPLER_CLUSTER_TAIL=1 timeout 100 $w/gpu_suite synth 1:1024 4:1024 16:1024 1:4096 2>&1 | tail -4
echo "== q golden / adversarial / synth ($SECONDS s)"
echo "-- q adversarial ok: $(env $Q timeout 100 $w/gpu_suite adversarial 2>&1 | grep -c 'bitwise ok')"; env $Q timeout 100 $w/gpu_suite synth 1:1024 1:4096 1:0 8:1024 16:1024 16:0 2>&1 | tail -6
echo "== bench $(date -u +%T) ($SECONDS s)"
for pass in 1 2; do for v in main p q; do e="X=1"; [ $v = main ] && e=$M; [ $v = q ] && e=$Q
  echo "-- $v pass $pass"; env $e timeout 150 $w/benchmark run --rows 1,4,8,16,64,256,384 --n 1024,4096,0 --json $R/$v-$pass.json 2>&1 | bench
done; done
if ok 180; then echo "== sanitizers $(date -u +%T) ($cs) ($SECONDS s)"
for t in "racecheck 1:1024" "racecheck 64:4096"; do set -- $t
  echo "-- $1 synth $2: $(timeout 40 $cs --tool $1 $w/gpu_suite synth $2 2>&1 | grep -E 'bitwise|SUMMARY' | tr '\n' ' ')"
done
echo "-- racecheck tail 1:1024: $(SAMPLER_CLUSTER_TAIL=1 timeout 40 $cs --tool racecheck $w/gpu_suite synth 1:1024 2>&1 | grep -E 'bitwise|SUMMARY' | tr '\n' ' ')"; fi
if ok 200; then echo "== topn_cluster stopped after phase t (timing only) $(date -u +%T) ($SECONDS s)"
for pass in 1; do for t in 1 2 3 4 5 q; do e=$(T $t); [ $t = q ] && e=$Q
  echo "-- t$t pass $pass"; env $e timeout 40 $w/benchmark run --rows 1 --n 1024,4096 --check-rows 0 --json $R/t$t-$pass.json 2>&1 | bench
done; done; fi
if ok 230; then echo "== cluster tail $(date -u +%T) ($SECONDS s)"
for pass in 1; do for v in main p q; do e="X=1"; [ $v = main ] && e=$M; [ $v = q ] && e=$Q
  echo "-- tail $v pass $pass"; env $e SAMPLER_CLUSTER_TAIL=1 timeout 60 $w/benchmark run --rows 1,4,8,16 --n 1024,4096 --json $R/tail-$v-$pass.json 2>&1 | bench
done; done
fi
if ok 0; then echo "== cluster size at R = 1 (q) $(date -u +%T) ($SECONDS s)"
for cl in 4 8 16; do echo "-- C=$cl"; env $Q SAMPLER_CLUSTER=$cl timeout 40 $w/benchmark run --rows 1 --n 1024,4096 --json $R/cl$cl.json 2>&1 | bench; done; fi
if ok 0; then echo "== ncu $(date -u +%T) ($ncu) ($SECONDS s)"
env $Q timeout 50 "$ncu" --clock-control none -k "regex:topn_cluster|process_draw_finish" -c 2 --section SpeedOfLight --section WarpStateStats --section SourceCounters --section InstructionStats --warp-sampling-interval 0 -f -o $R/prof-q $w/benchmark run --rows 1 --n 1024 --reps 1 --check-rows 0 > $R/prof-q.run.txt 2>&1; echo "ncu rc $?"
"$ncu" -i $R/prof-q.ncu-rep --page details > $R/prof-q.details.txt 2>&1
grep -E "^  [a-z_]+_t[0-9]+|Duration|Warp Cycles Per Issued|Executed Instructions  " $R/prof-q.details.txt | head -12 | cut -c1-150
for k in topn_cluster_t1024 process_draw_finish_t256; do "$ncu" -i $R/prof-q.ncu-rep -k $k -c 1 --page source --csv --print-source sass > $R/prof-q.sass-$k.csv 2>&1; done; fi
echo "== end $(date -u +%T) ($SECONDS s)"
} > $R/p.log 2>&1
cd $R && tar cf - *.json *.log *.txt *.csv 2>/dev/null | xz -9 > all.txz && rm -f *.json *.csv *.ncu-rep
grep -E "==|rc |GOLDEN|ok\)|MISMATCH|FAIL|-- r|-- q|ncu rc|Duration|Issued" p.log | head -60 | cut -c1-200
