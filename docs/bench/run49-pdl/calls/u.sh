#!/usr/bin/env bash
# Session 18 call U: the speed round with FlashInfer 0.6.6 on the tree (PTX g, PDL auto, cluster_auto from clusters at once).
set -u
R=$OUT; rm -rf .gpu/stage; mkdir -p $R .gpu/stage
xz -dc .gpu/round.txz | tar xf - -C .gpu/stage
OUT=$R RAW=0 ANCHORS=0 GOLDEN=1 BF16_ROWS=1,4,16,64,256,384 ROWS=1,4,16,64,256,384 timeout 380 bash scripts/gpu/round.sh speed > /dev/null 2>&1
echo "speed rc $?"
rm -f $R/ours.csv
grep -v "^\s*$" $R/bench.log | grep -v "^|" | tail -40 | cut -c1-200
