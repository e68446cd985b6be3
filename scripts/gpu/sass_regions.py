#!/usr/bin/env python3
"""Sums an Nsight Compute SASS source CSV (`round.sh profile` writes one per kernel:
prof/<shape>.sass-<kernel>.csv) by region between barriers (BAR.SYNC), to see which phase
of a one-block kernel takes the samples and the executed instructions.

    python3 scripts/gpu/sass_regions.py prof/r1-n4096.sass-topn_merge_stream_t4096.csv [TOP]

Written in the thirteenth session before a CSV of this ncu version came back: the column
names ("Address", "Source", "Warp Stall Sampling (All Samples)", "Instructions Executed")
are matched loosely; check them against the header it prints on its first real use.
"""
import collections
import csv
import sys

f = sys.argv[1]
rows = list(csv.reader(open(f, errors='replace')))
# find header row
hi = next(i for i, r in enumerate(rows) if any('Address' in c for c in r) and any('Source' in c for c in r))
h = rows[hi]; data = rows[hi+1:]
def col(name):
    for i, c in enumerate(h):
        if c.strip().strip('#').strip() == name: return i
    for i, c in enumerate(h):
        if name.lower() in c.lower(): return i
    return None
ca, cs = col('Address'), col('Source')
csamp = col('Warp Stall Sampling (All Samples)')
cexe = col('Instructions Executed')
print('cols', h[:12] if len(h) < 40 else len(h), file=sys.stderr)
def num(x):
    try: return float(x.replace(',', ''))
    except: return 0.0
ins = []
for r in data:
    if len(r) <= max(ca, cs): continue
    ins.append((r[ca], r[cs], num(r[csamp]) if csamp is not None else 0, num(r[cexe]) if cexe is not None else 0))
tot_s = sum(x[2] for x in ins); tot_e = sum(x[3] for x in ins)
print(f"{f}: {len(ins)} instrs, samples {tot_s:.0f}, warp instrs executed {tot_e:.0f}")
def opcode(sass):
    """`@!P0 LDG.E.128 R8, ...` -> `LDG` (the predicate guard dropped)."""
    toks = sass.split()
    if toks and toks[0].startswith('@'):
        toks = toks[1:]
    return toks[0].split('.')[0] if toks else ''
# regions split at BAR.SYNC
regs = []; cur = []
for x in ins:
    cur.append(x)
    if 'BAR' in x[1] and 'SYNC' in x[1]:
        regs.append(cur); cur = []
if cur: regs.append(cur)
out = []
for i, r in enumerate(regs):
    s = sum(x[2] for x in r); e = sum(x[3] for x in r)
    ops = collections.Counter(opcode(x[1]) for x in r)
    keyops = {k: v for k, v in ops.items() if k in ('MATCH','ATOMS','ATOM','RED','VOTE','LDG','STG','SHFL','LDS','STS','BAR','REDUX','POPC','FLO','BREV')}
    out.append((s, e, i, r[0][0], r[-1][0], len(r), keyops))
print("region first..last addr, n instrs, samples %, executed %, key ops")
for s, e, i, a0, a1, n, k in sorted(out, reverse=True)[:int(sys.argv[2]) if len(sys.argv) > 2 else 25]:
    print(f"  r{i:3d} {a0}..{a1} n={n:5d} samp {100*s/max(tot_s,1):5.1f}% exe {100*e/max(tot_e,1):5.1f}% {k}")
