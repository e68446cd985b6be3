#!/usr/bin/env bash
# Session 20 call X: why the warp scope is slower (call W): wn = w without bar.warp.sync in the one-warp
# stores / folds (timing only), wb = w's kernels with the block path forced (the DSL restructure alone),
# beside main and w; then Nsight Compute on process_draw_finish (main, w) at R = 1, N = 1024.
# run(command="bash gpucall/x.sh", carry=[".gpu/w.txz", ".gpu/px.txz"])
set -u
R=$OUT; mkdir -p $R
rm -rf .gpu/st-w .gpu/px; xz -dc .gpu/w.txz | tar xf - -C .gpu; xz -dc .gpu/px.txz | tar xf - -C .gpu
w=.gpu/st-w/bin; P=$PWD/.gpu
M=SAMPLER_PTX_FILE=$P/st-w/ptx-main.ptx; WN=SAMPLER_PTX_FILE=$P/px/wn.ptx; WB=SAMPLER_PTX_FILE=$P/px/wb.ptx
bench() { awk -F'|' 'NF>10{print $2,$3,$4,$8,$19,$NF}' | grep -v "^ *R "; }
ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== warm $(date -u +%T)"
for e in $M $WN $WB "X=1"; do env $e timeout 240 $w/gpu_suite synth 1:64 > /dev/null 2>&1 & done; wait
echo "== synth wn / wb $(date -u +%T)"; env $WN timeout 60 $w/gpu_suite synth 1:1024 16:1024 64:1024 64:4096 2>&1 | tail -4; env $WB timeout 60 $w/gpu_suite synth 1:1024 64:1024 2>&1 | tail -2
echo "== bench $(date -u +%T)"
for pass in 1 2; do for v in main w wn wb; do e="X=1"; [ $v = main ] && e=$M; [ $v = wn ] && e=$WN; [ $v = wb ] && e=$WB
  echo "-- $v pass $pass"; env $e timeout 60 $w/benchmark run --rows 1,16,64 --n 1024 --json $R/$v-$pass.json 2>&1 | bench
done; done
echo "== ncu $(date -u +%T) ($ncu)"
for v in main w; do e="X=1"; [ $v = main ] && e=$M
  env $e timeout 100 "$ncu" --clock-control none -k "regex:process_draw_finish" -c 1 --section SpeedOfLight --section WarpStateStats --section SourceCounters --section InstructionStats -f -o $R/prof-$v $w/benchmark run --rows 1 --n 1024 --reps 1 --check-rows 0 > $R/prof-$v.run.txt 2>&1; echo "ncu $v rc $?"
  "$ncu" -i $R/prof-$v.ncu-rep --page details > $R/prof-$v.details.txt 2>&1
  grep -E "Duration|Warp Cycles Per Issued|Executed Instructions  |Stall|Issued Warp|No Eligible" $R/prof-$v.details.txt | head -12 | cut -c1-150
  "$ncu" -i $R/prof-$v.ncu-rep -c 1 --page source --csv --print-source sass > $R/prof-$v.sass.csv 2>&1
done
echo "== end $(date -u +%T)"
} > $R/x.log 2>&1
cd $R && tar cf - *.json *.log *.txt *.csv 2>/dev/null | xz -9 > all.txz && rm -f *.json *.csv
cat x.log | cut -c1-170
