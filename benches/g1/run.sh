#!/usr/bin/env bash
# Runs the G1 microbenchmark (benches/g1/g1.cu, built here by benches/g1/build.sh into .gpux-g1/g1)
# on the device: one process per section, each under its own timeout, so a hang or a lost context
# costs one section only. Writes $OUT/g1.md (all tables), $OUT/g1.json, $OUT/g1.log.
#
# build.sh copies this script beside the binary, so from any checkout holding .gpux-g1:
#   run(command="bash .gpux-g1/run.sh", carry=[".gpux-g1"], timeout_s=240)
#
# Env: G1_BIN (default: g1 beside this script, else .gpux-g1/g1), REPS (30), ROWS (1,16,64,256,384), SECTION_TIMEOUT (30 s).
set -u
here="$(cd "$(dirname "$0")" && pwd)"
bin="${G1_BIN:-$here/g1}"
[ -x "$bin" ] || bin="$(cd "$here/../.." && pwd)/.gpux-g1/g1"
sass="$(dirname "$bin")/sass-loops.txt"
out="${OUT:-/tmp/g1-out}"
reps="${REPS:-30}"
rows="${ROWS:-1,16,64,256,384}"
tmo="${SECTION_TIMEOUT:-30}"
mkdir -p "$out"
start=$(date +%s)
{
    echo "== g1 on $(hostname) at $(date -u +%FT%TZ); reps=$reps rows=$rows timeout/section=${tmo}s"
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.draw,temperature.gpu --format=csv 2>&1 | head -3
    # A binary built on the build machine may not start here (other system libraries): then build
    # the carried source with this machine's nvcc (sm_90 only, ~30 s).
    if ! "$bin" --probe > /dev/null 2>&1; then
        echo "carried binary does not start here: $("$bin" --probe 2>&1 | head -2)"
        src="$(dirname "$bin")/g1.cu"
        nvcc_dev="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)"
        mkdir -p /tmp/g1-dev
        if [ -f "$src" ] && timeout 150 "$nvcc_dev" -std=c++17 -O3 -gencode=arch=compute_90,code=sm_90 \
            "$src" -o /tmp/g1-dev/g1 -L"$(dirname "$(dirname "$nvcc_dev")")/lib" > /tmp/g1-dev/build.log 2>&1; then
            bin=/tmp/g1-dev/g1
            echo "rebuilt with $("$nvcc_dev" --version | tail -1)"
        else
            echo "rebuild failed:"; tail -5 /tmp/g1-dev/build.log; exit 1
        fi
    fi
    [ -f "$sass" ] && cp "$sass" "$out/"
    : > "$out/g1.md"
    echo "# G1 hardware microbenchmark ($(date -u +%FT%TZ), $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1))" >> "$out/g1.md"
    echo >> "$out/g1.md"
    json="{\"reps\": $reps, \"rows\": [$rows], \"sections\": ["
    first=1
    for s in info a1 a1bf16 a2 a3 b c; do
        t0=$(date +%s.%N)
        timeout -k 5 "$tmo" "$bin" --section "$s" --reps "$reps" --rows "$rows" --out "$out" \
            > "$out/g1-$s.stdout" 2> "$out/g1-$s.stderr"
        rc=$?
        dt=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
        echo "== section $s: exit $rc, ${dt}s"
        tail -5 "$out/g1-$s.stderr"
        if [ -s "$out/g1-$s.md" ]; then
            cat "$out/g1-$s.md" >> "$out/g1.md"
        else
            printf '### %s\n\n**no result: exit %s (124 = timed out after %ss)**; stderr tail:\n\n```\n%s\n```\n\n' \
                "$s" "$rc" "$tmo" "$(tail -5 "$out/g1-$s.stderr")" >> "$out/g1.md"
        fi
        [ "$rc" = 0 ] || [ ! -s "$out/g1-$s.md" ] || echo "**section $s exit $rc**" >> "$out/g1.md"
        frag="null"
        [ -s "$out/g1-$s.json" ] && frag="$(cat "$out/g1-$s.json")"
        [ $first = 1 ] || json="$json,"
        first=0
        json="$json
{\"name\": \"$s\", \"exit\": $rc, \"seconds\": $dt, \"result\": $frag}"
    done
    echo "$json]}" > "$out/g1.json"
    if [ -f "$out/sass-loops.txt" ]; then
        { echo "### SASS per logit of the hot loops (built offline, benches/g1/sass_loops.py)"; echo; cat "$out/sass-loops.txt"; echo; } >> "$out/g1.md"
    fi
    python3 -c "import json,sys; json.load(open(sys.argv[1]))" "$out/g1.json" 2>&1 && echo "g1.json parses" || true
    echo "== g1 took $(( $(date +%s) - start )) s"
    grep -c "FAIL\|ERROR\|SUSPECT\|aborted\|no result" "$out/g1.md" | sed 's/^/lines with FAIL|ERROR|SUSPECT|aborted|no result: /'
} 2>&1 | tee "$out/g1.log"
