#!/usr/bin/env python3
"""SASS per logit of the hot loops in `cuobjdump -sass` output (benches/g1/build.sh).

A loop is a backward BRA; its body is the instructions from the branch target to the branch. For
each streaming kernel of g1.cu the loop with the most 128-bit loads is its hot loop: logits per
body = 128-bit loads x (4 for f32, 8 for bf16). "all" counts every instruction of the body (the
vote-taken blocks included), "no-survivor" leaves out the blocks that a forward branch on a warp vote
jumps over (the path when no lane of the warp has a survivor). The bulk kernel's hot loop is its
chunk loop: its count includes the mbarrier wait, the block barrier and the refill. NOPs are not counted.
"""
import re
import sys
from collections import Counter

INS = re.compile(r"^\s+/\*([0-9a-f]{4,})\*/\s+(.*?);")


def functions(text):
    name, body = None, []
    for line in text.splitlines():
        m = re.search(r"Function : (\S+)", line)
        if m:
            if name:
                yield name, body
            name, body = m.group(1), []
            continue
        m = INS.match(line)
        if m and name:
            body.append((int(m.group(1), 16), m.group(2).strip()))
    if name:
        yield name, body


def opcode(ins):
    parts = ins.split()
    if parts and parts[0].startswith("@"):
        parts = parts[1:]
    return parts[0] if parts else ""


def target(ins):
    m = re.search(r"BRA\s+(?:`\()?.*?0x([0-9a-f]+)", ins)
    return int(m.group(1), 16) if m else None


def loops(body):
    for addr, ins in body:
        if opcode(ins).startswith("BRA"):
            t = target(ins)
            if t is not None and t <= addr:
                yield [(a, i) for a, i in body if t <= a <= addr]


def analyse(loop):
    ops = [opcode(i) for _, i in loop if opcode(i) != "NOP"]
    # Blocks skipped by `@!Pk BRA forward` where Pk was last written by VOTE.ANY: the survivor work.
    skipped, votes = set(), set()
    for a, i in loop:
        op = opcode(i)
        if op.startswith("VOTE.ANY"):
            votes.add(i.split()[1].rstrip(","))
        m = re.match(r"@!(P\d)\s+BRA", i)
        if m and m.group(1) in votes:
            t = target(i)
            if t is not None and t > a:
                skipped.update(b for b, _ in loop if a < b < t)
    skip = [opcode(i) for a, i in loop if a not in skipped and opcode(i) != "NOP"]
    return ops, skip


def main():
    text = open(sys.argv[1]).read()
    print("| kernel | loop body SASS (all) | no-survivor path | 128-bit loads | logits/body | SASS/logit all | SASS/logit no-survivor | max (FMNMX/HMNMX2/VHMNMX) | compare (FSETP/HSETP2) | VOTE |")
    print("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    for name, body in functions(text):
        if not any(k in name for k in ("k_plain_v", "k_bulk_v", "k_cluster")):
            continue
        best = None
        for lp in loops(body):
            ops, skip = analyse(lp)
            vec = sum(1 for o in ops if (o.startswith("LDG") or o.startswith("LDS")) and ".128" in o)
            if best is None or vec > best[2]:
                best = (ops, skip, vec)
        if not best or best[2] == 0:
            print(f"| {name} | no vector-load loop | | | | | | | | |")
            continue
        ops, skip, vec = best
        per16 = 8 if "BF16" in name else 4
        logits = vec * per16
        c = Counter(o.split(".")[0] for o in ops)
        print(f"| {name} | {len(ops)} | {len(skip)} | {vec} | {logits} | {len(ops) / logits:.2f} | "
              f"{len(skip) / logits:.2f} | {c['FMNMX'] + c['HMNMX2'] + c['VHMNMX']} | {c['FSETP'] + c['HSETP2']} | "
              f"{c['VOTE']} |")


if __name__ == "__main__":
    main()
