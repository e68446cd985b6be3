#!/usr/bin/env bash
# Session 18 call P: programmatic dependent launch (PTX p = main + griddepcontrol at every entry; SAMPLER_PDL=1 launches with the attribute) and g = p + f's tie part (a split value's per-rank counts by 16 lanes at once), against e (main's PTX).
set -u
R=$OUT; rm -rf .gpu/stage; mkdir -p $R .gpu/stage
xz -dc .gpu/round.txz | tar xf - -C .gpu/stage
b=.gpu/stage/bin; gd=.gpu/stage/golden
for v in e p g; do xz -dc .gpu/ptx-$v.ptx.xz > /tmp/ptx-$v.ptx; done
e() { echo SAMPLER_PTX_FILE=/tmp/ptx-$1.ptx SAMPLER_PDL=$2; }
bench() { awk -F'|' 'NF>10{print $2,$3,$4,$8,$NF} /cluster top-N/{print}'; }
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== warm $(date -u +%T)"
for v in e p g; do env $(e $v 1) timeout 200 $b/gpu_suite synth 1:64 > /dev/null 2>&1 & done; wait
echo "== p PDL=1 devices (all) $(date -u +%T)"
env $(e p 1) SAMPLER_GOLDEN_DIR=$gd timeout 240 $b/devices --test-threads 1 > $R/devices-p1.log 2>&1; echo "rc $?"; grep -E "^test |test result" $R/devices-p1.log | grep -v " ok$" | tail -5
echo "== p PDL=1 golden $(date -u +%T)"; env $(e p 1) timeout 100 $b/gpu_suite golden $gd 2>&1 | tail -2
echo "== p PDL=1 adversarial"; env $(e p 1) timeout 100 $b/gpu_suite adversarial > $R/adv-p1.log 2>&1; echo "rc $? $(grep -c 'bitwise ok' $R/adv-p1.log) ok"; grep -v "bitwise ok" $R/adv-p1.log | tail -3
echo "== p PDL=1 synth"; env $(e p 1) timeout 100 $b/gpu_suite synth 1:1024 1:4096 1:0 4:1024 16:1024 16:4096 16:0 64:1024 64:0 384:4096 384:0 2>&1 | tail -11
echo "== g PDL=1 devices clusters $(date -u +%T)"
env $(e g 1) SAMPLER_GOLDEN_DIR=$gd timeout 100 $b/devices --test-threads 1 cuda_counts::golden_and_adversarial_rows_through_clusters 2>&1 | grep "test result"
echo "== g golden cluster 16"; env $(e g 1) SAMPLER_CLUSTER=16 timeout 100 $b/gpu_suite golden $gd 2>&1 | tail -2
echo "== g adversarial cluster 16"; env $(e g 1) SAMPLER_CLUSTER=16 timeout 100 $b/gpu_suite adversarial > $R/adv-g16.log 2>&1; echo "rc $? $(grep -c 'bitwise ok' $R/adv-g16.log) ok"
for pass in 1 2; do for c in "e 0" "p 0" "p 1" "g 1"; do set -- $c
  echo "== bench $1 PDL=$2 pass $pass $(date -u +%T)"
  env $(e $1 $2) timeout 90 $b/benchmark run --rows 1,4,16,64,384 --n 1024,4096,0 --json $R/ours-$1$2-$pass.json 2>&1 | bench | tail -16
done; done
for c in "e 0" "g 1"; do set -- $c; echo "== bf16 $1 PDL=$2"; env $(e $1 $2) timeout 60 $b/benchmark run --dtype bf16 --rows 1,16,384 --n 1024,0 --json $R/bf16-$1$2.json 2>&1 | bench | tail -8; done
echo "== end $(date -u +%T)"
} > $R/p.log 2>&1
cd $R && tar cf - *.json *.log | xz -9 > all.txz
cat $R/p.log | cut -c1-200
