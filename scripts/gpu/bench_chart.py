#!/usr/bin/env python3
"""PNG twin of `benchmark chart` (which writes SVG): time vs rows R, log-log, one panel per N:
ours (CUDA graph), floor (one read), FlashInfer joint (graph), torch peer. Needs Pillow.

    python3 scripts/bench_chart.py DIR     # reads DIR/{ours,fi,torch}.json, writes DIR/chart.png
"""
import json, math, sys
from PIL import Image, ImageDraw

d = sys.argv[1]
def load(name):
    try:
        return json.loads(open(f"{d}/{name}").read().replace("-Infinity", "null").replace("Infinity", "null").replace("NaN", "null"))["results"]
    except OSError:
        return []
ours, fi, torch = load("ours.json"), load("fi.json"), load("torch.json")
def get(res, r, n, k):
    for x in res:
        if x["rows"] == r and x["n"] == n and x.get(k) is not None:
            return x[k]
    return None
ns = sorted({x["n"] for x in ours}, key=lambda n: n or 1 << 30)
rows = sorted({x["rows"] for x in ours})
PW, PH, TOP, LEFT = 300, 300, 70, 50
W, H = LEFT + len(ns) * (PW + 30) + 10, TOP + PH + 50
img = Image.new("RGB", (W, H), "white")
g = ImageDraw.Draw(img)
g.text((LEFT, 10), "Sampler step, V = 129280, H200: median us vs rows R (log-log); L2 flushed, logits on the device", fill="black")
series = [("ours (CUDA graph)", (31, 119, 180), ours, "graph_us"), ("floor (one read)", (127, 127, 127), ours, "floor_us"),
          ("FlashInfer joint (graph)", (255, 127, 14), fi, "graph_us"), ("torch peer", (214, 39, 40), torch, "peer_us")]
for i, (name, col, _, _) in enumerate(series):
    x = LEFT + i * 190
    g.line([(x, 35), (x + 24, 35)], fill=col, width=3)
    g.text((x + 30, 29), name, fill="black")
ylo, yhi = 0.0, math.log10(30000)
xlo, xhi = math.log10(max(rows[0], 1)) - 0.1, math.log10(rows[-1]) + 0.1
for i, n in enumerate(ns):
    x0 = LEFT + i * (PW + 30)
    px = lambda r: x0 + (math.log10(r) - xlo) / (xhi - xlo) * PW
    py = lambda t: TOP + PH - (math.log10(max(t, 1)) - ylo) / (yhi - ylo) * PH
    for t in (1, 10, 100, 1000, 10000):
        g.line([(x0, py(t)), (x0 + PW, py(t))], fill=(221, 221, 221))
        g.text((x0 - 40, py(t) - 6), f"{t:>5}", fill="black")
    g.rectangle([x0, TOP, x0 + PW, TOP + PH], outline="black")
    g.text((x0 + 8, TOP + 6), f"N = {n or 'off'}", fill="black")
    for r in rows:
        g.text((px(r) - 6, TOP + PH + 6), str(r), fill="black")
    for _, col, res, k in series:
        pts = [(px(r), py(t)) for r in rows if (t := get(res, r, n, k)) is not None and t == t]
        if len(pts) > 1:
            g.line(pts, fill=col, width=2)
g.text((W // 2 - 20, TOP + PH + 28), "rows R", fill="black")
img.save(f"{d}/chart.png")
print(f"wrote {d}/chart.png")
