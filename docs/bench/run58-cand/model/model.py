"""Python model of top_n_cluster (variant sc, 887b716) in sampler-kernels/src/rt/gpu/cluster.rs."""
import random, sys
from collections import Counter

HB = 2048
MERGED = 5
STAGE_KEYS = MERGED * HB // 2
CAND_MAX = 128
CAND_PASS = 1
M32 = 0xFFFFFFFF


def digit(p):
    return {0: (21, 11), 1: (10, 11)}.get(p, (0, 10))


def cluster_slice(v, ctas):
    c = ctas or 1
    return -(-(-(-v // c)) // 8) * 8


def key_of_bits(u, i):
    return (u << 32) | ((~i) & M32)


class Sel:
    def __init__(s, need, done):
        s.pre = 0; s.need = need; s.done = done; s.thr = 0; s.ties = False; s.cand = False; s.cnt = 0


class Fail(Exception):
    pass


def boundary(hist, need):
    # bins ranked from the top: (bin, keys above, keys in it)
    tot = sum(hist)
    if not (1 <= need <= tot):
        raise Fail(f"boundary need {need} total {tot}")
    above = 0
    for b in range(HB - 1, -1, -1):
        c = hist[b]
        if above < need <= above + c:
            return b, above, c
        above += c
    raise Fail("no boundary")


def settle(sel, bd, shift, bits, last, may):
    if sel.done:
        return False
    b, above, cnt = bd
    sel.need -= above
    sel.pre = ((sel.pre << bits) | b) & M32
    if cnt == sel.need:
        sel.done = True
        sel.thr = (sel.pre << shift) & M32
        return False
    if not last:
        if may and cnt <= CAND_MAX:
            sel.done = True; sel.cand = True; sel.cnt = cnt
            sel.thr = (sel.pre << shift) & M32
        return False
    sel.done = True
    sel.ties = True
    fill = 0 if (shift == 0 or (sel.pre >> (31 - shift)) & 1 == 1) else (1 << shift) - 1
    sel.thr = ((sel.pre << shift) | fill) & M32
    return True


def share_of(sel, ranks, q):
    if not sel.ties:
        return True, 0
    before = sum(ranks[:q])
    mine = ranks[q]
    take = min(sel.need - before, mine) if sel.need > before else 0
    return take == mine, take


def model(us, C, n_in, sorted_, flat, rng=None, stats=None):
    v = len(us)
    n = min(n_in, v)
    if n == 0 or n > STAGE_KEYS or C > 16:
        return None
    sl = cluster_slice(v, C)
    slices = []
    for q in range(C):
        st = min(q * sl, v)
        ln = min(sl, v - st)
        slices.append((st, us[st:st + ln]))
    s = min(sorted_, n)
    two = 0 < s < n
    s0 = Sel(n, False)
    s1 = Sel(s, not two)
    # L[q][h] local histograms
    L = [[[0] * HB for _ in range(2 * MERGED)] for _ in range(C)]
    for q, (st, xs) in enumerate(slices):
        for u in xs:
            L[q][0][u >> 21] += 1
    ranks0 = [0] * 16
    ranks1 = [0] * 16
    p = 0
    passes = 0
    while p < 3 and not (s0.done and s1.done):
        shift, bits = digit(p)
        h0 = 0 if p == 0 else 2 * p - 1
        share = p == 0 or ((not s0.done) and s1.pre == s0.pre)
        h1 = h0 if share else 2 * p
        own1 = (not share) and (not s1.done)
        if p > 0:
            above = shift + bits
            mask = (1 << bits) - 1
            a0, pre0, pre1 = (not s0.done), s0.pre, s1.pre
            for q, (st, xs) in enumerate(slices):
                for u in xs:
                    d = (u >> shift) & mask
                    if a0 and (u >> above) == pre0:
                        L[q][h0][d] += 1
                    if own1 and (u >> above) == pre1:
                        L[q][h1][d] += 1
        Mh = {}
        if not s0.done:
            Mh[h0] = [sum(L[q][h0][b] for q in range(C)) for b in range(HB)]
        if own1:
            Mh[h1] = [sum(L[q][h1][b] for q in range(C)) for b in range(HB)]
        bd0 = boundary(Mh[h0], s0.need) if not s0.done else None
        bd1 = boundary(Mh[h1], s1.need) if not s1.done else None
        last = p == 2 or (p == 1 and flat >= digit(1)[0])
        may = p == CAND_PASS and not last
        tie0 = settle(s0, bd0, shift, bits, last, may)
        tie1 = settle(s1, bd1, shift, bits, last, may)
        if tie0:
            for r in range(C):
                ranks0[r] = L[r][h0][bd0[0]]
        if tie1:
            for r in range(C):
                ranks1[r] = L[r][h1][bd1[0]]
        p += 1
        passes += 1
    if stats is not None:
        stats['cand0'] += s0.cand; stats['cand1'] += s1.cand
        stats['both'] += s0.cand and s1.cand
        stats['same'] += s0.cand and s1.cand and s0.pre == s1.pre
        stats['ties'] += s0.ties or s1.ties
        stats['c1_x0exact'] += s1.cand and not s0.cand
        stats['passes%d' % passes] += 1
    cshift = digit(CAND_PASS)[0]
    cand0, cand1 = s0.cand, s1.cand
    cpre0, cpre1 = s0.pre, s1.pre
    anycand = cand0 or cand1
    t0, t1 = s0.thr, s1.thr
    pbuf_parts, kb_parts, cg_parts = [], [], []
    for q, (st, xs) in enumerate(slices):
        all0, quota0 = share_of(s0, ranks0, q)
        all1, quota1 = share_of(s1, ranks1, q) if two else (True, 0)
        part0, part1 = (not all0 and quota0 > 0), (not all1 and quota1 > 0)
        partial = part0 or part1

        def lo(sel, al):
            if sel.cand:
                return (sel.pre + 1) << cshift
            return sel.thr + (0 if al else 1)
        lo0, lo1 = lo(s0, all0), lo(s1, all1)

        def in_bin(u):
            return (cand0 and (u >> cshift) == cpre0) or (cand1 and (u >> cshift) == cpre1)

        def keep(u, tr):
            cd1 = cand1 and (u >> cshift) == cpre1
            k0 = (u >= lo0 or (part0 and u == t0 and tr[0] < quota0)) and not cd1
            k1 = u >= lo1 or (part1 and u == t1 and tr[1] < quota1)
            return k0, (k1 if two else (s == n and k0))
        tr = (0, 0)
        P, R, Cd = [], [], []
        for i, u in enumerate(xs):
            k, pre = keep(u, tr)
            if pre and not k:
                raise Fail(f"prefix key not kept (vote path would drop it) u={u:#x}")
            key = key_of_bits(u, st + i)
            if pre:
                P.append(key)
            elif k:
                R.append(key)
            if anycand and in_bin(u):
                if k or pre:
                    raise Fail(f"candidate also staged as kept/prefix u={u:#x} k={k} pre={pre}")
                Cd.append(key)
            if partial:
                tr = (tr[0] + (u == t0), tr[1] + (u == t1))
        if len(P) + len(R) > STAGE_KEYS:
            raise Fail("stage overflow")
        if len(Cd) > 2 * CAND_MAX:
            raise Fail(f"cstage overflow {len(Cd)}")
        pbuf_parts.append(P); kb_parts.append(R); cg_parts.append(Cd)
    # the leader: arbitrary CTA order of the atomics
    order = list(range(C))
    if rng:
        rng.shuffle(order)
    pbuf, keybuf, cg = [], [], []
    for q in order:
        pbuf += pbuf_parts[q]; keybuf += kb_parts[q]; cg += cg_parts[q]
    if len(cg) > 2 * CAND_MAX:
        raise Fail(f"cgather overflow {len(cg)}")
    sp = s if two else (n if s == n else 0)
    pb, qb = len(pbuf), len(keybuf)
    cap = n
    pbuf = pbuf + [None] * (cap - len(pbuf)) if len(pbuf) <= cap else pbuf
    keybuf = keybuf + [None] * (cap - len(keybuf)) if len(keybuf) <= cap else keybuf
    if anycand:
        k = len(cg)
        first0 = s1.cnt if (cand1 and cpre1 != cpre0) else 0
        kept = first0 + s0.need if cand0 else k
        np_ = (s1.need if cand1 else 0) if two else (kept if s == n else 0)
        if pb + np_ != sp:
            raise Fail(f"pb+np {pb}+{np_} != sp {sp}")
        if qb + (kept - np_) != n - sp:
            raise Fail(f"qb+kept-np {qb}+{kept}-{np_} != n-sp {n - sp}")
        if kept > k:
            raise Fail("kept > k")
        for mine in cg:
            r = sum(1 for x in cg if x > mine)
            if r < np_:
                if pbuf[pb + r] is not None:
                    raise Fail("pbuf slot twice")
                pbuf[pb + r] = mine
            elif r < kept:
                if keybuf[qb + r - np_] is not None:
                    raise Fail("keybuf slot twice")
                keybuf[qb + r - np_] = mine
    if any(x is None for x in pbuf[:sp]) or any(x is None for x in keybuf[:n - sp]):
        raise Fail(f"unfilled slot sp={sp} pb={pb} qb={qb}")
    if len(pbuf) > cap or len(keybuf) > cap:
        raise Fail("buffer overflow")
    pre = sorted(pbuf[:sp], reverse=True)
    return pre + keybuf[:n - sp], sp


def brute(us, n, sorted_):
    keys = sorted((key_of_bits(u, i) for i, u in enumerate(us)), reverse=True)
    n = min(n, len(us))
    return keys[:n]


def check(us, C, n, sorted_, flat, rng=None, stats=None):
    try:
        r = model(us, C, n, sorted_, flat, rng, stats)
    except Fail as e:
        return str(e)
    if r is None:
        return None
    out, sp = r
    exp = brute(us, n, sorted_)
    if len(out) != len(exp) or set(out) != set(exp):
        return f"set mismatch: missing {len(set(exp) - set(out))} extra {len(set(out) - set(exp))}"
    if out[:sp] != exp[:sp]:
        return "prefix order mismatch"
    return None
