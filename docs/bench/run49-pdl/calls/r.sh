#!/usr/bin/env bash
set -u
R=$OUT; b=.gpu/stage/bin
[ -x $b/benchmark ] || { rm -rf .gpu/stage; mkdir -p .gpu/stage; xz -dc .gpu/round.txz | tar xf - -C .gpu/stage; }
bench() { awk -F'|' 'NF>10{print $2,$3,$4,$8,$NF}'; }
{
for pass in 1 2; do for c in auto 4 8 16; do
  echo "== bench cluster=$c pass $pass $(date -u +%T)"
  env $([ $c != auto ] && echo SAMPLER_CLUSTER=$c) timeout 90 $b/benchmark run --rows 2,4,8,12,16 --n 1024,4096,0 --json $R/cs-$c-$pass.json 2>&1 | bench | tail -15
done; done
} > $R/r.log 2>&1
cd $R && tar cf - *.json *.log | xz -9 > all.txz
cat r.log | head -40
