#!/usr/bin/env bash
# Session 17 call D (warm, stage of call C): e's PTX: a profile of topn_cluster / process_draw_finish at R=1 N=1024,
# then compute-sanitizer on benchmark-shaped steps.
set -u
O=$OUT; R=/tmp/xd; rm -rf $R; mkdir -p $R $O
export SAMPLER_PTX_FILE=/tmp/ptx-e.ptx
b=.gpu/stage/bin
{
echo "== profile $(date -u +%T)"
OUT=$R PROF_SHAPES='1:1024' PROF_KERNELS='topn_cluster|process_draw_finish' PROF_COUNT=2 PROF_T=100 PROF_EXTRA='--warp-sampling-interval 0' timeout 120 bash scripts/gpu/round.sh profile 2>&1 | tail -12
for f in $R/prof/*.csv; do python3 scripts/gpu/sass_regions.py $f 30 > $f.regions.txt 2>&1; done
rm -f $R/prof/*.ncu-rep
cs=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
for t in "memcheck 1:1024" "memcheck 16:1024" "memcheck 64:4096" "memcheck 1:0" "racecheck 1:1024" "racecheck 64:4096"; do
  set -- $t
  timeout 45 "$cs" --tool $1 --error-exitcode 9 $b/gpu_suite synth $2 > $R/san-$1-${2/:/x}.txt 2>&1
  echo "-- $1 synth $2: exit $?; $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY|bitwise" $R/san-$1-${2/:/x}.txt | head -3 | tr '\n' ' ')"
done
echo "== end $(date -u +%T)"
} > $R/d.log 2>&1
tar cJf $O/r.txz -C $R .
cat $R/d.log | cut -c1-250
