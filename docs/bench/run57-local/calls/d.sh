#!/usr/bin/env bash
# Run 57 call D: `devices` on the fixed p and on r (call C ran it on st-p's embedded PTX, 969e69f, with the race).
set -u
R=$OUT; mkdir -p $R
rm -rf .gpu/st-p .gpu/pq .gpu/pt .gpu/pr; for f in p v; do xz -dc .gpu/$f.txz | tar xf - -C .gpu; done
w=.gpu/st-p/bin; gd=.gpu/st-p/golden
for v in p r; do f=.gpu/pq/ptx-p.ptx; [ $v = r ] && f=.gpu/pr/ptx-r.ptx
  echo "== $v devices ($SECONDS s)"; SAMPLER_PTX_FILE=$PWD/$f SAMPLER_GOLDEN_DIR=$gd timeout 130 $w/devices --test-threads 1 > $R/devices-$v.log 2>&1; echo "rc $?"
  grep -E "test result|FAILED|runs, |checked" $R/devices-$v.log | head -8
done
echo "== end ($SECONDS s)"
