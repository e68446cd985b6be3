import random, sys, struct
from collections import Counter
from model import check, M32

LO, HI = 0x007FFFFF, 0xFF800000  # -inf .. below +inf: finite + -inf


def order_bits_f32bits(b):
    if b == 0x80000000:
        b = 0
    return (~b) & M32 if b & 0x80000000 else b | 0x80000000


def bf16_u(rng):
    # a finite bf16 or -inf
    while True:
        h = rng.getrandbits(16)
        if ((h >> 7) & 0xFF) == 0xFF and h != 0xFF80:
            continue
        return order_bits_f32bits(h << 16)


def gen(rng):
    flat = rng.choice([0, 0, 0, 16])
    C = rng.randint(1, 16)
    v = rng.choice([rng.randint(1, 70), rng.randint(1, 400), rng.randint(100, 1500)])
    raw = rng.random() < 0.15 and flat == 0
    lo, hi = (0, M32) if raw else (LO, HI - 1)
    kind = rng.randrange(6)
    us = []
    if flat == 16:
        if kind == 0:
            vals = [bf16_u(rng) for _ in range(rng.randint(1, 8))]
            us = [rng.choice(vals) for _ in range(v)]
        elif kind == 1:
            # near each other: same 22-bit bins, bf16 step = 1 << 16
            base = bf16_u(rng)
            us = []
            for _ in range(v):
                h = ((base >> 16) + rng.randint(-3, 3)) & 0xFFFF
                u = (h << 16) | (0 if h & 0x8000 else 0xFFFF)
                u = max(LO, min(HI - 1, u)) if not raw else u
                us.append(u)
        else:
            us = [bf16_u(rng) for _ in range(v)]
        return us, C, flat
    if kind == 0:  # uniform
        us = [rng.randint(lo, hi) for _ in range(v)]
    elif kind == 1:  # handful of values
        vals = [rng.randint(lo, hi) for _ in range(rng.randint(1, 6))]
        us = [rng.choice(vals) for _ in range(v)]
    elif kind in (2, 3):  # clusters in adjacent 22-bit bins, counts around 128
        top = rng.random() < 0.25
        basepre = (0x3FFFFF - rng.randint(0, 4)) if top else rng.randint(lo >> 10, hi >> 10)
        us = []
        while len(us) < v:
            pre = basepre - rng.randint(0, 3)
            if pre < 0:
                pre = 0
            c = rng.choice([rng.randint(1, 10), rng.randint(120, 136), rng.randint(100, 300), 128, 129, 127])
            lows = [rng.getrandbits(10) for _ in range(rng.choice([1, 2, 5, 1024]))]
            for _ in range(c):
                us.append((pre << 10) | rng.choice(lows))
        us = us[:v]
        # background
        for j in range(len(us)):
            if rng.random() < 0.2:
                us[j] = rng.randint(lo, hi)
        if kind == 3:  # same 11-bit bin, various 22-bit bins
            t = basepre >> 11
            for j in range(len(us)):
                if rng.random() < 0.3:
                    us[j] = (t << 21) | rng.getrandbits(21)
        if not raw:
            us = [max(LO, min(HI - 1, u)) for u in us]
    elif kind == 4:  # ranges of exact u near some value (dups + consecutive)
        b = rng.randint(lo, hi)
        us = [max(lo, min(hi, b + rng.randint(-2000, 2000))) for _ in range(v)]
    else:  # low bits constant (bf16-like in f32 mode)
        us = [(rng.randint(lo, hi) & ~0xFFFF) | 0x0 for _ in range(v)]
        us = [max(LO, min(HI - 1, u)) if not raw else u for u in us]
    rng.shuffle(us) if rng.random() < 0.5 else None
    return us, C, flat


def main(seed, iters):
    rng = random.Random(seed)
    stats = Counter()
    fails = 0
    for it in range(iters):
        us, C, flat = gen(rng)
        v = len(us)
        n = rng.choice([rng.randint(1, v), v, min(v, rng.randint(1, 300)), rng.randint(1, v + 5)])
        nn = min(n, v)
        sorted_ = rng.choice([0, n, nn, rng.randint(0, nn), max(0, nn - 1), max(0, nn - rng.randint(1, 5)), rng.randint(0, 3), nn + 7])
        err = check(us, C, n, sorted_, flat, rng, stats)
        stats['cases'] += 1
        if err:
            fails += 1
            if fails <= 5:
                print("FAIL", err, dict(C=C, v=v, n=n, sorted=sorted_, flat=flat), file=sys.stderr)
                with open(f"/tmp/review-sc/fail_{seed}_{it}.txt", "w") as f:
                    f.write(repr((us, C, n, sorted_, flat)))
    print(seed, "fails", fails, dict(stats))


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
