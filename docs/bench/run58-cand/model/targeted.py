import random, sys
from collections import Counter
from model import check, model, brute, M32

rng = random.Random(int(sys.argv[1]) if len(sys.argv) > 1 else 7)
stats = Counter()
fails = 0
cases = 0


def run(us, C, n, s, flat=0, tag=""):
    global fails, cases
    cases += 1
    e = check(us, C, n, s, flat, rng, stats)
    if e:
        fails += 1
        if fails < 10:
            print("FAIL", tag, e, dict(C=C, v=len(us), n=n, sorted=s, flat=flat))


def bin_keys(pre, c, lows=None):
    lows = lows or [rng.getrandbits(10) for _ in range(rng.choice([1, 3, 1024]))]
    return [(pre << 10) | rng.choice(lows) for _ in range(c)]


for it in range(int(sys.argv[2]) if len(sys.argv) > 2 else 2000):
    C = rng.randint(1, 16)
    top = rng.random() < 0.4
    pre_hi = 0x3FFFFF if top else rng.randint(0x2000, 0x3FF000)
    # bins: hi (s1's), mid, lo (s0's), each count around CAND_MAX
    c_above = rng.choice([0, 1, 5, 50])
    c1 = rng.choice([1, 2, 127, 128, 129, rng.randint(1, 200)])
    c0 = rng.choice([1, 2, 127, 128, 129, rng.randint(1, 200)])
    gap = rng.choice([0, 1, 2, 2048, 5000])  # 0: same bin for both
    above = [rng.randint((pre_hi + 1) << 10, M32) for _ in range(c_above)] if pre_hi < 0x3FFFFF else []
    b1 = bin_keys(pre_hi, c1)
    b0 = bin_keys(pre_hi - gap, c0) if gap else []
    below = [rng.randint(0, max(0, ((pre_hi - gap) << 10) - 1)) for _ in range(rng.choice([0, 3, 100, 400]))]
    us = above + b1 + b0 + below
    if rng.random() < 0.7:
        rng.shuffle(us)
    v = len(us)
    na = len(above)
    for _ in range(4):
        # n inside bin0 (or bin1), s inside bin1 or before/at edges
        if gap:
            n = na + c1 + rng.randint(0, c0) if rng.random() < 0.8 else rng.randint(1, v)
        else:
            n = na + rng.randint(1, c1) if rng.random() < 0.8 else rng.randint(1, v)
        n = max(1, min(n, v))
        s = rng.choice([0, n, na + rng.randint(0, c1), n - 1, rng.randint(0, n), na, na + c1])
        s = max(0, s)
        run(us, C, n, s, 0, "bins")
    # bf16 flat
    vals = []
    for _ in range(rng.randint(1, 6)):
        h = rng.getrandbits(16)
        if ((h >> 7) & 0xFF) == 0xFF:
            h = 0xFF80
        b = h << 16
        if b == 0x80000000:
            b = 0
        vals.append((~b) & M32 if b & 0x80000000 else b | 0x80000000)
    v = rng.randint(1, 600)
    us = [rng.choice(vals) for _ in range(v)]
    n = rng.randint(1, v)
    run(us, C, n, rng.choice([0, n, rng.randint(0, n)]), 16, "bf16")
    run(us, C, n, rng.choice([0, n, rng.randint(0, n)]), 0, "bf16-as-f32")
    # small v < 4C, odd v
    v = rng.randint(1, 4 * C + 3)
    us = [rng.choice([0x80000000, 0x80000001, 0x80000400, 0xFFFFFFFF, 0xFFFFFC00, 0x7FFFFF]) for _ in range(v)]
    n = rng.randint(1, v)
    run(us, C, n, rng.randint(0, n + 1), 0, "small")

print("fails", fails, "cases", cases, dict(stats))
