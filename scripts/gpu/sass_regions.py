"""Where a kernel's instructions go, from Nsight Compute's source page (issue 22).

    python3 scripts/gpu/sass_regions.py <sass-KERNEL.csv from `round.sh profile`> [min share, default 0.02]

Splits the SASS at block barriers (BAR.SYNC / BAR.RED) and prints each region holding at least the
given share of the executed warp instructions: its address range, instructions executed, warp stall
samples and its instruction mix. The hot loops of a kernel show up as the largest regions.
"""
import csv, sys
def load(p):
    rows=[]
    with open(p) as f:
        r=csv.reader(f); next(r); hdr=next(r)
        ia=hdr.index("Address"); isrc=hdr.index("Source"); ism=hdr.index("Warp Stall Sampling (All Samples)"); iex=hdr.index("Instructions Executed")
        seen=set()
        for row in r:
            if len(row)<=iex: continue
            if row[ia] in seen: break   # second listing
            seen.add(row[ia])
            try: rows.append((row[ia],row[isrc],int(row[ism] or 0),int(row[iex] or 0)))
            except ValueError: pass
    return rows
p=sys.argv[1]; rows=load(p)
tot=sum(x[2] for x in rows); ex=sum(x[3] for x in rows)
print(p, "instrs",len(rows),"samples",tot,"executed",ex)
reg=[];cur=[]
for x in rows:
    cur.append(x)
    if 'BAR.SYNC' in x[1] or 'BAR.RED' in x[1]:
        reg.append(cur);cur=[]
reg.append(cur)
thr=float(sys.argv[2]) if len(sys.argv)>2 else 0.02
for i,rg in enumerate(reg):
    s=sum(x[2] for x in rg); e=sum(x[3] for x in rg)
    if e>=thr*ex:
        ops={}
        for x in rg:
            t=x[1].split()
            if not t: continue
            op=t[1] if t[0].startswith('@') else t[0]
            ops[op.split('.')[0]]=ops.get(op.split('.')[0],0)+x[3]
        top=sorted(ops.items(),key=lambda t:-t[1])[:9]
        mx=max(x[3] for x in rg)
        print(f"R{i} [{rg[0][0][-5:]}..{rg[-1][0][-5:]}] n={len(rg)} exec {e} ({100*e/ex:.1f}%) samp {s} max/instr {mx} ops {top}")
