#!/usr/bin/env bash
set -u
R=$OUT; rm -rf .gpu/stage; mkdir -p .gpu/stage; xz -dc .gpu/round.txz | tar xf - -C .gpu/stage
b=.gpu/stage/bin
bench() { awk -F'|' 'NF>10{print $2,$3,$4,$8,$NF} /cluster top-N/{print}'; }
{
timeout 200 $b/gpu_suite synth 1:64 > /dev/null 2>&1
for pass in 1 2; do
  for c in 16 8; do echo "== R 5-7 cluster=$c pass $pass"; SAMPLER_CLUSTER=$c timeout 90 $b/benchmark run --rows 5,6,7 --n 1024,4096,0 --json $R/a-$c-$pass.json 2>&1 | bench | tail -10; done
  for c in 8 auto; do echo "== R 9-16 cluster=$c pass $pass"; env $([ $c != auto ] && echo SAMPLER_CLUSTER=$c) timeout 90 $b/benchmark run --rows 9,10,13,14,15,16 --n 1024,4096,0 --json $R/b-$c-$pass.json 2>&1 | bench | tail -19; done
done
} > $R/s.log 2>&1
cd $R && tar cf - *.json *.log | xz -9 > all.txz
head -3 s.log
