#!/usr/bin/env bash
# Session 18 call W: force top-k off at R = 16-28 (cluster 6 / 5, the streaming top-N, the chunked one), PDL at R = 32 / 128 (N = 1024, 4096).
set -u
R=$OUT; rm -rf .gpu/stage; mkdir -p .gpu/stage; xz -dc .gpu/round.txz | tar xf - -C .gpu/stage
b=.gpu/stage/bin
bench() { awk -F'|' 'NF>10{print $2,$3,$4,$8,$NF}' | grep -v "^ *R "; }
{
timeout 200 $b/gpu_suite synth 1:64 > /dev/null 2>&1
timeout 100 $b/gpu_suite synth 20:0 24:0 28:0 2>&1 | tail -3
for pass in 1 2; do
  for c in "auto" "SAMPLER_CLUSTER=0 SAMPLER_STREAM_SELECT=1" "SAMPLER_CLUSTER=5" "SAMPLER_CLUSTER=6"; do
    echo "-- off $c pass $pass"; env $([ "$c" != auto ] && echo $c) timeout 90 $b/benchmark run --rows 16,20,24,28 --n 0 --json $R/off-$(echo $c | tr -dc 'A-Z0-9=' | tr '=' '_')-$pass.json 2>&1 | bench
  done
  for p in 0 1; do echo "-- PDL $p pass $pass"; SAMPLER_PDL=$p timeout 90 $b/benchmark run --rows 32,128 --n 1024,4096 --json $R/pdl$p-$pass.json 2>&1 | bench; done
done
} > $R/w.log 2>&1
cd $R && tar cf - *.json *.log | xz -9 > all.txz
cat w.log | cut -c1-160
