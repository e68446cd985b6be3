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
# the stall reasons of the samples (ncu 2025+: stall_* columns, issued and not)
cstall = [(i, c) for i, c in enumerate(h) if c.startswith('stall_') and 'Not Issued' not in c]
ins = []
stalls = []
for r in data:
    if len(r) < len(h): continue
    ins.append((r[ca], r[cs], num(r[csamp]) if csamp is not None else 0, num(r[cexe]) if cexe is not None else 0))
    stalls.append([num(r[i]) for i, _ in cstall])
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
for j, x in enumerate(ins):
    cur.append(j)
    if 'BAR' in x[1] and 'SYNC' in x[1]:
        regs.append(cur); cur = []
if cur: regs.append(cur)
out = []
for i, r in enumerate(regs):
    s = sum(ins[j][2] for j in r); e = sum(ins[j][3] for j in r)
    ops = collections.Counter(opcode(ins[j][1]) for j in r)
    keyops = {k: v for k, v in ops.items() if k in ('MATCH','ATOMS','ATOM','RED','VOTE','LDG','STG','SHFL','LDS','STS','BAR','REDUX','POPC','FLO','BREV')}
    st = [sum(stalls[j][q] for j in r) for q in range(len(cstall))]
    top = sorted(((v, cstall[q][1][6:]) for q, v in enumerate(st) if v > 0), reverse=True)[:3]
    why = ' '.join(f"{name} {100*v/max(s,1):.0f}%" for v, name in top)
    out.append((s, e, i, ins[r[0]][0], ins[r[-1]][0], len(r), keyops, why))
tot_st = [sum(x[q] for x in stalls) for q in range(len(cstall))]
print("stalls (all samples):", ' '.join(f"{cstall[q][1][6:]} {100*v/max(tot_s,1):.0f}%" for v, q in sorted(((v, q) for q, v in enumerate(tot_st) if v > 0), reverse=True)[:8]))
print("region first..last addr, n instrs, samples %, executed %, key ops; top stalls of the region")
for s, e, i, a0, a1, n, k, why in sorted(out, reverse=True)[:int(sys.argv[2]) if len(sys.argv) > 2 else 25]:
    print(f"  r{i:3d} {a0[-5:]}..{a1[-5:]} n={n:5d} samp {100*s/max(tot_s,1):5.1f}% exe {100*e/max(tot_e,1):5.1f}% {k}; {why}")
