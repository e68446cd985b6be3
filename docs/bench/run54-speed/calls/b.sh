#!/usr/bin/env bash
# Session 19 call B: the speed round with FlashInfer 0.6.6 and torch on main d5133d7 + i + s (variant k), as run 50 (H200 if lent).
set -u
R=$OUT; rm -rf .gpu/stage; mkdir -p $R .gpu/stage
xz -dc .gpu/speed.txz | tar xf - -C .gpu/stage
OUT=$R RAW=0 ANCHORS=0 GOLDEN=0 BF16_ROWS=1,16,64,384 ROWS=1,16,64,256,384 timeout 340 bash scripts/gpu/round.sh speed > /dev/null 2>&1
echo "speed rc $?"
rm -f $R/ours.csv
grep -v "^\s*$" $R/bench.log | grep -v "^|" | tail -40 | cut -c1-200
cd $R && tar cf - * | xz -9 > /tmp/all.txz && find . -type f ! -name table.md ! -name bench.log -delete && mv /tmp/all.txz all.txz
