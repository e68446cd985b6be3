#!/usr/bin/env bash
# Run 57 call E: `devices` and synth with the fused cluster tail on (main's new default to 16 rows) on r's PTX.
set -u
R=$OUT; mkdir -p $R
rm -rf .gpu/st-p .gpu/pq .gpu/pt .gpu/pr; for f in p v; do xz -dc .gpu/$f.txz | tar xf - -C .gpu; done
w=.gpu/st-p/bin; gd=.gpu/st-p/golden; export SAMPLER_PTX_FILE=$PWD/.gpu/pr/ptx-r.ptx SAMPLER_CLUSTER_TAIL=1
echo "== devices, tail on ($SECONDS s)"; SAMPLER_GOLDEN_DIR=$gd timeout 150 $w/devices --test-threads 1 > $R/devices-r-tail.log 2>&1; echo "rc $?"
grep -E "test result|FAILED" $R/devices-r-tail.log | head -6
echo "== synth, tail on"; timeout 60 $w/gpu_suite synth 2:1024 3:1024 5:1024 12:1024 16:1024 16:512 2>&1 | tail -6
echo "== end ($SECONDS s)"
