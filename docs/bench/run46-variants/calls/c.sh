#!/usr/bin/env bash
# Session 17 call C: the speed round with FlashInfer 0.6.6, binaries of s17 9ed885d with the PTX of e52c694 (e).
set -u
R=$OUT; rm -rf .gpu/stage; mkdir -p $R .gpu/stage
xz -dc .gpu/round.txz | tar xf - -C .gpu/stage
cp sampler-host/ptx/sampler_kernels.ptx /tmp/ptx-e.ptx; grep -c "fence.acq_rel.cluster" /tmp/ptx-e.ptx
export SAMPLER_PTX_FILE=/tmp/ptx-e.ptx
OUT=$R RAW=0 ANCHORS=0 GOLDEN=1 BF16_ROWS=1,4,16,64,256,384 ROWS=1,4,16,64,256,384 timeout 370 bash scripts/gpu/round.sh speed > /dev/null 2>&1
echo "speed rc $?"
rm -f $R/ours.csv
grep -v "^\s*$" $R/bench.log | grep -v "^|" | tail -40 | cut -c1-200
